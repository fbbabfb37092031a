"""Runs PodNotifier records: one asyncio task per record, one exec stream per container.

No thread per request: every exec is a WebSocket stream on the event loop. The runner also
bounds how many records run at once across the server, ends a run as PodDeleted the moment its
pod is deleted, and on shutdown ends unfinished runs as Interrupted.

A held notifier's run (``Plan.max_hold_seconds`` set) starts each container's command through
``HoldingExec.hold`` and waits for all of them to be ready (their ready line printed, or their
ready command exited 0); the record is then ``Held`` (with each command's PID and its output
tails so far, in that same write) and the run keeps the streams open until the first of: a
release request stored on the record (re-read every ``HOLD_POLL_SECONDS``, so a request that
reached any replica is seen), ``max_hold_seconds`` since it became Held, the pod's deletion, a
command exiting on its own, the server's shutdown. Then every command still running is stopped
(stdin closed, then SIGTERM/SIGKILL by PID) and the record ends Succeeded/Released, or
Failed/HoldExpired, PodDeleted, HoldEnded or Interrupted.

A record is created Running (``admission``), so a run writes its record once more when it
ends, with every container's result: two writes per run, none in between (a held run adds the
write that marks it Held). That final write is retried until the store accepts it (capped
backoff, each failure logged): a record left Running would refuse every later run of that
notifier on that pod (409) until a replica ends it as Interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from apiserver.api.types import Phase
from apiserver.notifier import records
from apiserver.notifier.declarations import Hold, Notifier, SignalAction
from apiserver.notifier.events import RunEvents
from apiserver.notifier.exec_protocol import ExecReason, Stop
from apiserver.notifier.exec_stream import (
    ExecResult,
    KubeEndpoint,
    OutputTails,
    StdoutFilter,
    exec_in_container,
)
from apiserver.notifier.held_exec import HeldCommand
from apiserver.notifier.http_action import HttpResult
from apiserver.notifier.http_declaration import HttpAction
from apiserver.notifier.stopping import (
    GRACE_SECONDS,
    Stopped,
    StoppingExec,
    stop_command,
)
from apiserver.registry.errors import Finished, NotFound
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import ObjectStore

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_INITIAL_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0
FINISHED_ELSEWHERE = "FinishedElsewhere"
"""The reason a run reports (in its log line and metrics, never in the record) when another
writer finished its record first (a takeover): the record keeps that writer's result."""
HOLD_POLL_SECONDS = 0.5
"""While Held, how often the run re-reads its record for a release request."""
HOLD_STREAM_MARGIN_SECONDS = 60
"""A held command's exec stream is closed at the latest this long after its ready timeout
plus maxHoldSeconds plus its two grace periods: a bound should the run itself miss the end of
the hold."""
READY_CHECK_TAIL_BYTES = 256
"""Output kept of one run of a ready command (only its exit code counts)."""


