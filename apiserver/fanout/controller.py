"""Running Notifications: each pod in scope gets one ordinary PodNotifier run.

A run starts at most `parallelism` pods at a time. With failurePolicy Abort it starts no new pod
after the first failure; with Continue it runs them all. When the Notification ends Failed, or
is deleted before it finished, `rollback.notifier` runs on every pod whose notifier succeeded.

Crash safety (what the scope tables in apiserver/fanout/scope.py make possible):

- every decision is stored before it takes effect: a pod is marked started (with the name its
  record will have) before its record is created, and only while the run is not stopped; the
  first failure under Abort stops the run in the same transaction that records it; the outcome
  (and with a Failed one, which pods are due a rollback) is stored before the rollback runs;
- a resumed run takes each started pod's result from its record (Interrupted if the server
  stopped during it, a failure: under Abort that stops the run), and runs again every rollback
  whose record was interrupted or never stored (a new record, labelled with its attempt);
- a Notification deleted while its server was down is still rolled back, from the spec kept
  in its run row, and its rows are deleted once nothing remains to do.

With several replicas (docs/high-availability.md) only the elected fan-out leader runs
Notifications (`FanoutManager.lead` / `step_down`): any replica stores a new Notification's
scope, and the leader's reconciler starts it within about a second; a deletion through another
replica stores the run's stop flag (Deleted), which the leader's run and reconciler read. A
leader that steps down cancels its runs without writing anything final (as a crash would), and
the next leader resumes them; a pod whose record another replica is still running takes that
record's result once it finishes.

No exception leaves a pod counted running: every error of a pod's run becomes that pod's
reason (see `pod_outcome`), and a failure of the run itself ends the Notification Failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.api.types import (
    CONDITION_PODS_SKIPPED,
    CONDITION_TYPES,
    CONDITION_WAITING_FOR_PODS,
)
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.authz.sar import Authorizer
from apiserver.errors import APIError
from apiserver.fanout import scope
from apiserver.fanout.pod_feed import NewPods
from apiserver.fanout.scope import ScopedPod, ScopeRun, ScopeStore
from apiserver.fanout.spec import ABORT, ALL_PODS, selector_string
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.notifier import errors as notifier_errors
from apiserver.notifier import records
from apiserver.notifier.errors import NotAuthorized, NotDeclared, PodNotFound, RunConflict
from apiserver.notifier.events import NotificationEvents, notification_ref
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import retry_until_stored
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS_INTERVAL_SECONDS = 0.5
RUN_WAIT_SECONDS = 24 * 3600
"""How long a pod's turn waits for its run; runs end by their own timeouts long before."""
SWEEP_DELAY_SECONDS = 1.0
"""After a deletion, how long to wait before sweeping (deletions in a burst share a sweep)."""
RECONCILE_INTERVAL_SECONDS = 1.0
"""How often the leader compares the scopes with the stored Notifications: a Notification
created or deleted through another replica is started or stopped within about this long."""
SCOPE_GRACE_SECONDS = 30.0
"""A Notification without a scope fails ScopeNotRecorded only once it is older than this:
until then another replica may still be writing its scope."""
ABSENT_GRACE_SECONDS = 5.0
"""A scope whose Notification is not in the store (and whose run was not stopped as deleted)
counts as the scope of a deleted Notification once it has been missing this long, so that a
cache that lags behind the scopes' cache cannot make a new Notification look deleted."""
RECORD_POLL_SECONDS = 1.0
UNSTORED_WAIT_ATTEMPTS = 30
"""How many polls (RECORD_POLL_SECONDS apart) a re-run refused as already running waits for the
record of the stopped server's create before the pod is failed Interrupted."""
"""How often a run re-reads a record that another replica's runner is running."""
ROLLBACK_ATTEMPT_LABEL = "notifier.x-k8s.io/rollback-attempt"
"""On rollback records: 1 for the first run, 2 and more for a run again after the server
stopped during (or before storing) the previous one."""
NOT_DECLARED = "NotifierNotDeclared"
"""A pod's reason when it does not declare the notifier (it is skipped), the reason of the
PodsSkipped condition, and the outcome's when every pod that ran was skipped."""
NO_PODS_SELECTED, PODS_JOINED = "NoPodsSelected", "PodsJoined"
"""The reasons of WaitingForPods True (see `waiting_for_pods`) and False."""
MAX_PODS_IN_MESSAGE = 5
SCOPE_NOT_RECORDED = "ScopeNotRecorded"
DELETED = "Deleted"
FAIL_FAST, PODS_FAILED, DEADLINE_EXCEEDED = "FailFast", "PodsFailed", "DeadlineExceeded"
INTERNAL_ERROR = "InternalError"
MAX_REASONS_IN_MESSAGE = 5


class PodAdmission(Protocol):
    """What the fan-out needs of ``apiserver.notifier.admission.Admission``."""

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: NotifyRequest) -> Any: ...

    async def start(self, admitted: Any) -> dict[str, Any]: ...


class RunWaiter(Protocol):
    async def wait(self, namespace: str, record: str, timeout: float) -> None: ...


class FanoutMetrics(Protocol):
    def notification_finished(self, phase: str) -> None: ...


