"""Running Notifications: each pod in scope gets one ordinary PodNotifier run.

A run starts at most `parallelism` pods at a time. With failurePolicy Abort it starts no new pod
after the first failure; with Continue it runs them all. When the Notification ends Failed, or
is deleted before it finished, `rollback.notifier` runs on every pod whose notifier succeeded.
The pod set lives in the scope table (apiserver/fanout/scope.py); the object only carries a
bounded summary, whatever the pod count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from apiserver.api.time import parse_timestamp
from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Authorizer
from apiserver.errors import APIError
from apiserver.fanout import scope
from apiserver.fanout.scope import ScopedPod, ScopeStore
from apiserver.fanout.spec import ABORT, ALL_PODS, selector_string
from apiserver.kube import KubeClient, KubeRejected, KubeUnavailable
from apiserver.notifier import records
from apiserver.notifier.admission import Admission
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import Runner
from apiserver.registry.errors import NotFound, StoreError
from apiserver.registry.store import ObjectStore

log = logging.getLogger(__name__)

STATUS_INTERVAL_SECONDS = 0.5
RUN_WAIT_SECONDS = 24 * 3600
"""How long a pod's turn waits for its run; runs end by their own timeouts long before."""


def requester(notification: dict[str, Any]) -> UserInfo:
    who = notification["spec"].get("requestedBy", {})
    return UserInfo(who.get("username", ""), who.get("uid", ""), list(who.get("groups", [])),
                    {k: list(v) for k, v in who.get("extra", {}).items()})


def notification_label(name: str) -> dict[str, str]:
    return {records.NOTIFICATION_LABEL: name} if len(name) <= 63 else {}


class FanoutMetrics(Protocol):
    def notification_finished(self, phase: str) -> None: ...


@dataclass(frozen=True)
class RunParts:
    """What a Notification run uses."""

    notifications: ObjectStore
    podnotifiers: ObjectStore
    kube: KubeClient
    runner: Runner
    admission: Admission
    metrics: FanoutMetrics


