"""Runs PodNotifier records: one asyncio task per record, one exec stream per container.

No thread per request: every exec is a WebSocket stream on the event loop. The runner also
bounds how many records run at once across the server, ends a run as PodDeleted the moment its
pod is deleted, and on shutdown ends unfinished runs as Interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from apiserver.notifier import records
from apiserver.notifier.declarations import Notifier, SignalAction
from apiserver.notifier.exec_stream import KubeEndpoint, exec_in_container
from apiserver.notifier.pods import PodDirectory
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore

log = logging.getLogger(__name__)


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
    def __init__(self, store: ObjectStore, endpoint: Callable[[], KubeEndpoint],
                 pods: PodDirectory, metrics: RunMetrics, max_concurrent: int) -> None:
        self._store = store
        self._endpoint = endpoint
        self._pods = pods
        self._metrics = metrics
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

    async def _run(self, plan: Plan) -> None:
        started = time.monotonic()
        self._metrics.run_started()
        phase, reason = records.FAILED, records.INTERRUPTED
        try:
            start_time = records.now()
            await self._update(plan, lambda r: records.mark_running(r, start_time))
            if plan.pod_not_running:
                final = await self._update(plan, lambda r: records.finish(
                    r, records.now(), records.POD_NOT_RUNNING, plan.pod_not_running))
            else:
                final = await self._run_containers(plan)
            phase, reason = final["status"]["phase"], final["status"].get("reason", "")
        except NotFound:
            log.info("record deleted while it ran", extra={"namespace": plan.namespace,
                                                            "podnotifier": plan.record})
            reason = "RecordDeleted"
        except asyncio.CancelledError:
            await _shielded(self._update(plan, lambda r: records.finish(
                r, records.now(), records.INTERRUPTED, records.INTERRUPTED_MESSAGE)))
            raise
        except Exception as error:
            log.exception("run failed", extra={"namespace": plan.namespace,
                                               "podnotifier": plan.record})
            reason = "InternalError"
            message = f"the server failed while running the notifier: {type(error).__name__}"
            with contextlib.suppress(Exception):
                await self._update(plan, lambda r: records.finish(
                    r, records.now(), reason, message))
        finally:
            self._metrics.run_finished(phase, reason, time.monotonic() - started)

    async def _run_containers(self, plan: Plan) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for container in plan.containers:
            if container.not_running:
                entry = records.container_failure(container.name, records.CONTAINER_NOT_RUNNING,
                                                  container.not_running, records.now(),
                                                  container.container_id)
                record = await self._update(plan, lambda r, e=entry: records.set_container(r, e))
        runnable = [c for c in plan.containers if not c.not_running]
        with self._pods.deletion(plan.namespace, plan.pod, plan.pod_uid) as deleted:
            tasks = {asyncio.create_task(self._exec(plan, c)): c for c in runnable}
            deletion = asyncio.create_task(deleted.wait())
            pending = set(tasks)
            try:
                while pending:
                    done, _ = await asyncio.wait(pending | {deletion},
                                                 return_when=asyncio.FIRST_COMPLETED)
                    for task in done & pending:
                        pending.discard(task)
                        entry = task.result()
                        record = await self._update(
                            plan, lambda r, e=entry: records.set_container(r, e))
                    if deletion in done and pending:
                        for task in pending:
                            task.cancel()
                        await asyncio.gather(*pending, return_exceptions=True)
                        return await self._update(plan, lambda r: records.finish(
                            r, records.now(), records.POD_DELETED,
                            f"pod {plan.pod} was deleted while the notifier ran"))
            finally:
                deletion.cancel()
                for task in pending:
                    task.cancel()
        if self._pods.gone(plan.namespace, plan.pod, plan.pod_uid) and any(
                c.get("phase") != records.SUCCEEDED
                for c in record.get("status", {}).get("containers", [])):
            return await self._update(plan, lambda r: records.finish(
                r, records.now(), records.POD_DELETED,
                f"pod {plan.pod} was deleted while the notifier ran"))
        return await self._update(plan, lambda r: records.finish(r, records.now()))

    async def _exec(self, plan: Plan, container: ContainerPlan) -> dict[str, Any]:
        result = await exec_in_container(
            self._endpoint(), plan.namespace, plan.pod, container.name, container.notifier.argv,
            timeout_seconds=plan.timeout_seconds[container.name], tail_bytes=plan.tail_bytes)
        entry = records.container_result(container.name, container.container_id, result)
        if isinstance(container.notifier.action, SignalAction):
            return records.explain_signal_failure(entry)
        return entry


async def _shielded(update: Any) -> None:
    """Finish a store update even though the calling task is being cancelled."""
    with contextlib.suppress(Exception):
        await asyncio.shield(update)