@dataclass(frozen=True)
class FanoutParts:
    """What Notification runs use."""

    notifications: ObjectStore
    podnotifiers: ObjectStore
    scopes: ScopeStore
    admission: PodAdmission
    runner: RunWaiter
    authorizer: Authorizer
    metrics: FanoutMetrics
    new_pods: NewPods
    """Pods that start to match an AllPods Notification's selector."""
    events: NotificationEvents


def requester(spec: dict[str, Any]) -> UserInfo:
    who = spec.get("requestedBy", {})
    return UserInfo(who.get("username", ""), who.get("uid", ""), list(who.get("groups", [])),
                    {k: list(v) for k, v in who.get("extra", {}).items()})


def notification_label(name: str) -> dict[str, str]:
    return {records.NOTIFICATION_LABEL: name} if len(name) <= 63 else {}


def record_name(pod: str, notifier: str, notification_uid: str, pod_uid: str,
                attempt: int = 0) -> str:
    """The name of the record a Notification's run on a pod gets, known before it is created
    (so the scope can say which record to look at after a crash): the usual
    `<pod>-<notifier>-` prefix and a digest of the Notification, pod and attempt."""
    digest = hashlib.sha256(
        f"{notification_uid}/{pod_uid}/{notifier}/{attempt}".encode()).hexdigest()[:10]
    return records.generate_name(pod, notifier) + digest


def pod_outcome(error: Exception) -> tuple[str, str]:
    """The (scope state, reason) a pod's run ends with when it raised `error`."""
    if isinstance(error, NotDeclared):
        return scope.SKIPPED, NOT_DECLARED
    if isinstance(error, PodNotFound):
        return scope.FAILED, records.POD_DELETED
    if isinstance(error, KubeUnavailable):
        return scope.FAILED, "ServiceUnavailable"
    if type(error).__module__ == notifier_errors.__name__ or isinstance(error, KubeRejected):
        return scope.FAILED, type(error).__name__
    if isinstance(error, APIError):
        return scope.FAILED, error.reason
    return scope.FAILED, INTERNAL_ERROR


def waiting_for_pods(namespace: str, selector: str) -> dict[str, Any]:
    """The condition of an AllPods Notification created with no pod in scope; the run sets it
    False (PodsJoined) when its first pod joins."""
    return {"type": CONDITION_WAITING_FOR_PODS, "status": "True", "reason": NO_PODS_SELECTED,
            "message": f'no pod in namespace "{namespace}" matches {selector or "{}"} yet; '
                       "pods are notified as they start running",
            "lastTransitionTime": records.now()}


def _condition_now(current: dict[str, Any] | None, kind: str, reason: str, message: str, *,
                   status: str = "True") -> dict[str, Any]:
    """Condition `kind` as it is now; its lastTransitionTime is kept from `current` unless
    the status changes."""
    since = (current["lastTransitionTime"] if current is not None
             and current.get("status") == status else records.now())
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


def _turn_done(running: set[asyncio.Task[None]], slots: asyncio.Semaphore,
               task: asyncio.Task[None]) -> None:
    running.discard(task)
    slots.release()


class _Gone(Exception):
    """The Notification object no longer exists (or is another one with the same name)."""