class NotificationRun:
    def __init__(self, svc: RunParts, authorizer: Authorizer, scopes: ScopeStore,
                 notification: dict[str, Any]) -> None:
        self.svc, self.authorizer, self.scopes = svc, authorizer, scopes
        meta, self.spec = notification["metadata"], notification["spec"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.status: dict[str, Any] = dict(notification.get("status") or {})
        self.pods: dict[str, ScopedPod] = {}
        self.deleted = asyncio.Event()
        """Set when the Notification is deleted: start no more pods, then roll back."""
        self.failed_fast = False
        self.queue: asyncio.Queue[ScopedPod] = asyncio.Queue()
        self.requester = requester(notification)
        self._pending_flush: asyncio.Task[None] | None = None

    # status

    async def _write_status(self, **changes: Any) -> None:
        """Store the status: at once when `changes` (phase, times, conditions) are given; a
        change of counts alone is coalesced with others for STATUS_INTERVAL_SECONDS, so a
        1000-pod run writes its object tens of times, not thousands."""
        self.status.update(changes)
        if changes:
            if self._pending_flush is not None:
                self._pending_flush.cancel()
                self._pending_flush = None
            await self._flush_status()
        elif self._pending_flush is None:
            self._pending_flush = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(STATUS_INTERVAL_SECONDS)
        self._pending_flush = None
        await self._flush_status()

    async def _flush_status(self) -> None:
        self.status["counts"] = scope.counts(list(self.pods.values()))
        snapshot = dict(self.status)
        if self.deleted.is_set():
            return
        try:
            await self.svc.notifications.guaranteed_update(
                self.namespace, self.name, lambda obj: {**obj, "status": snapshot})
        except NotFound:
            self.deleted.set()

    async def _set_pod(self, pod: ScopedPod) -> None:
        self.pods[pod.pod_uid] = pod
        await self.scopes.set_state(self.uid, pod.pod_uid, pod.state, pod.record, pod.reason)
        await self._write_status()

    # the run

    async def run(self) -> None:
        for pod in await self.scopes.pods(self.uid):
            self.pods[pod.pod_uid] = pod
        await self._settle_started()
        started = self.status.get("startTime") or records.now()
        await self._write_status(phase=records.RUNNING, startTime=started)
        for pod in self.pods.values():
            if pod.state == scope.PENDING:
                self.queue.put_nowait(pod)
        watcher = (asyncio.create_task(self._watch_new_pods())
                   if self.spec["policy"] == ALL_PODS else None)
        try:
            deadline_passed = await self._run_pods(started)
            await self._finish(deadline_passed)
        finally:
            for task in (watcher, self._pending_flush):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    async def _settle_started(self) -> None:
        """After a restart: a pod whose run had started is never run again; its record says how
        it ended (Interrupted if the server stopped during it)."""
        for pod in list(self.pods.values()):
            if pod.state != scope.STARTED:
                continue
            state, reason = scope.FAILED, records.INTERRUPTED
            if pod.record:
                with contextlib.suppress(NotFound):
                    record = await self.svc.podnotifiers.get(self.namespace, pod.record)
                    if record["status"]["phase"] == records.SUCCEEDED:
                        state, reason = scope.SUCCEEDED, records.COMPLETED
                    elif records.is_finished(record):
                        reason = record["status"].get("reason", reason)
            await self._set_pod(ScopedPod(pod.pod, pod.pod_uid, state, pod.record, reason))

    def _deadline(self, started: str) -> float | None:
        seconds = self.spec.get("activeDeadlineSeconds")
        start = parse_timestamp(started)
        if seconds is None or start is None:
            return None
        return time.monotonic() + max(0.0, start + seconds - datetime.now(UTC).timestamp())

    async def _run_pods(self, started: str) -> bool:
        """Start pods as slots free up; returns True if the deadline stopped the run."""
        deadline = self._deadline(started)
        slots = asyncio.Semaphore(self.spec["parallelism"])
        running: set[asyncio.Task[None]] = set()
        all_pods = self.spec["policy"] == ALL_PODS
        deadline_passed = False
        while not (self.deleted.is_set() or self.failed_fast):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                deadline_passed = True
                break
            if self.queue.empty() and not all_pods and not running:
                break
            pod = await self._next(remaining, running)
            if pod is None:
                continue
            await slots.acquire()
            if self.deleted.is_set() or self.failed_fast:
                slots.release()
                break
            task = asyncio.create_task(self._turn(pod))
            running.add(task)
            task.add_done_callback(lambda t: (running.discard(t), slots.release()))
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        return deadline_passed

    async def _next(self, remaining: float | None, running: set[asyncio.Task[None]]
                    ) -> ScopedPod | None:
        """The next pending pod; None when woken without one (a pod finished, deletion,
        deadline), so the caller re-checks its conditions."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        waiters: list[asyncio.Task[Any]] = [asyncio.create_task(self.queue.get()),
                                            asyncio.create_task(self.deleted.wait())]
        if running:
            waiters.append(asyncio.create_task(
                asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)))
        try:
            done, _ = await asyncio.wait(waiters, timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters[1:]:
                waiter.cancel()
        getter = waiters[0]
        if getter not in done:
            getter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await getter
        # The get may have completed while it was being cancelled: never drop a pod.
        return None if getter.cancelled() else getter.result()

    async def _turn(self, pod: ScopedPod) -> None:
        await self._set_pod(ScopedPod(pod.pod, pod.pod_uid, scope.STARTED))
        state, record, reason = await self._notify(pod, self.spec["notifier"])
        await self._set_pod(ScopedPod(pod.pod, pod.pod_uid, state, record, reason))
        if state == scope.FAILED and self.spec["failurePolicy"] == ABORT:
            self.failed_fast = True

    async def _notify(self, pod: ScopedPod, notifier: str) -> tuple[str, str, str]:
        """Run `notifier` on the pod as the Notification's requester: (state, record, reason)."""
        ask = NotifyRequest(name="", generate_name="", labels=notification_label(self.name),
                            notifier=notifier, containers=self.spec.get("containers"),
                            timeout_seconds=self.spec.get("timeoutSeconds"),
                            ttl_seconds_after_finished=None)
        try:
            pod_object = await self.svc.kube.get(
                f"/api/v1/namespaces/{self.namespace}/pods/{pod.pod}")
        except KubeRejected as error:
            if error.status_code == 404:
                return scope.FAILED, "", records.POD_DELETED
            return scope.FAILED, "", "InternalError"
        except KubeUnavailable:
            return scope.FAILED, "", "ServiceUnavailable"
        if pod_object["metadata"]["uid"] != pod.pod_uid:
            return scope.FAILED, "", records.POD_DELETED
        try:
            admitted = await self.svc.admission.admit(self.requester, pod_object, ask)
            created = await self.svc.admission.start(admitted)
        except APIError as error:
            if error.code == 404:
                return scope.SKIPPED, "", "NotifierNotDeclared"
            return scope.FAILED, "", error.reason
        except StoreError as error:
            return scope.FAILED, "", error.reason
        except KubeUnavailable:
            return scope.FAILED, "", "ServiceUnavailable"
        name = created["metadata"]["name"]
        await self.scopes.set_state(self.uid, pod.pod_uid, scope.STARTED, name)
        await self.svc.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
        try:
            record = await self.svc.podnotifiers.get(self.namespace, name)
        except NotFound:
            return scope.FAILED, name, "RecordDeleted"
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, name, records.COMPLETED
        return scope.FAILED, name, record["status"].get("reason", "Failed")

    async def _watch_new_pods(self) -> None:
        """AllPods: pods that later match the selector and run join the scope, once each."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        params = {"labelSelector": selector_string(self.spec["selector"]),
                  "timeoutSeconds": "300"}
        while True:
            try:
                async for event in self.svc.kube.watch(path, params):
                    if event.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    meta = event["object"]["metadata"]
                    params["resourceVersion"] = meta.get("resourceVersion", "")
                    if meta.get("deletionTimestamp") or meta["uid"] in self.pods:
                        continue
                    if event["object"].get("status", {}).get("phase") != "Running":
                        continue  # a new pod joins once it runs, not while it is created
                    if await self.scopes.add(self.uid, [(meta["name"], meta["uid"])]):
                        pod = ScopedPod(meta["name"], meta["uid"], scope.PENDING)
                        self.pods[pod.pod_uid] = pod
                        self.queue.put_nowait(pod)
                        await self._write_status()
            except (KubeRejected, KubeUnavailable) as error:
                log.warning("notification pod watch failed; retrying",
                            extra={"notification": self.name, "error": str(error)})
                params.pop("resourceVersion", None)
                await asyncio.sleep(2)

    async def _finish(self, deadline_passed: bool) -> None:
        counts = scope.counts(list(self.pods.values()))
        unfinished = counts["pending"] > 0
        failed = counts["failed"] > 0 or (deadline_passed and unfinished
                                          and self.spec["policy"] != ALL_PODS)
        if self.deleted.is_set() or failed:
            await self._rollback()
        if self.deleted.is_set():
            await self.scopes.forget(self.uid)
            return
        now = records.now()
        if failed:
            reason = ("DeadlineExceeded" if counts["failed"] == 0 else
                      "FailFast" if self.failed_fast and unfinished else "PodsFailed")
            message = (f"{counts['failed']} of {counts['total']} pods failed"
                       + (f"; {counts['pending']} not started" if unfinished else "")
                       + (f"; rolled back {counts['rolledBack']}" if "rollback" in self.spec
                          else ""))
            condition = {"type": "Failed", "status": "True", "reason": reason,
                         "message": message, "lastTransitionTime": now}
            phase = records.FAILED
        else:
            condition = {"type": "Complete", "status": "True", "reason": "PodsSucceeded",
                         "message": f"{counts['succeeded']} pods succeeded, "
                                    f"{counts['skipped']} skipped",
                         "lastTransitionTime": now}
            phase = records.SUCCEEDED
        await self._write_status(phase=phase, completionTime=now, conditions=[condition])
        self.svc.metrics.notification_finished(phase)

    async def _rollback(self) -> None:
        notifier = self.spec.get("rollback", {}).get("notifier")
        if not notifier:
            return
        targets = [p for p in self.pods.values()
                   if p.state == scope.SUCCEEDED and not p.rollback]
        slots = asyncio.Semaphore(self.spec["parallelism"])

        async def undo(pod: ScopedPod) -> None:
            async with slots:
                state, _, _ = await self._notify(pod, notifier)
                outcome = scope.ROLLED_BACK if state == scope.SUCCEEDED else scope.ROLLBACK_FAILED
                await self.scopes.set_rollback(self.uid, pod.pod_uid, outcome)
                self.pods[pod.pod_uid] = ScopedPod(pod.pod, pod.pod_uid, pod.state, pod.record,
                                                   pod.reason, outcome)
                await self._write_status()

        await asyncio.gather(*(undo(pod) for pod in targets))


class FanoutManager:
    """Starts, stops and resumes Notification runs."""

    def __init__(self, svc: RunParts, authorizer: Authorizer, scopes: ScopeStore) -> None:
        self.svc, self.authorizer = svc, authorizer
        self.scopes = scopes
        self._runs: dict[str, tuple[NotificationRun, asyncio.Task[None]]] = {}

    def start(self, notification: dict[str, Any]) -> None:
        run = NotificationRun(self.svc, self.authorizer, self.scopes, notification)
        task = asyncio.create_task(self._guarded(run), name=f"notification {run.name}")
        self._runs[run.uid] = (run, task)
        task.add_done_callback(lambda _t: self._runs.pop(run.uid, None))

    async def _guarded(self, run: NotificationRun) -> None:
        try:
            await run.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("notification run failed", extra={"notification": run.name})
            with contextlib.suppress(Exception):
                await run._write_status(phase=records.FAILED, completionTime=records.now(),
                                        conditions=[{"type": "Failed", "status": "True",
                                                     "reason": "InternalError",
                                                     "message": "the server failed running it",
                                                     "lastTransitionTime": records.now()}])

    def deleted(self, uid: str) -> None:
        """The Notification was deleted: stop new starts and roll back."""
        entry = self._runs.get(uid)
        if entry:
            entry[0].deleted.set()

    async def resume(self) -> int:
        """Continue every Notification that was not finished when the server stopped."""
        resumed = 0
        token = ""
        while True:
            page = await self.svc.notifications.list(
                None, field_selector="status.phase!=Succeeded,status.phase!=Failed", limit=500,
                continue_token=token)
            for notification in page.items:
                self.start(notification)
                resumed += 1
            token = page.continue_token
            if not token:
                return resumed

    async def shutdown(self) -> None:
        tasks = [task for _, task in self._runs.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