async def retry_until_stored(write: Callable[[], Awaitable[T]], what: str, *,
                             extra: Mapping[str, Any] | None = None,
                             give_up: tuple[type[BaseException], ...] = (),
                             sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
    """Call `write` until it returns, sleeping a capped, jittered, doubling backoff after each
    failure (logged); `give_up` errors (e.g. NotFound) are raised at once, and cancellation
    ends the attempts."""
    failures = 0
    while True:
        try:
            return await write()
        except give_up:
            raise
        except Exception as error:
            failures += 1
            delay = min(RETRY_MAX_SECONDS, RETRY_INITIAL_SECONDS * 2 ** (failures - 1))
            log.warning(f"{what} failed; retrying", extra={
                **(extra or {}), "error": f"{type(error).__name__}: {error}",
                "failures": failures, "retry_in_seconds": round(delay, 3)})
            await sleep(delay * (0.5 + random.random() / 2))


class ContainerExec(Protocol):
    """Runs a command in a container and reports how it ended (never raises for the command's
    own failure: that is in the result). With `stop_on_timeout`, a command that outlives its
    timeout is stopped in the container (SIGTERM, SIGKILL after `grace_seconds`: the notifier's
    terminationGracePeriodSeconds), or the result says it could not be (`ExecResult.stopped`)."""

    async def __call__(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                       *, timeout_seconds: int, tail_bytes: int,
                       stop_on_timeout: bool = False,
                       grace_seconds: int = GRACE_SECONDS) -> ExecResult: ...


class KubeExec:
    """`ContainerExec` through kube-apiserver's pods/exec, as the server's own identity;
    stopping a timed-out command is `apiserver.notifier.stopping`'s (SIGTERM, then SIGKILL after
    the notifier's grace period; `grace_seconds` where none is known, as for a dead replica's
    held commands)."""

    def __init__(self, endpoint: Callable[[], KubeEndpoint],
                 grace_seconds: int = GRACE_SECONDS) -> None:
        self._endpoint = endpoint
        """Re-read for each exec: tokens rotate."""
        self._grace_seconds = grace_seconds

    async def __call__(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                       *, timeout_seconds: int, tail_bytes: int,
                       stop_on_timeout: bool = False,
                       grace_seconds: int = GRACE_SECONDS) -> ExecResult:
        endpoint = self._endpoint()

        async def execute(command: Sequence[str], timeout: float,
                          stdout_filter: StdoutFilter | None) -> ExecResult:
            return await exec_in_container(endpoint, namespace, pod, container, command,
                                           timeout_seconds=timeout, tail_bytes=tail_bytes,
                                           stdout_filter=stdout_filter)

        if not stop_on_timeout:
            return await execute(argv, timeout_seconds, None)
        return await StoppingExec(execute, grace_seconds)(argv, timeout_seconds)

    def hold(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
             hold: Hold, tail_bytes: int, max_seconds: float,
             grace_seconds: int = GRACE_SECONDS) -> HeldCommand:
        endpoint = self._endpoint()

        async def execute(command: Sequence[str], timeout: float, stdout_filter: StdoutFilter,
                          close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
            return await exec_in_container(endpoint, namespace, pod, container, command,
                                           timeout_seconds=timeout, tail_bytes=tail_bytes,
                                           stdout_filter=stdout_filter, close_stdin=close_stdin,
                                           tails=tails)

        async def stop(pid: int) -> Stopped:
            return await self.stop(namespace, pod, container, pid, grace_seconds=grace_seconds)

        check = None
        if hold.ready_command is not None:
            ready_command = hold.ready_command

            async def check() -> ExecResult:
                return await self(namespace, pod, container, ready_command,
                                  timeout_seconds=hold.ready_period_seconds,
                                  tail_bytes=READY_CHECK_TAIL_BYTES, stop_on_timeout=True)

        return HeldCommand(execute, stop, argv, hold.ready_line, max_seconds,
                           tail_bytes=tail_bytes, ready_check=check,
                           ready_period_seconds=hold.ready_period_seconds,
                           release_grace_seconds=hold.release_grace_period_seconds)

    async def stop(self, namespace: str, pod: str, container: str, pid: int,
                   grace_seconds: int | None = None) -> Stopped:
        endpoint = self._endpoint()

        async def execute(command: Sequence[str], timeout: float,
                          stdout_filter: StdoutFilter | None) -> ExecResult:
            return await exec_in_container(endpoint, namespace, pod, container, command,
                                           timeout_seconds=timeout, stdout_filter=stdout_filter)

        return await stop_command(execute, pid, self._grace_seconds if grace_seconds is None
                                  else grace_seconds)


class CommandStopper(Protocol):
    """Stops a command by its PID in a container (SIGTERM, then SIGKILL after a grace
    period), as the server's identity; says how, never raises for a failed exec."""

    async def stop(self, namespace: str, pod: str, container: str, pid: int) -> Stopped: ...


class HoldingExec(CommandStopper, Protocol):
    """Starts held notifiers' commands (``apiserver.notifier.held_exec``) and stops commands
    by PID."""

    def hold(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
             hold: Hold, tail_bytes: int, max_seconds: float,
             grace_seconds: int = GRACE_SECONDS) -> HeldCommand:
        """Start ``argv`` held: stdin open, ready once it printed ``hold.ready_line`` (or
        ``hold.ready_command`` first exited 0), its exec stream closed after ``max_seconds``
        at the latest. On release it has ``hold.release_grace_period_seconds`` to end once
        stdin is closed, then ``grace_seconds`` between SIGTERM and SIGKILL."""
        ...


class ContainerHttp(Protocol):
    """Sends an http notifier's request to the pod's IP and reports how it ended (never raises
    for the request's own failure: that is in the result); ``apiserver.notifier.http_action``
    ``PodRequests``."""

    async def __call__(self, pod_ip: str, action: HttpAction, *, timeout_seconds: float,
                       head_bytes: int) -> HttpResult: ...


class PodDeletions(Protocol):
    """What the runner needs of ``apiserver.notifier.pods.PodDirectory``."""

    def deletion(self, namespace: str, name: str, uid: str
                 ) -> contextlib.AbstractContextManager[asyncio.Event]: ...

    def gone(self, namespace: str, name: str, uid: str) -> bool: ...


class RunMetrics(Protocol):
    def run_started(self) -> None: ...

    def run_finished(self, phase: str, reason: str, duration_seconds: float) -> None: ...


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    notifier: Notifier
    container_id: str = ""
    not_running: str = ""
    """Why the container cannot run the notifier (not running), or empty."""


@dataclass(frozen=True)
class Plan:
    """Everything a run needs, decided when the request was admitted."""

    namespace: str
    record: str
    pod: str
    pod_uid: str
    containers: tuple[ContainerPlan, ...]
    timeout_seconds: dict[str, int]
    """Per container: the enforced timeout."""
    tail_bytes: int
    pod_not_running: str = ""
    """Why the pod cannot run notifiers (not Running, terminating), or empty."""
    max_hold_seconds: int | None = None
    """Set for a held notifier: the longest its commands stay held once all are ready."""
    requester: str = ""
    """Who asked for the run (the record's ``spec.requestedBy.username``), for its log line."""
    pod_ip: str = ""
    """The pod's ``status.podIP`` when admitted: where http notifiers send their request."""


@dataclass
class _Run:
    task: asyncio.Task[None]
    done: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the record is Held or the run ended."""


@dataclass
class _Progress:
    """What a run's final write applies again, and how an interruption is worded."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    """Every container result so far."""
    interrupted_message: str = records.INTERRUPTED_MESSAGE


@dataclass
class _Ending:
    """How a hold ended: the record's reason, and who released it (RELEASED only)."""

    reason: str
    released_by: str = ""
    ended_container: str = ""
    """HOLD_ENDED: the first container whose command exited while held."""


class Runner:
    """Runs the records this replica admitted. ``holding`` runs held notifiers' commands and
    ``requests`` sends http notifiers' requests (a plan that needs one the runner was built
    without ends InternalError)."""

    def __init__(self, store: ObjectStore, execute: ContainerExec, pods: PodDeletions,
                 metrics: RunMetrics, max_concurrent: int, events: RunEvents,
                 holding: HoldingExec | None = None,
                 requests: ContainerHttp | None = None) -> None:
        self._store = store
        self._execute = execute
        self._holding = holding
        self._requests = requests
        self._pods = pods
        self._metrics = metrics
        self._events = events
        self._max_concurrent = max_concurrent
        self._runs: dict[tuple[str, str], _Run] = {}

    def has_capacity(self) -> bool:
        return len(self._runs) < self._max_concurrent

    def is_running(self, namespace: str, record: str) -> bool:
        """Whether this process runs the record (from its start until its run has ended)."""
        return (namespace, record) in self._runs

    def start(self, plan: Plan) -> None:
        key = (plan.namespace, plan.record)
        run = _Run(asyncio.create_task(self._run(plan), name=f"run {plan.namespace}/{plan.record}"))
        self._runs[key] = run
        run.task.add_done_callback(lambda _task: self._forget(key, run))

    def _forget(self, key: tuple[str, str], run: _Run) -> None:
        run.done.set()
        run.settled.set()
        if self._runs.get(key) is run:
            del self._runs[key]

    def _settle(self, plan: Plan) -> None:
        run = self._runs.get((plan.namespace, plan.record))
        if run is not None:
            run.settled.set()

    async def wait(self, namespace: str, record: str, timeout: float) -> None:
        """Return when the record's run settles, or after `timeout` seconds: it ended, or (a
        held notifier) its record became Held. A run this replica does not hold has settled.
        Read the record to tell which (``records.is_finished``, phase Held)."""
        run = self._runs.get((namespace, record))
        if run is None or timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await run.settled.wait()

    async def shutdown(self) -> None:
        """Cancel every run; each ends its record as Interrupted before it returns."""
        runs = list(self._runs.values())
        for run in runs:
            run.task.cancel()
        await asyncio.gather(*(run.task for run in runs), return_exceptions=True)

    async def _update(self, plan: Plan, mutate: Callable[[dict[str, Any]], dict[str, Any]]
                      ) -> dict[str, Any]:
        return await self._store.guaranteed_update(plan.namespace, plan.record, mutate)

    async def _final(self, plan: Plan, mutate: Callable[[dict[str, Any]], dict[str, Any]]
                     ) -> dict[str, Any]:
        """The final write, retried until stored; NotFound if the record was deleted."""
        return await retry_until_stored(
            lambda: self._update(plan, mutate), "storing a run's final state",
            extra={"namespace": plan.namespace, "podnotifier": plan.record},
            give_up=(NotFound, Finished))

    async def _run(self, plan: Plan) -> None:
        started = time.monotonic()
        self._metrics.run_started()
        phase, reason = records.FAILED, records.INTERRUPTED
        progress = _Progress()
        entries = progress.entries
        last: dict[str, Any] | None = None  # as this run last stored it; logged at its end

        def ending(reason: str = "", message: str = "", *,
                   success: tuple[str, str] | None = None,
                   released: tuple[str, str] | None = None
                   ) -> Callable[[dict[str, Any]], dict[str, Any]]:
            def mutate(record: dict[str, Any]) -> dict[str, Any]:
                for entry in entries:
                    records.set_container(record, entry)
                if released is not None:
                    records.mark_released(record, *released)
                return records.finish(record, records.now(), reason, message, success=success)
            return mutate

        try:
            try:
                if plan.pod_not_running:
                    final = ending(records.POD_NOT_RUNNING, plan.pod_not_running)
                else:
                    final = await self._run_containers(plan, progress, ending)
            except (NotFound, Finished, asyncio.CancelledError):
                raise
            except Exception as error:
                log.exception("run failed", extra={"namespace": plan.namespace,
                                                   "podnotifier": plan.record})
                final = ending("InternalError", "the server failed while running the notifier: "
                               f"{type(error).__name__}")
            last = stored = await self._final(plan, final)
            self._events.run_finished(stored)
            phase, reason = stored["status"]["phase"], stored["status"].get("reason", "")
        except NotFound:
            log.info("record deleted while it ran", extra={"namespace": plan.namespace,
                                                            "podnotifier": plan.record})
            reason = "RecordDeleted"
        except Finished as finished:
            log.warning("the record was finished by another writer (its run was taken over); "
                        "this run stores nothing more", extra={
                            "namespace": plan.namespace, "podnotifier": plan.record,
                            "phase": finished.phase})
            phase, reason = Phase(finished.phase), FINISHED_ELSEWHERE
        except asyncio.CancelledError:
            last = await _shielded(self._update(plan, ending(records.INTERRUPTED,
                                                             progress.interrupted_message))
                                   ) or last
            raise
        finally:
            duration = time.monotonic() - started
            self._metrics.run_finished(phase, reason, duration)
            log.info("run finished", extra=run_summary(plan, last, phase, reason, duration))

    async def _run_containers(
            self, plan: Plan, progress: _Progress,
            ending: Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Run the containers' notifiers, adding each result to `progress.entries` as it comes;
        returns the final mutation."""
        entries = progress.entries
        for container in plan.containers:
            if container.not_running:
                entry = records.container_failure(container.name, records.CONTAINER_NOT_RUNNING,
                                                  container.not_running, records.now(),
                                                  container.container_id)
                entries.append(entry)
        runnable = [c for c in plan.containers if not c.not_running]
        if plan.max_hold_seconds is not None:
            if len(runnable) < len(plan.containers):
                return ending(records.CONTAINER_NOT_RUNNING, "a held notifier holds every "
                              "selected container or none, and not every one is running: "
                              "nothing was run")
            return await self._hold(plan, runnable, progress, ending)
        deleted_message = f"pod {plan.pod} was deleted while the notifier ran"
        with self._pods.deletion(plan.namespace, plan.pod, plan.pod_uid) as deleted:
            tasks = {asyncio.create_task(self._exec(plan, c)): c for c in runnable}
            deletion = asyncio.create_task(deleted.wait())
            pending = set(tasks)
            try:
                while pending:
                    done, _ = await asyncio.wait(pending | {deletion},
                                                 return_when=asyncio.FIRST_COMPLETED)
                    for task in [t for t in pending if t in done]:
                        pending.discard(task)
                        entries.append(task.result())
                    if deletion in done and pending:
                        for task in pending:
                            task.cancel()
                        await asyncio.gather(*pending, return_exceptions=True)
                        return ending(records.POD_DELETED, deleted_message)
            finally:
                deletion.cancel()
                for task in pending:
                    task.cancel()
        if self._pods.gone(plan.namespace, plan.pod, plan.pod_uid) and any(
                entry.get("phase") != records.SUCCEEDED for entry in entries):
            return ending(records.POD_DELETED, deleted_message)
        return ending()

    async def _exec(self, plan: Plan, container: ContainerPlan) -> dict[str, Any]:
        action = container.notifier.action
        if isinstance(action, HttpAction):
            if self._requests is None:
                raise RuntimeError("this server was built without a ContainerHttp")
            sent = await self._requests(plan.pod_ip, action,
                                        timeout_seconds=plan.timeout_seconds[container.name],
                                        head_bytes=plan.tail_bytes)
            return records.http_result(container.name, container.container_id, sent)
        signal = isinstance(action, SignalAction)
        result = await self._execute(
            plan.namespace, plan.pod, container.name, container.notifier.argv,
            timeout_seconds=plan.timeout_seconds[container.name], tail_bytes=plan.tail_bytes,
            stop_on_timeout=not signal,
            grace_seconds=container.notifier.termination_grace_period_seconds)
        entry = records.container_result(container.name, container.container_id, result)
        if signal:
            return records.explain_signal_failure(entry)
        return entry


    # Held notifiers

    async def _hold(self, plan: Plan, runnable: Sequence[ContainerPlan], progress: _Progress,
                    ending: Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]
                    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Start every container's held command, hold them once all are ready, end them as
        the hold ends; returns the final mutation. However the run ends (shutdown, record
        deleted, a failure of the server), the commands still running are stopped first."""
        if self._holding is None:
            raise RuntimeError("this server was built without a HoldingExec")
        assert plan.max_hold_seconds is not None
        hold_seconds = plan.max_hold_seconds
        commands: dict[str, HeldCommand] = {}
        held: dict[str, dict[str, Any]] = {}
        try:
            for container in runnable:
                declared = container.notifier
                assert declared.hold is not None
                commands[container.name] = self._holding.hold(
                    plan.namespace, plan.pod, container.name, declared.argv,
                    hold=declared.hold, tail_bytes=plan.tail_bytes,
                    max_seconds=plan.timeout_seconds[container.name] + hold_seconds
                    + declared.hold.release_grace_period_seconds
                    + declared.termination_grace_period_seconds + HOLD_STREAM_MARGIN_SECONDS,
                    grace_seconds=declared.termination_grace_period_seconds)
            with self._pods.deletion(plan.namespace, plan.pod, plan.pod_uid) as deleted:
                failure = await self._until_ready(plan, runnable, commands, deleted)
                if failure is not None:
                    return await self._not_held(plan, runnable, commands, failure, progress,
                                                ending)
                at = records.now()
                pids = {name: command.pid for name, command in commands.items()}
                held = {name: {"heldTime": at, **({"pid": pid} if pid is not None else {})}
                        for name, pid in pids.items()}
                outputs = {name: command.output() for name, command in commands.items()}
                stored = await self._final(
                    plan, lambda r: records.mark_held(r, at, pids, outputs))
                self._settle(plan)
                self._events.held(stored)
                log.info("notifier held", extra={"namespace": plan.namespace,
                                                 "podnotifier": plan.record, "pids": pids})
                end = await self._while_held(plan, commands, deleted, stored, hold_seconds)
            if end.reason == records.HOLD_ENDED and self._pods.gone(
                    plan.namespace, plan.pod, plan.pod_uid):
                end = _Ending(records.POD_DELETED)
            return await self._end_hold(plan, runnable, commands, held, end, progress, ending)
        except BaseException as error:
            stopping = asyncio.ensure_future(self._stop_all(runnable, commands, held))
            try:
                stopped_entries = await asyncio.shield(stopping)
            except asyncio.CancelledError:
                raise error from None
            if isinstance(error, asyncio.CancelledError):
                progress.entries.extend(stopped_entries)
                unstopped = [e["name"] for e in stopped_entries
                             if e.get("stopped") == str(Stop.NOT_STOPPED)]
                progress.interrupted_message = (
                    "the server stopped while this held notifier ran; "
                    + (f"stopping the command failed in {', '.join(unstopped)}: it may still "
                       "run" if unstopped else "its commands were stopped"))
            raise

    async def _until_ready(self, plan: Plan, runnable: Sequence[ContainerPlan],
                           commands: Mapping[str, HeldCommand], deleted: asyncio.Event
                           ) -> tuple[str, str] | None:
        """None once every command is ready; else (what failed: ``_ENDED``, ``_TIMED_OUT`` or
        ``POD_DELETED``, the container it failed in or "")."""
        waiters: dict[asyncio.Task[Any], str] = {
            asyncio.create_task(_ready_or_not(commands[c.name], plan.timeout_seconds[c.name])):
            c.name for c in runnable}
        deletion: asyncio.Task[Any] = asyncio.create_task(deleted.wait())
        try:
            pending: set[asyncio.Task[Any]] = set(waiters)
            while pending:
                done, _ = await asyncio.wait(pending | {deletion},
                                             return_when=asyncio.FIRST_COMPLETED)
                if deletion in done:
                    return records.POD_DELETED, ""
                for task in done:
                    pending.discard(task)
                    if task in waiters and task.result() != _READY:
                        return task.result(), waiters[task]
            return None
        finally:
            for task in (*waiters, deletion):
                task.cancel()

    async def _not_held(self, plan: Plan, runnable: Sequence[ContainerPlan],
                        commands: Mapping[str, HeldCommand], failure: tuple[str, str],
                        progress: _Progress,
                        ending: Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]
                        ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Not every command became ready: stop them all; the failing container says why."""
        what, failed = failure

        async def end(container: ContainerPlan) -> dict[str, Any]:
            command = commands[container.name]
            assert container.notifier.hold is not None
            readiness = _readiness(container.notifier.hold)
            if command.ended.is_set():
                result = await command.result()
                entry = records.container_result(container.name, container.container_id, result)
                if result.exit_code == 0 or container.name != failed:
                    return {**entry, "phase": records.FAILED, "reason": records.NOT_READY,
                            "message": f"the command exited (exit code {result.exit_code}) "
                                       f"before every container was ready ({readiness})"}
                return entry
            result, stopped = await command.release()
            entry = {**records.container_result(container.name, container.container_id,
                                                result), "stopped": str(stopped.stop),
                     "phase": records.FAILED}
            if what == records.POD_DELETED:
                return {**entry, "reason": records.POD_DELETED, "message": f"pod {plan.pod} "
                        f"was deleted before the notifier was held; {stopped.how}"}
            if container.name == failed:
                seconds = plan.timeout_seconds[container.name]
                return {**entry, "reason": str(ExecReason.TIMEOUT), "message":
                        f"{_not_ready(container.notifier.hold, command)} within {seconds}s; "
                        f"{stopped.how}"}
            return {**entry, "reason": records.NOT_READY, "message": f"stopped: container "
                    f"{failed} did not become ready; {stopped.how}"}

        ends = await asyncio.gather(*(end(c) for c in runnable))
        progress.entries.extend(ends)
        if what == records.POD_DELETED:
            return ending(records.POD_DELETED,
                          f"pod {plan.pod} was deleted before the notifier was held")
        reason = next(e["reason"] for e in ends if e["name"] == failed)
        return ending(reason)

    async def _while_held(self, plan: Plan, commands: Mapping[str, HeldCommand],
                          deleted: asyncio.Event, record: dict[str, Any], hold_seconds: int
                          ) -> _Ending:
        """Wait for the first end of the hold, re-reading the record for a release request."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold_seconds
        watched = [asyncio.create_task(deleted.wait()),
                   *(asyncio.create_task(command.ended.wait()) for command in commands.values())]
        try:
            while True:
                by = records.release_requested(record)
                if by is not None:
                    return _Ending(records.RELEASED, released_by=by)
                if deleted.is_set():
                    return _Ending(records.POD_DELETED)
                ended = [name for name, command in commands.items() if command.ended.is_set()]
                if ended:
                    return _Ending(records.HOLD_ENDED, ended_container=ended[0])
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return _Ending(records.HOLD_EXPIRED)
                await asyncio.wait(watched, timeout=min(HOLD_POLL_SECONDS, remaining),
                                   return_when=asyncio.FIRST_COMPLETED)
                try:
                    record = await self._store.get(plan.namespace, plan.record)
                except NotFound:
                    raise
                except Exception as error:
                    log.warning("reading a held record failed; retrying", extra={
                        "namespace": plan.namespace, "podnotifier": plan.record,
                        "error": f"{type(error).__name__}: {error}"})
                if records.is_finished(record):  # taken over: stop holding, write nothing
                    raise Finished(PODNOTIFIERS, plan.record,
                                   str(record.get("status", {}).get("phase")))
        finally:
            for task in watched:
                task.cancel()

    async def _end_hold(self, plan: Plan, runnable: Sequence[ContainerPlan],
                        commands: Mapping[str, HeldCommand], held: Mapping[str, Any],
                        end: _Ending, progress: _Progress,
                        ending: Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]
                        ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Stop every command still running and word how the hold ended."""
        exited = {name for name, command in commands.items() if command.ended.is_set()}

        async def end_one(container: ContainerPlan) -> dict[str, Any]:
            result, stopped = await _ended(commands[container.name])
            entry = {**records.container_result(container.name, container.container_id,
                                                result), "stopped": str(stopped.stop)}
            reason, succeeded = end.reason, False
            if end.reason == records.RELEASED:
                succeeded = stopped.stop is not Stop.NOT_STOPPED
                reason = records.RELEASED if succeeded else records.STOP_FAILED
                message = f"released by {end.released_by or 'a request'}; {stopped.how}"
            elif end.reason == records.HOLD_EXPIRED:
                message = (f"not released within maxHoldSeconds ({plan.max_hold_seconds}s) "
                           f"after it was held; {stopped.how}")
            elif end.reason == records.HOLD_ENDED and container.name in exited and (
                    result.exit_code is None):
                message = (f"the exec stream of the held command broke ({result.message}), so "
                           "what it held may have ended then, before the release; "
                           f"{stopped.how}")
            elif end.reason == records.HOLD_ENDED and container.name in exited:
                del entry["stopped"]
                message = (f"the command exited on its own while held (exit code "
                           f"{result.exit_code}): what it held ended before the release")
            elif end.reason == records.HOLD_ENDED:
                message = (f"stopped: the command of container {end.ended_container} exited "
                           f"while held, which ended the hold; {stopped.how}")
            else:
                message = f"pod {plan.pod} was deleted while the notifier was held; {stopped.how}"
            return records.held_container(entry, held.get(container.name), reason=reason,
                                          message=message, succeeded=succeeded)

        ends = await asyncio.gather(*(end_one(c) for c in runnable))
        progress.entries.extend(ends)
        count = len(ends)
        if end.reason == records.RELEASED:
            released = (records.now(), end.released_by)
            by = end.released_by or "a request"
            if all(e["phase"] == records.SUCCEEDED for e in ends):
                return ending(success=(records.RELEASED, f"released by {by}: {count}/{count} "
                                       "held commands ended"), released=released)
            return ending(records.STOP_FAILED, "released, but not every held command could be "
                          "stopped: it may still run", released=released)
        if end.reason == records.HOLD_EXPIRED:
            return ending(records.HOLD_EXPIRED, f"not released within maxHoldSeconds "
                          f"({plan.max_hold_seconds}s); the held commands were stopped")
        if end.reason == records.HOLD_ENDED:
            return ending(records.HOLD_ENDED, f"the command of container {end.ended_container} "
                          "exited on its own while held: the hold ended before its release")
        return ending(records.POD_DELETED, f"pod {plan.pod} was deleted while the notifier "
                      "was held")

    async def _stop_all(self, runnable: Sequence[ContainerPlan],
                        commands: Mapping[str, HeldCommand], held: Mapping[str, Any]
                        ) -> list[dict[str, Any]]:
        """Stop every command still running as the run is cut short; their Interrupted
        entries."""

        async def stop(container: ContainerPlan) -> dict[str, Any]:
            result, stopped = await _ended(commands[container.name])
            entry = {**records.container_result(container.name, container.container_id,
                                                result), "stopped": str(stopped.stop)}
            return records.held_container(entry, held.get(container.name),
                                          reason=records.INTERRUPTED,
                                          message="the server stopped while the notifier was "
                                                  f"held or starting; {stopped.how}")

        return list(await asyncio.gather(*(stop(c) for c in runnable if c.name in commands)))


def run_summary(plan: Plan, record: Mapping[str, Any] | None, phase: str, reason: str,
                duration_seconds: float) -> dict[str, Any]:
    """The fields of a finished run's log line: which record, pod and notifier, how it ended,
    how long it took, who asked, and for a held run when it was held. Never the commands'
    output or the messages (which quote it): those are for whoever may read the record.
    `record` is the run's last stored state (None if it never stored one)."""
    spec = record.get("spec", {}) if record else {}
    notifier = spec.get("notifier") or next((c.notifier.name for c in plan.containers), "")
    fields: dict[str, Any] = {
        "namespace": plan.namespace, "podnotifier": plan.record, "pod": plan.pod,
        "notifier": notifier, "phase": phase, "reason": reason,
        "duration_seconds": round(max(duration_seconds, 0.0), 3),
        "requester": plan.requester,
    }
    held_time = record.get("status", {}).get("heldTime") if record else None
    if held_time:
        fields["held_time"] = held_time
    return fields


_READY, _ENDED, _TIMED_OUT = "Ready", "Ended", "TimedOut"


def _readiness(hold: Hold) -> str:
    """How the hold's command is seen ready, for messages."""
    if hold.ready_command is not None:
        return f"ready command {shlex.join(hold.ready_command)}"
    return f'ready line "{hold.ready_line}"'


def _not_ready(hold: Hold, command: HeldCommand) -> str:
    """What a command that did not become ready in time failed to do."""
    if hold.ready_command is None:
        return f'did not print its ready line "{hold.ready_line}"'
    last = command.last_check
    said = ("it never ran: the command's PID was not reported" if last is None
            else f"the last run: exit code {last.exit_code}" if last.exit_code is not None
            else f"the last run: {last.message or last.reason}")
    return (f"its ready command {shlex.join(hold.ready_command)} did not exit 0 ({said}, run "
            f"every {hold.ready_period_seconds}s)")


async def _ready_or_not(command: HeldCommand, timeout: float) -> str:
    """``_READY`` once the command printed its ready line; ``_ENDED`` if its exec ended first;
    ``_TIMED_OUT`` after ``timeout`` seconds."""
    waiters = [asyncio.create_task(command.ready.wait()),
               asyncio.create_task(command.ended.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    if command.ready.is_set():
        return _READY
    return _ENDED if command.ended.is_set() else _TIMED_OUT


async def _ended(command: HeldCommand) -> tuple[ExecResult, Stopped]:
    """The command's result, released first if it still runs."""
    if command.ended.is_set():
        result = await command.result()
        if result.exit_code is None and command.pid is not None:
            return result, await command.stop_lost()  # the stream broke: it may still run
        who = f"the command (PID {command.pid})" if command.pid is not None else "the command"
        return result, Stopped(Stop.EXITED, f"{who} had exited before it was stopped")
    return await command.release()


async def _shielded(update: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    """Finish a store update even though the calling task is being cancelled: the stored
    record, or None if it failed (logged: the next server start ends the record as
    Interrupted)."""
    try:
        return await asyncio.shield(update)
    except asyncio.CancelledError:
        raise
    except Finished:
        log.info("an interrupted run's record was already finished by another writer")
        return None
    except Exception as error:
        log.warning("storing an interrupted run failed; the next start ends it", extra={
            "error": f"{type(error).__name__}: {error}"})
        return None