class NotificationRun:
    """One Notification's fan-out, from its run row (and its status, None once the object is
    gone: then only what is due after a deletion is left to do)."""

    def __init__(self, parts: FanoutParts, run: ScopeRun, status: dict[str, Any] | None
                 ) -> None:
        self.parts = parts
        self.spec = run.spec
        self.namespace, self.name, self.uid = run.namespace, run.name, run.notification_uid
        self.ref = notification_ref(self.namespace, self.name, self.uid)
        self.stopped = ""
        self.status: dict[str, Any] = dict(status or {})
        self.pods: dict[str, ScopedPod] = {}
        self.deleted = asyncio.Event()
        """Set when the Notification is deleted: start no more pods, then roll back."""
        self._note_stopped(run.stopped)
        if status is None:
            self.deleted.set()
        self.abort = self.spec.get("failurePolicy", ABORT) == ABORT
        self.queue: asyncio.Queue[ScopedPod] = asyncio.Queue()
        self.requester = requester(self.spec)
        self._pending_flush: asyncio.Task[None] | None = None

    def _note_stopped(self, reason: str) -> None:
        """Keep the stored stop reason; Deleted (written by whichever replica the deletion
        went through) means the Notification is gone."""
        self.stopped = reason
        if reason == DELETED:
            self.deleted.set()

    # status

    async def _write_status(self, **changes: Any) -> None:
        """Store the status with `changes` (phase, times, conditions) at once. Changes of counts
        alone are coalesced (see `_changed`), so a 1000-pod run writes its object tens of
        times, not thousands."""
        self.status.update(changes)
        if self._pending_flush is not None:
            self._pending_flush.cancel()
            self._pending_flush = None
        await self._flush_status()

    async def _flush_later(self) -> None:
        await asyncio.sleep(STATUS_INTERVAL_SECONDS)
        self._pending_flush = None
        try:
            await self._flush_status()
        except Exception as error:
            # Progress only: the next change or the final status writes it again.
            log.warning("storing the notification's progress failed",
                        extra={"namespace": self.namespace, "notification": self.name,
                               "error": f"{type(error).__name__}: {error}"})

    async def _flush_status(self) -> None:
        if self.deleted.is_set():
            return
        self.status["counts"] = scope.counts(list(self.pods.values()))
        self.status["conditions"] = self._conditions()
        snapshot = dict(self.status)

        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != self.uid:
                raise _Gone
            return {**obj, "status": snapshot}

        try:
            await self.parts.notifications.guaranteed_update(self.namespace, self.name, mutate)
        except (NotFound, _Gone):
            self.deleted.set()

    def _conditions(self) -> list[dict[str, Any]]:
        """The stored conditions with PodsSkipped and WaitingForPods brought up to date; the
        final one (Complete or Failed) first. A condition's lastTransitionTime changes only
        when its status does (Kubernetes' convention)."""
        current = {c["type"]: c for c in self.status.get("conditions") or []}
        skipped = [p.pod for p in self.pods.values() if p.state == scope.SKIPPED]
        if skipped:
            names = ", ".join(skipped[:MAX_PODS_IN_MESSAGE]) + (
                f" and {len(skipped) - MAX_PODS_IN_MESSAGE} more"
                if len(skipped) > MAX_PODS_IN_MESSAGE else "")
            current[CONDITION_PODS_SKIPPED] = _condition_now(
                current.get(CONDITION_PODS_SKIPPED), CONDITION_PODS_SKIPPED, NOT_DECLARED,
                f"{len(skipped)} of {len(self.pods)} pods do not declare notifier "
                f'"{self.spec["notifier"]}" and were skipped: {names}')
        waiting = current.get(CONDITION_WAITING_FOR_PODS)
        if waiting is not None and waiting["status"] == "True" and self.pods:
            current[CONDITION_WAITING_FOR_PODS] = _condition_now(
                waiting, CONDITION_WAITING_FOR_PODS, PODS_JOINED,
                f"the first pods joined; {len(self.pods)} in scope", status="False")
        return sorted(current.values(), key=lambda c: c["type"] not in CONDITION_TYPES)

    def _changed(self, pod: ScopedPod) -> None:
        """Keep the pod's new state; the status (counts) follows within
        STATUS_INTERVAL_SECONDS."""
        self.pods[pod.pod_uid] = pod
        if not self.deleted.is_set() and self._pending_flush is None:
            self._pending_flush = asyncio.create_task(self._flush_later())

    async def _stored(self, what: str, write: Callable[[], Awaitable[T]]) -> T:
        return await retry_until_stored(write, what, extra={
            "namespace": self.namespace, "notification": self.name})

    # the run

    async def run(self) -> None:
        """Run to the end; never raises (but for cancellation): a failure of the run itself
        ends the Notification Failed with reason InternalError."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.exception("notification run failed", extra={
                "namespace": self.namespace, "notification": self.name})
            try:
                await self._finish(False, failure=(
                    INTERNAL_ERROR, f"the server failed running it: {type(error).__name__}"))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("ending the failed notification run failed; it is resumed when "
                              "the server starts again", extra={
                                  "namespace": self.namespace, "notification": self.name})
        finally:
            if self._pending_flush is not None:
                self._pending_flush.cancel()
                await asyncio.gather(self._pending_flush, return_exceptions=True)

    async def _run(self) -> None:
        for pod in await self.parts.scopes.pods(self.uid):
            self.pods[pod.pod_uid] = pod
        await self._settle()
        if self.deleted.is_set() or self.stopped:
            await self._finish(False)
            return
        first_start = not self.status.get("startTime")
        started = self.status.get("startTime") or records.now()
        await self._stored("store the status", functools.partial(
            self._write_status, phase=records.RUNNING, startTime=started))
        if first_start:
            self.parts.events.started(self.ref, self.spec["notifier"], len(self.pods))
        for pod in self.pods.values():
            if pod.state == scope.PENDING:
                self.queue.put_nowait(pod)
        watcher = (asyncio.create_task(self._follow_new_pods())
                   if self.spec.get("policy") == ALL_PODS else None)
        try:
            deadline_passed = await self._run_pods(started)
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
        await self._finish(deadline_passed)

    async def _settle(self) -> None:
        """After a restart or a leader change: a pod whose run had started is never run again;
        its record says how it ended (Interrupted if its server stopped during it). A pod marked
        started whose record was never stored was never notified (a record is created before
        its command runs), so it runs now, under the record name its scope holds, unless the
        run is stopped. A rollback whose record finished is settled likewise; one that was
        interrupted (or never stored) stays started, to be run again."""
        unstored = []
        for pod in list(self.pods.values()):
            if pod.state == scope.STARTED:
                record = await self._record(pod.record)
                if record is None and not self.stopped:
                    unstored.append(pod)
                else:
                    state, reason = self._result_of(record)
                    await self._record_result(pod, state, reason)
            if pod.rollback == scope.ROLLBACK_STARTED:
                outcome = await self._settled_rollback(pod.rollback_record)
                if outcome:
                    await self._stored("store a rollback result", functools.partial(
                        self.parts.scopes.finish_rollback, self.uid, pod.pod_uid, outcome))
                    self.pods[pod.pod_uid] = replace(self.pods[pod.pod_uid], rollback=outcome)
        await asyncio.gather(*(self._rerun_unstored(pod) for pod in unstored))
        if self.abort and not self.stopped and any(
                p.state == scope.FAILED for p in self.pods.values()):
            self._note_stopped(await self._stored("stop the run", lambda: self.parts.scopes.stop(
                self.uid, FAIL_FAST)))

    async def _record(self, name: str) -> dict[str, Any] | None:
        """The record, once finished (waiting for a run of this process, or re-reading one that
        another replica runs: a replica that dies has its records ended by a survivor); None
        if absent."""
        if not name:
            return None
        try:
            record = await self.parts.podnotifiers.get(self.namespace, name)
            if not records.is_finished(record):
                await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
            while not records.is_finished(record):
                await asyncio.sleep(RECORD_POLL_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
        except NotFound:
            return None
        return record

    @staticmethod
    def _result_of(record: dict[str, Any] | None) -> tuple[str, str]:
        """A started pod's (scope state, reason) from its finished record (None: absent)."""
        if record is None:
            return scope.FAILED, records.INTERRUPTED
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, records.COMPLETED
        return scope.FAILED, record["status"].get("reason") or records.INTERRUPTED

    async def _rerun_unstored(self, pod: ScopedPod) -> None:
        """Run a pod whose start was marked but whose record was never stored, as that record.
        A create of the stopped server that lands late makes this one refused (the name
        exists, or the pod's ledger lists the run): then that record's result stands, so the
        pod is notified once either way."""
        state, reason = await self._attempt(pod, self.spec["notifier"], pod.record,
                                            notification_label(self.name))
        if reason in (RunConflict.__name__, errors.AlreadyExists.reason):
            for _ in range(UNSTORED_WAIT_ATTEMPTS):
                record = await self._record(pod.record)
                if record is not None:
                    state, reason = self._result_of(record)
                    break
                await asyncio.sleep(RECORD_POLL_SECONDS)
            else:
                state, reason = scope.FAILED, records.INTERRUPTED
        await self._record_result(pod, state, reason)

    async def _settled_rollback(self, name: str) -> str:
        """done | failed, or "" when the rollback must run again."""
        record = await self._record(name)
        if record is None or record["status"].get("reason") == records.INTERRUPTED:
            return ""
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.ROLLBACK_DONE
        return scope.ROLLBACK_FAILED

    async def _record_result(self, pod: ScopedPod, state: str, reason: str) -> None:
        """Store a pod's final state; under Abort a failure stops the run, in the same write."""
        stop = FAIL_FAST if state == scope.FAILED and self.abort else ""
        await self._stored("store a pod's result", lambda: self.parts.scopes.finish_pod(
            self.uid, pod.pod_uid, state, reason, stop=stop))
        if state == scope.FAILED:
            self.parts.events.pod_failed(self.ref, pod.pod, reason)
        if stop and not self.stopped:
            self._note_stopped(stop)
        self._changed(replace(self.pods.get(pod.pod_uid, pod), state=state, reason=reason))

    def _deadline(self, started: str) -> float | None:
        seconds = self.spec.get("activeDeadlineSeconds")
        start = parse_timestamp(started)
        if seconds is None or start is None:
            return None
        return time.monotonic() + max(0.0, start + seconds - datetime.now(UTC).timestamp())

    def _halted(self) -> bool:
        return self.deleted.is_set() or bool(self.stopped)

    async def _run_pods(self, started: str) -> bool:
        """Start pods as slots free up; returns True if the deadline stopped the run."""
        deadline = self._deadline(started)
        slots = asyncio.Semaphore(self.spec.get("parallelism", 1))
        running: set[asyncio.Task[None]] = set()
        all_pods = self.spec.get("policy") == ALL_PODS
        deadline_passed = False
        while not self._halted():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                deadline_passed = True
                self._note_stopped(await self._stored("stop the run", lambda: self.parts.scopes
                                                      .stop(self.uid, DEADLINE_EXCEEDED)))
                break
            if self.queue.empty() and not all_pods and not running:
                break
            pod = await self._next(remaining, running)
            if pod is None:
                continue
            await slots.acquire()
            if deadline is not None and time.monotonic() >= deadline:
                slots.release()  # the deadline passed while waiting for a slot
                self.queue.put_nowait(pod)
                continue
            name = record_name(pod.pod, self.spec["notifier"], self.uid, pod.pod_uid)
            if self._halted() or not await self._stored("start a pod", functools.partial(
                    self.parts.scopes.start_pod, self.uid, pod.pod_uid, name)):
                slots.release()
                if self._halted():
                    break
                stored = await self.parts.scopes.run(self.uid)
                if stored is not None and stored.stopped:
                    self._note_stopped(stored.stopped)  # stopped by a deletion meanwhile
                    break
                continue  # the pod is no longer pending: nothing to do
            self._changed(replace(pod, state=scope.STARTED, record=name))
            task = asyncio.create_task(self._turn(pod, name))
            running.add(task)
            task.add_done_callback(functools.partial(_turn_done, running, slots))
        if self.deleted.is_set() and not self.stopped:
            self._note_stopped(await self._stored("stop the run", lambda: self.parts.scopes.stop(
                self.uid, DELETED)))
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
            await asyncio.gather(getter, return_exceptions=True)
        # The get may have completed while it was being cancelled: never drop a pod.
        return None if getter.cancelled() else getter.result()

    async def _turn(self, pod: ScopedPod, name: str) -> None:
        state, reason = await self._attempt(pod, self.spec["notifier"], name,
                                            notification_label(self.name))
        await self._record_result(pod, state, reason)

    async def _attempt(self, pod: ScopedPod, notifier: str, name: str,
                       labels: dict[str, str]) -> tuple[str, str]:
        """Run `notifier` on the pod as the Notification's requester, as record `name`:
        (final scope state, reason). Raises nothing but cancellation."""
        try:
            return await self._run_notifier(pod, notifier, name, labels)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            state, reason = pod_outcome(error)
            extra = {"namespace": self.namespace, "notification": self.name, "pod": pod.pod,
                     "notifier": notifier, "reason": reason,
                     "error": f"{type(error).__name__}: {error}"}
            if reason == INTERNAL_ERROR:
                log.exception("notifying a pod failed", extra=extra)
            else:
                log.info("pod not notified", extra=extra)
            return state, reason

    async def _run_notifier(self, pod: ScopedPod, notifier: str, name: str,
                            labels: dict[str, str]) -> tuple[str, str]:
        admission = self.parts.admission
        pod_object = await admission.read_pod(self.namespace, pod.pod)
        if pod_object["metadata"]["uid"] != pod.pod_uid:
            raise PodNotFound(self.namespace, pod.pod)
        notify = RequestAttributes.for_resource(
            "create", group=GROUP, version="v1alpha1", resource="pods", subresource="notify",
            namespace=self.namespace, name=pod.pod)
        decision = await self.parts.authorizer.authorize(self.requester, notify)
        if not decision.allowed:
            raise NotAuthorized(errors.forbidden_message(
                "pods", GROUP, pod.pod, denial_message(self.requester.name, notify,
                                                       decision.reason)),
                group=GROUP, resource="pods", name=pod.pod)
        ask = NotifyRequest(name=name, generate_name="", labels=labels, notifier=notifier,
                            containers=self.spec.get("containers"),
                            timeout_seconds=self.spec.get("timeoutSeconds"),
                            ttl_seconds_after_finished=None)
        await admission.start(await admission.admit(self.requester, pod_object, ask))
        await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
        record = await self._record(name)
        if record is None:
            return scope.FAILED, "RecordDeleted"
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, records.COMPLETED
        return scope.FAILED, record["status"].get("reason") or records.FAILED

    async def _follow_new_pods(self) -> None:
        """AllPods: pods that later match the selector and run join the scope, once each."""
        feed = self.parts.new_pods.matching(self.namespace, selector_string(self.spec["selector"]))
        async with contextlib.aclosing(feed):
            await self._add_new_pods(feed)

    async def _add_new_pods(self, feed: AsyncIterator[tuple[str, str]]) -> None:
        async for name, uid in feed:
            if uid in self.pods:
                continue
            try:
                added = await self.parts.scopes.add(self.uid, [(name, uid)])
            except Exception as error:
                log.warning("adding a pod to the notification's scope failed; it joins when "
                            "it is reported again", extra={
                                "namespace": self.namespace, "notification": self.name,
                                "pod": name, "error": f"{type(error).__name__}: {error}"})
                continue
            for pod in added:
                self._changed(pod)
                self.queue.put_nowait(pod)

    # the end

    async def _finish(self, deadline_passed: bool, failure: tuple[str, str] | None = None
                      ) -> None:
        """Decide the outcome (stored first: the first decision stands), roll back if it is
        Failed, then store the final status; forget the scope if the object is gone."""
        if not self.deleted.is_set():  # deleted through another replica meanwhile?
            stored = await self._stored("read the run", lambda: self.parts.scopes.run(self.uid))
            if stored is not None and stored.stopped == DELETED:
                self._note_stopped(DELETED)
        counts = scope.counts(list(self.pods.values()))
        unfinished = counts["pending"] > 0
        if failure is not None:
            outcome, reason = scope.OUTCOME_FAILED, failure[0]
        elif self.deleted.is_set():
            outcome, reason = scope.OUTCOME_FAILED, DELETED
        elif counts["failed"] > 0:
            outcome = scope.OUTCOME_FAILED
            reason = FAIL_FAST if self.stopped == FAIL_FAST and unfinished else PODS_FAILED
        elif (deadline_passed or self.stopped == DEADLINE_EXCEEDED) and unfinished and (
                self.spec.get("policy") != ALL_PODS):
            outcome, reason = scope.OUTCOME_FAILED, DEADLINE_EXCEEDED
        elif counts["skipped"] and not counts["succeeded"]:  # no pod was notified
            outcome, reason = scope.OUTCOME_FAILED, NOT_DECLARED
        else:
            outcome, reason = scope.OUTCOME_SUCCEEDED, "PodsSucceeded"
        decided = await self._stored("store the outcome", lambda: self.parts.scopes.decide(
            self.uid, outcome, reason))
        if decided is not None:
            outcome, reason = decided.outcome, decided.outcome_reason
        if outcome == scope.OUTCOME_FAILED:
            for pod in await self.parts.scopes.pods(self.uid):
                self.pods[pod.pod_uid] = pod
            await self._rollback()
        if not self.deleted.is_set():
            await self._write_final(outcome, reason, failure[1] if failure else "")
        if self.deleted.is_set():
            await self._stored("forget the scope", lambda: self.parts.scopes.forget(self.uid))
        else:
            await self._stored("mark the run finished",
                               lambda: self.parts.scopes.mark_finished(self.uid))

    def _condition(self, outcome: str, reason: str, detail: str) -> dict[str, Any]:
        counts = scope.counts(list(self.pods.values()))
        if outcome == scope.OUTCOME_SUCCEEDED:
            message = f"{counts['succeeded']} pods succeeded, {counts['skipped']} skipped"
            return {"type": "Complete", "status": "True", "reason": reason, "message": message,
                    "lastTransitionTime": records.now()}
        if reason == NOT_DECLARED:
            message = (f'no pod declared notifier "{self.spec["notifier"]}" when its turn came: '
                       f"{counts['skipped']} of {counts['total']} pods skipped")
            return {"type": "Failed", "status": "True", "reason": reason, "message": message,
                    "lastTransitionTime": records.now()}
        why = Counter(p.reason for p in self.pods.values() if p.state == scope.FAILED)
        reasons = ", ".join(f"{r}: {n}" for r, n in why.most_common(MAX_REASONS_IN_MESSAGE))
        message = (f"{counts['failed']} of {counts['total']} pods failed"
                   + (f" ({reasons})" if reasons else "")
                   + (f"; {counts['pending']} not started" if counts["pending"] else "")
                   + (f"; rolled back {counts['rolledBack']}" if self.spec.get("rollback")
                      else ""))
        if detail:
            message = f"{detail}; {message}"
        return {"type": "Failed", "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": records.now()}

    async def _write_final(self, outcome: str, reason: str, detail: str) -> None:
        """The final status, retried until stored (or the object is gone)."""
        now = records.now()
        phase = records.SUCCEEDED if outcome == scope.OUTCOME_SUCCEEDED else records.FAILED
        self.status.setdefault("startTime", now)
        condition = self._condition(outcome, reason, detail)
        others = [c for c in self.status.get("conditions") or []
                  if c["type"] not in CONDITION_TYPES]
        changes = {"phase": phase, "completionTime": now, "conditions": [condition, *others]}
        await self._stored("store the final status",
                           functools.partial(self._write_status, **changes))
        if not self.deleted.is_set():
            self.parts.metrics.notification_finished(phase)
            self.parts.events.finished(self.ref, phase, reason, condition["message"])

    async def _rollback(self) -> None:
        """Run the rollback notifier on every pod whose rollback is due and not done, at the
        run's parallelism; each attempt is a new record."""
        notifier = self.spec.get("rollback", {}).get("notifier")
        if not notifier:
            return
        targets = [p for p in self.pods.values()
                   if p.rollback in (scope.ROLLBACK_PENDING, scope.ROLLBACK_STARTED)]
        slots = asyncio.Semaphore(self.spec.get("parallelism", 1))

        async def undo(pod: ScopedPod) -> None:
            async with slots:
                attempt = pod.rollback_attempts + 1
                name = record_name(pod.pod, notifier, self.uid, pod.pod_uid, attempt)
                if not await self._stored("start a rollback", lambda: self.parts.scopes
                                          .start_rollback(self.uid, pod.pod_uid, name)):
                    return
                self.pods[pod.pod_uid] = replace(pod, rollback=scope.ROLLBACK_STARTED,
                                                 rollback_record=name, rollback_attempts=attempt)
                labels = {**notification_label(self.name), ROLLBACK_ATTEMPT_LABEL: str(attempt)}
                state, _ = await self._attempt(pod, notifier, name, labels)
                outcome = (scope.ROLLBACK_DONE if state == scope.SUCCEEDED
                           else scope.ROLLBACK_FAILED)
                await self._stored("store a rollback result", lambda: self.parts.scopes
                                   .finish_rollback(self.uid, pod.pod_uid, outcome))
                self._changed(replace(self.pods[pod.pod_uid], rollback=outcome))

        await asyncio.gather(*(undo(pod) for pod in targets))
        if targets:
            outcomes = Counter(self.pods[p.pod_uid].rollback for p in targets)
            self.parts.events.rolled_back(self.ref, notifier, outcomes[scope.ROLLBACK_DONE],
                                          outcomes[scope.ROLLBACK_FAILED])


