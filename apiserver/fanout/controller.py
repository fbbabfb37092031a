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
from apiserver.api.time import parse_timestamp
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
from apiserver.notifier.errors import NotAuthorized, NotDeclared, PodNotFound
from apiserver.notifier.events import NotificationEvents, notification_ref
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import retry_until_stored
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS_INTERVAL_SECONDS = 0.5
RUN_WAIT_SECONDS = 24 * 3600
"""How long a pod's turn waits for its run; runs end by their own timeouts long before."""
SWEEP_DELAY_SECONDS = 1.0
"""After a deletion, how long to wait before sweeping (deletions in a burst share a sweep)."""
ROLLBACK_ATTEMPT_LABEL = "notifier.x-k8s.io/rollback-attempt"
"""On rollback records: 1 for the first run, 2 and more for a run again after the server
stopped during (or before storing) the previous one."""
NOT_DECLARED = "NotifierNotDeclared"
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
        self.stopped = run.stopped
        self.status: dict[str, Any] = dict(status or {})
        self.pods: dict[str, ScopedPod] = {}
        self.deleted = asyncio.Event()
        """Set when the Notification is deleted: start no more pods, then roll back."""
        if status is None:
            self.deleted.set()
        self.abort = self.spec.get("failurePolicy", ABORT) == ABORT
        self.queue: asyncio.Queue[ScopedPod] = asyncio.Queue()
        self.requester = requester(self.spec)
        self._pending_flush: asyncio.Task[None] | None = None

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
        snapshot = dict(self.status)

        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != self.uid:
                raise _Gone
            return {**obj, "status": snapshot}

        try:
            await self.parts.notifications.guaranteed_update(self.namespace, self.name, mutate)
        except (NotFound, _Gone):
            self.deleted.set()

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
        """After a restart: a pod whose run had started is never run again; its record says how
        it ended (Interrupted if the server stopped during it, or before storing it). A
        rollback whose record finished is settled likewise; one that was interrupted (or never
        stored) stays started, to be run again."""
        for pod in list(self.pods.values()):
            if pod.state == scope.STARTED:
                state, reason = await self._settled(pod.record)
                await self._record_result(pod, state, reason)
            if pod.rollback == scope.ROLLBACK_STARTED:
                outcome = await self._settled_rollback(pod.rollback_record)
                if outcome:
                    await self._stored("store a rollback result", functools.partial(
                        self.parts.scopes.finish_rollback, self.uid, pod.pod_uid, outcome))
                    self.pods[pod.pod_uid] = replace(self.pods[pod.pod_uid], rollback=outcome)
        if self.abort and not self.stopped and any(
                p.state == scope.FAILED for p in self.pods.values()):
            self.stopped = await self._stored("stop the run", lambda: self.parts.scopes.stop(
                self.uid, FAIL_FAST))

    async def _record(self, name: str) -> dict[str, Any] | None:
        """The record, once finished (waiting for a run of this process); None if absent."""
        if not name:
            return None
        try:
            record = await self.parts.podnotifiers.get(self.namespace, name)
            if not records.is_finished(record):
                await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
        except NotFound:
            return None
        return record

    async def _settled(self, name: str) -> tuple[str, str]:
        record = await self._record(name)
        if record is None:
            return scope.FAILED, records.INTERRUPTED
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, records.COMPLETED
        return scope.FAILED, record["status"].get("reason") or records.INTERRUPTED

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
            self.stopped = stop
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
                self.stopped = await self._stored("stop the run", lambda: self.parts.scopes.stop(
                    self.uid, DEADLINE_EXCEEDED))
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
                    self.stopped = stored.stopped  # stopped by a deletion meanwhile
                    break
                continue  # the pod is no longer pending: nothing to do
            self._changed(replace(pod, state=scope.STARTED, record=name))
            task = asyncio.create_task(self._turn(pod, name))
            running.add(task)
            task.add_done_callback(functools.partial(_turn_done, running, slots))
        if self.deleted.is_set() and not self.stopped:
            self.stopped = await self._stored("stop the run", lambda: self.parts.scopes.stop(
                self.uid, DELETED))
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
        changes = {"phase": phase, "completionTime": now, "conditions": [condition]}
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
    that are gone."""

    def __init__(self, parts: FanoutParts, sweep_delay: float = SWEEP_DELAY_SECONDS) -> None:
        self.parts = parts
        self._sweep_delay = sweep_delay
        self._runs: dict[str, tuple[NotificationRun, asyncio.Task[None]]] = {}
        self._sweep: asyncio.Task[None] | None = None

    async def begin(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        """Record a just-created Notification's scope and start it. If the scope cannot be
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
                          f"{SCOPE_NOT_RECORDED} when the server starts again",
                          extra={"namespace": meta["namespace"], "notification": meta["name"],
                                 "error": f"{type(undo).__name__}: {undo}"})
            raise
        self._start(ScopeRun(notification["metadata"]["uid"],
                             notification["metadata"]["namespace"],
                             notification["metadata"]["name"], notification["spec"]),
                    notification.get("status") or {})

    def _start(self, run: ScopeRun, status: dict[str, Any] | None) -> None:
        runner = NotificationRun(self.parts, run, status)
        task = asyncio.create_task(runner.run(), name=f"notification {run.name}")
        self._runs[run.notification_uid] = (runner, task)
        task.add_done_callback(lambda _t: self._runs.pop(run.notification_uid, None))

    async def deleted(self, uid: str) -> None:
        """The Notification was deleted: a running one starts no more pods (stored first, so a
        restart does not start any either), rolls back and then deletes its scope; a finished
        one's scope is deleted at once. A sweep follows either way, for whatever else is gone."""
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
            if run is not None and (run.finished or run.outcome == scope.OUTCOME_SUCCEEDED):
                await self.parts.scopes.forget(uid)
        if self._sweep is None or self._sweep.done():
            self._sweep = asyncio.create_task(self._sweep_later(), name="notification sweep")

    async def _sweep_later(self) -> None:
        await asyncio.sleep(self._sweep_delay)
        try:
            await self.reconcile(resume=False)
        except Exception:
            log.exception("sweeping the scopes of deleted notifications failed; the next "
                          "deletion or start sweeps again")

    async def resume(self) -> int:
        """Continue every Notification that was not finished when the server stopped, finish
        what is due for those deleted meanwhile, and delete the rest's scope; returns how many
        runs started."""
        return await self.reconcile(resume=True)

    async def reconcile(self, resume: bool) -> int:
        """Compare the scope tables with the stored Notifications (by UID). Rows of a
        Notification that is gone are deleted, after its rollback if one is due (or it was
        deleted before its outcome was decided). With `resume`, unfinished Notifications are
        started again, and one whose scope was never recorded fails with ScopeNotRecorded."""
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
        started = 0
        for uid, run in runs.items():
            if uid in self._runs:
                continue
            obj = objects.get(uid)
            if obj is None:
                if run.finished or run.outcome == scope.OUTCOME_SUCCEEDED:
                    await scopes.forget(uid)
                else:
                    self._start(run, None)
                    started += 1
            elif obj.get("status", {}).get("phase") in records.FINISHED_PHASES:
                if not run.finished:
                    await scopes.mark_finished(uid)
            elif resume:
                self._start(run, obj.get("status") or {})
                started += 1
        if resume:
            for uid, obj in objects.items():
                if uid not in runs and obj.get("status", {}).get(
                        "phase") not in records.FINISHED_PHASES:
                    await self._fail_unrecorded(obj)
        return started

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
            status = {**(obj.get("status") or {}), "phase": records.FAILED,
                      "completionTime": now, "conditions": [condition]}
            status.setdefault("startTime", now)
            return {**obj, "status": status}

        try:
            await self.parts.notifications.guaranteed_update(meta["namespace"], meta["name"],
                                                             fail)
        except NotFound:
            return
        self.parts.metrics.notification_finished(records.FAILED)
        self.parts.events.finished(notification_ref(meta["namespace"], meta["name"], meta["uid"]),
                                   records.FAILED, SCOPE_NOT_RECORDED, condition["message"])

    async def shutdown(self) -> None:
        tasks = [task for _, task in self._runs.values()]
        if self._sweep is not None:
            tasks.append(self._sweep)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
