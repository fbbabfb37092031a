"""Runs PodNotifier records: one asyncio task per record, one exec stream per container.

No thread per request: every exec is a WebSocket stream on the event loop. The runner also
bounds how many records run at once across the server, ends a run as PodDeleted the moment its
pod is deleted, and on shutdown ends unfinished runs as Interrupted.

A run's final state is retried until the store accepts it (capped backoff, each failure
logged): a record left Running would refuse every later run of that notifier on that pod (409)
until a restart. Progress writes (Running, a container's result) are best effort; the final
write carries every container's result again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from apiserver.notifier import records
from apiserver.notifier.declarations import Notifier, SignalAction
from apiserver.notifier.events import RunEvents
from apiserver.notifier.exec_stream import (
    ExecResult,
    KubeEndpoint,
    StdoutFilter,
    exec_in_container,
)
from apiserver.notifier.stopping import GRACE_SECONDS, StoppingExec
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_INITIAL_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0


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
    timeout is stopped in the container, or the result says it could not be
    (`ExecResult.stopped`)."""

    async def __call__(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                       *, timeout_seconds: int, tail_bytes: int,
                       stop_on_timeout: bool = False) -> ExecResult: ...


class KubeExec:
    """`ContainerExec` through kube-apiserver's pods/exec, as the server's own identity;
    stopping a timed-out command is `apiserver.notifier.stopping`'s (SIGTERM, then SIGKILL after
    `grace_seconds`)."""

    def __init__(self, endpoint: Callable[[], KubeEndpoint],
                 grace_seconds: int = GRACE_SECONDS) -> None:
        self._endpoint = endpoint
        """Re-read for each exec: tokens rotate."""
        self._grace_seconds = grace_seconds

    async def __call__(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                       *, timeout_seconds: int, tail_bytes: int,
                       stop_on_timeout: bool = False) -> ExecResult:
        endpoint = self._endpoint()

        async def execute(command: Sequence[str], timeout: float,
                          stdout_filter: StdoutFilter | None) -> ExecResult:
            return await exec_in_container(endpoint, namespace, pod, container, command,
                                           timeout_seconds=timeout, tail_bytes=tail_bytes,
                                           stdout_filter=stdout_filter)

        if not stop_on_timeout:
            return await execute(argv, timeout_seconds, None)
        return await StoppingExec(execute, self._grace_seconds)(argv, timeout_seconds)


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