class FanoutManager:
    """Starts, stops and resumes Notification runs, and deletes the scope of Notifications
    that are gone. Runs happen only while this replica leads (`lead` to `step_down`); on any
    replica `begin` stores a new Notification's scope and `deleted` its stop flag.

    `scope_grace` and `absent_grace` (seconds) are the waits of SCOPE_GRACE_SECONDS and
    ABSENT_GRACE_SECONDS; a single replica over SQLite, where no other replica writes and no
    cache lags, may set them to 0."""

    def __init__(self, parts: FanoutParts, sweep_delay: float = SWEEP_DELAY_SECONDS, *,
                 reconcile_interval: float = RECONCILE_INTERVAL_SECONDS,
                 scope_grace: float = SCOPE_GRACE_SECONDS,
                 absent_grace: float = ABSENT_GRACE_SECONDS) -> None:
        self.parts = parts
        self._sweep_delay = sweep_delay
        self._interval = reconcile_interval
        self._scope_grace = scope_grace
        self._absent_grace = absent_grace
        self._runs: dict[str, tuple[NotificationRun, asyncio.Task[None]]] = {}
        self._leading = False
        self._reconciler: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        """Set by a deletion: reconcile soon (after sweep_delay), not at the next interval."""
        self._ended: set[str] = set()
        """UIDs whose run ended in this leadership (not cancelled): never started again in it,
        however stale the listing a reconcile pass works from."""
        self._absent_since: dict[str, float] = {}
        """UID of a scope: time.monotonic() when its Notification was first missing."""

    @property
    def leading(self) -> bool:
        return self._leading

    async def lead(self) -> None:
        """This replica became the leader: resume every unfinished Notification (one reconcile
        pass, awaited; a failure is logged and retried), then keep reconciling every
        `reconcile_interval` until `step_down`."""
        if self._leading:
            return
        self._leading = True
        self._ended.clear()
        self._absent_since.clear()
        log.info("leading the notification fan-out: resuming unfinished notifications")
        await self._reconcile_logged()
        if self._leading and self._reconciler is None:
            self._reconciler = asyncio.create_task(self._keep_reconciling(),
                                                   name="notification reconciler")

    async def step_down(self) -> None:
        """Stop leading: cancel every run without writing anything final (the next leader
        resumes them; records this replica is running go on and end by themselves)."""
        was_leading, self._leading = self._leading, False
        runs = [task for _, task in self._runs.values()]
        tasks = [*runs, *([self._reconciler] if self._reconciler is not None else [])]
        self._reconciler = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if was_leading:
            log.info("stopped leading the notification fan-out; the next leader resumes its "
                     "runs", extra={"runs_cancelled": len(runs)})

    async def _keep_reconciling(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            if self._wake.is_set():
                await asyncio.sleep(self._sweep_delay)  # deletions in a burst share a pass
                self._wake.clear()
            await self._reconcile_logged()

    async def _reconcile_logged(self) -> None:
        try:
            await self.reconcile()
        except errors.ServiceUnavailable as error:  # kube-apiserver away: no traceback each time
            log.warning("reconciling the notifications failed; retrying in a moment",
                        extra={"error": f"{type(error).__name__}: {error}"})
        except Exception:
            log.exception("reconciling the notifications failed; retrying in a moment")

    async def begin(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        """Record a just-created Notification's scope and, if this replica leads, start it
        (otherwise the leader starts it within about a second). If the scope cannot be
        stored, the Notification is deleted again (it never ran) and the error raised."""
        try:
            await self.parts.scopes.create(notification, pods)
        except Exception as error:
            meta = notification["metadata"]
            log.error("storing a notification's scope failed; deleting the notification",
                      extra={"namespace": meta["namespace"], "notification": meta["name"],
                             "error": f"{type(error).__name__}: {error}"})
            try:
                await self.parts.notifications.delete(meta["namespace"], meta["name"],
                                                      uid=meta["uid"])
            except Exception as undo:
                log.error("deleting the notification failed too; it fails with reason "
                          f"{SCOPE_NOT_RECORDED} when the fan-out leader finds it",
                          extra={"namespace": meta["namespace"], "notification": meta["name"],
                                 "error": f"{type(undo).__name__}: {undo}"})
            raise
        self._start(ScopeRun(notification["metadata"]["uid"],
                             notification["metadata"]["namespace"],
                             notification["metadata"]["name"], notification["spec"]),
                    notification.get("status") or {})

    def _start(self, run: ScopeRun, status: dict[str, Any] | None) -> bool:
        """Start the run unless this replica does not lead, or it runs or ran in this
        leadership already; True if it started."""
        uid = run.notification_uid
        if not self._leading or uid in self._runs or uid in self._ended:
            return False
        runner = NotificationRun(self.parts, run, status)
        task = asyncio.create_task(runner.run(), name=f"notification {run.name}")
        self._runs[uid] = (runner, task)
        task.add_done_callback(functools.partial(self._run_ended, uid))
        return True

    def _run_ended(self, uid: str, task: asyncio.Task[None]) -> None:
        entry = self._runs.get(uid)
        if entry is not None and entry[1] is task:
            del self._runs[uid]
        if not task.cancelled():
            self._ended.add(uid)

    async def deleted(self, uid: str) -> None:
        """The Notification was deleted: a running one starts no more pods (stored first, so a
        restart, or the leader when it is run elsewhere, does not start any either), rolls back
        and then deletes its scope; a finished one's scope is deleted at once. The leader
        reconciles soon after, for whatever else is gone."""
        entry = self._runs.get(uid)
        if entry is not None:
            try:
                await self.parts.scopes.stop(uid, DELETED)
            except Exception as error:  # the run stops anyway, and stores it when it can
                log.warning("storing that a deleted notification stops failed", extra={
                    "notification_uid": uid, "error": f"{type(error).__name__}: {error}"})
            entry[0].deleted.set()
        else:
            run = await self.parts.scopes.run(uid)
            if run is None:
                pass
            elif run.finished or (self._leading and run.outcome == scope.OUTCOME_SUCCEEDED):
                await self.parts.scopes.forget(uid)
            else:  # the leader (this replica's reconciler, or another's) rolls back if due
                await self.parts.scopes.stop(uid, DELETED)
        if self._leading:
            self._wake.set()

    async def resume(self) -> int:
        """One reconcile pass (see `reconcile`); returns how many runs started."""
        return await self.reconcile()

    async def reconcile(self) -> int:
        """Compare the scopes with the stored Notifications (by UID), while leading (otherwise
        do nothing). Unfinished Notifications not running here are started (resumed, or
        created through another replica); one deleted (its run stopped as Deleted, or its
        object missing for `absent_grace`) stops starting pods, rolls back if due and has its
        scope deleted; one without a scope fails ScopeNotRecorded once older than
        `scope_grace`. Returns how many runs started."""
        if not self._leading:
            return 0
        running_before = set(self._runs)
        objects = await self._all_notifications()
        scopes = self.parts.scopes
        runs = {run.notification_uid: run for run in await scopes.runs()}
        for uid in await scopes.orphan_uids():
            if uid in objects:
                await scopes.adopt(objects[uid])
                adopted = await scopes.run(uid)
                if adopted is not None:
                    runs[uid] = adopted
            else:
                await scopes.forget(uid)
        self._ended &= set(runs)
        now = time.monotonic()
        self._absent_since = {uid: since for uid, since in self._absent_since.items()
                              if uid in runs and uid not in objects}
        started = 0
        for uid, run in runs.items():
            obj = objects.get(uid)
            gone = run.stopped == DELETED or (obj is None and now - self._absent_since.setdefault(
                uid, now) >= self._absent_grace)
            entry = self._runs.get(uid)
            if entry is not None:
                if gone and uid in running_before and not entry[0].deleted.is_set():
                    await self._stop_deleted(uid, entry[0])
                continue
            if obj is None:
                if run.finished:
                    await scopes.forget(uid)
                elif gone:
                    if run.outcome == scope.OUTCOME_SUCCEEDED:
                        await scopes.forget(uid)
                    elif self._start(run, None):
                        started += 1
            elif obj.get("status", {}).get("phase") in records.FINISHED_PHASES:
                if not run.finished:
                    await scopes.mark_finished(uid)
            elif self._start(run, obj.get("status") or {}):
                started += 1
        for uid, obj in objects.items():
            if uid not in runs and obj.get("status", {}).get(
                    "phase") not in records.FINISHED_PHASES and self._scope_overdue(obj):
                await self._fail_unrecorded(obj)
        return started

    async def _stop_deleted(self, uid: str, run: NotificationRun) -> None:
        """What `deleted` does to a run this replica runs, for a deletion seen by reconciling."""
        log.info("notification deleted through another replica; stopping its run", extra={
            "namespace": run.namespace, "notification": run.name})
        try:
            await self.parts.scopes.stop(uid, DELETED)
        except Exception as error:
            log.warning("storing that a deleted notification stops failed", extra={
                "notification_uid": uid, "error": f"{type(error).__name__}: {error}"})
        run.deleted.set()

    def _scope_overdue(self, notification: dict[str, Any]) -> bool:
        """Older than `scope_grace` (or of unknown age): its scope is not being written."""
        created = parse_timestamp(notification["metadata"].get("creationTimestamp"))
        return created is None or (
            datetime.now(UTC).timestamp() - created >= self._scope_grace)

    async def _all_notifications(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        token = ""
        while True:
            page = await self.parts.notifications.list(None, limit=500, continue_token=token)
            found.update((obj["metadata"]["uid"], obj) for obj in page.items)
            token = page.continue_token
            if not token:
                return found

    async def _fail_unrecorded(self, notification: dict[str, Any]) -> None:
        meta = notification["metadata"]
        now = records.now()
        log.warning("notification has no recorded scope; failing it", extra={
            "namespace": meta["namespace"], "notification": meta["name"]})
        condition = {"type": "Failed", "status": "True", "reason": SCOPE_NOT_RECORDED,
                     "message": "the server stopped after storing this Notification and before "
                                "recording its pod set, so no pod was notified; delete it and "
                                "create it again", "lastTransitionTime": now}

        def fail(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != meta["uid"] or (obj.get("status") or {}).get(
                    "phase") in records.FINISHED_PHASES:
                raise _Gone  # another one by that name, or failed already
            status = {**(obj.get("status") or {}), "phase": records.FAILED,
                      "completionTime": now, "conditions": [condition]}
            status.setdefault("startTime", now)
            return {**obj, "status": status}

        try:
            await self.parts.notifications.guaranteed_update(meta["namespace"], meta["name"],
                                                             fail)
        except (NotFound, _Gone):
            return
        self.parts.metrics.notification_finished(records.FAILED)
        self.parts.events.finished(notification_ref(meta["namespace"], meta["name"], meta["uid"]),
                                   records.FAILED, SCOPE_NOT_RECORDED, condition["message"])

    async def shutdown(self) -> None:
        """Stop as `step_down` does (nothing final is written; the next leader resumes)."""
        await self.step_down()