@dataclass
class _Run:
    task: asyncio.Task[None]
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Runner:
    def __init__(self, store: ObjectStore, execute: ContainerExec, pods: PodDeletions,
                 metrics: RunMetrics, max_concurrent: int, events: RunEvents) -> None:
        self._store = store
        self._execute = execute
        self._pods = pods
        self._metrics = metrics
        self._events = events
        self._max_concurrent = max_concurrent
        self._runs: dict[tuple[str, str], _Run] = {}

    def has_capacity(self) -> bool:
        return len(self._runs) < self._max_concurrent

    def start(self, plan: Plan) -> None:
        key = (plan.namespace, plan.record)
        run = _Run(asyncio.create_task(self._run(plan), name=f"run {plan.namespace}/{plan.record}"))
        self._runs[key] = run
        run.task.add_done_callback(lambda _task: self._forget(key, run))

    def _forget(self, key: tuple[str, str], run: _Run) -> None:
        run.done.set()
        if self._runs.get(key) is run:
            del self._runs[key]

    async def wait(self, namespace: str, record: str, timeout: float) -> None:
        """Return when the record's run ends, or after `timeout` seconds."""
        run = self._runs.get((namespace, record))
        if run is None or timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await run.done.wait()

    async def shutdown(self) -> None:
        """Cancel every run; each ends its record as Interrupted before it returns."""
        runs = list(self._runs.values())
        for run in runs:
            run.task.cancel()
        await asyncio.gather(*(run.task for run in runs), return_exceptions=True)

    async def _update(self, plan: Plan, mutate: Callable[[dict[str, Any]], dict[str, Any]]
                      ) -> dict[str, Any]:
        return await self._store.guaranteed_update(plan.namespace, plan.record, mutate)

    async def _progress(self, plan: Plan, mutate: Callable[[dict[str, Any]], dict[str, Any]]
                        ) -> None:
        """A progress write: a failure is logged and the run goes on (NotFound ends it)."""
        try:
            await self._update(plan, mutate)
        except NotFound:
            raise
        except Exception as error:
            log.warning("storing a run's progress failed; its final write carries it", extra={
                "namespace": plan.namespace, "podnotifier": plan.record,
                "error": f"{type(error).__name__}: {error}"})

    async def _final(self, plan: Plan, mutate: Callable[[dict[str, Any]], dict[str, Any]]
                     ) -> dict[str, Any]:
        """The final write, retried until stored; NotFound if the record was deleted."""
        return await retry_until_stored(
            lambda: self._update(plan, mutate), "storing a run's final state",
            extra={"namespace": plan.namespace, "podnotifier": plan.record},
            give_up=(NotFound,))

    async def _run(self, plan: Plan) -> None:
        started = time.monotonic()
        self._metrics.run_started()
        phase, reason = records.FAILED, records.INTERRUPTED
        entries: list[dict[str, Any]] = []
        """Every container result so far, applied again by the final write."""

        def ending(reason: str = "", message: str = "") -> Callable[[dict[str, Any]],
                                                                      dict[str, Any]]:
            def mutate(record: dict[str, Any]) -> dict[str, Any]:
                for entry in entries:
                    records.set_container(record, entry)
                return records.finish(record, records.now(), reason, message)
            return mutate

        try:
            try:
                start_time = records.now()
                await self._progress(plan, lambda r: records.mark_running(r, start_time))
                if plan.pod_not_running:
                    final = ending(records.POD_NOT_RUNNING, plan.pod_not_running)
                else:
                    final = await self._run_containers(plan, entries, ending)
            except (NotFound, asyncio.CancelledError):
                raise
            except Exception as error:
                log.exception("run failed", extra={"namespace": plan.namespace,
                                                   "podnotifier": plan.record})
                final = ending("InternalError", "the server failed while running the notifier: "
                               f"{type(error).__name__}")
            stored = await self._final(plan, final)
            self._events.run_finished(stored)
            phase, reason = stored["status"]["phase"], stored["status"].get("reason", "")
        except NotFound:
            log.info("record deleted while it ran", extra={"namespace": plan.namespace,
                                                            "podnotifier": plan.record})
            reason = "RecordDeleted"
        except asyncio.CancelledError:
            await _shielded(self._update(plan, ending(records.INTERRUPTED,
                                                      records.INTERRUPTED_MESSAGE)))
            raise
        finally:
            self._metrics.run_finished(phase, reason, time.monotonic() - started)

    async def _run_containers(
            self, plan: Plan, entries: list[dict[str, Any]],
            ending: Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Run the containers' notifiers, adding each result to `entries` as it comes; returns
        the final mutation."""
        for container in plan.containers:
            if container.not_running:
                entry = records.container_failure(container.name, records.CONTAINER_NOT_RUNNING,
                                                  container.not_running, records.now(),
                                                  container.container_id)
                entries.append(entry)
                await self._progress(plan, _with_container(entry))
        runnable = [c for c in plan.containers if not c.not_running]
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
                        entry = task.result()
                        entries.append(entry)
                        await self._progress(plan, _with_container(entry))
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
        signal = isinstance(container.notifier.action, SignalAction)
        result = await self._execute(
            plan.namespace, plan.pod, container.name, container.notifier.argv,
            timeout_seconds=plan.timeout_seconds[container.name], tail_bytes=plan.tail_bytes,
            stop_on_timeout=not signal)
        entry = records.container_result(container.name, container.container_id, result)
        if signal:
            return records.explain_signal_failure(entry)
        return entry


def _with_container(entry: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda record: records.set_container(record, entry)


async def _shielded(update: Awaitable[Any]) -> None:
    """Finish a store update even though the calling task is being cancelled (a failure is
    logged: the next server start ends the record as Interrupted)."""
    try:
        await asyncio.shield(update)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        log.warning("storing an interrupted run failed; the next start ends it", extra={
            "error": f"{type(error).__name__}: {error}"})
