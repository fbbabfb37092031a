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

With spec.release (docs/notifications.md, "Quiesce windows") the run holds a window once every
pod is quiesced (its run Succeeded, or its record is Held), until the release action (stored in
the run by any replica), afterSeconds, maxHoldSeconds, the deadline, deletion or a failure; then
it releases every quiesced pod exactly once: the window's end and each pod's release start are
stored before they take effect, and a release whose record exists is never run again. Every
run takes the leader's quiesce locks (``quiesce_locks``, spec.concurrencyPolicy) for its pods
while it quiesces them.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.api.types import (
    CONDITION_PODS_SKIPPED,
    CONDITION_QUIESCED,
    CONDITION_TYPES,
    CONDITION_WAITING_FOR_NOTIFICATION,
    CONDITION_WAITING_FOR_PODS,
    DEFAULT_PARALLELISM,
    WAIT,
    Phase,
)
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.authz.sar import Authorizer
from apiserver.errors import APIError
from apiserver.fanout import scope
from apiserver.fanout.pod_feed import NewPods
from apiserver.fanout.quiesce_locks import Holder, Key, QuiesceLocks
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
from apiserver.registry.paging import all_objects
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
HELD = "Held"
"""A pod's reason when its quiesce record is Held (a held notifier): it counts as quiesced."""
QUIESCE_CONFLICT = "QuiesceConflict"
"""A pod's reason when another Notification is quiescing it with the same notifier (Forbid)."""
OTHER_NOTIFICATION_QUIESCING, NO_POD_WAITING = "OtherNotificationQuiescing", "NoPodWaiting"
"""The reasons of WaitingForNotification True and False (concurrencyPolicy Wait)."""
RELEASE_REQUESTED, AFTER_SECONDS = "ReleaseRequested", "AfterSeconds"
RELEASED_AFTER_MAX_HOLD, HOLD_ENDED = "ReleasedAfterMaxHold", "HoldEnded"
RELEASE_FAILED = "ReleaseFailed"
WINDOW_FAILURES = (RELEASED_AFTER_MAX_HOLD, HOLD_ENDED, DEADLINE_EXCEEDED, DELETED)
"""Reasons a window ends with that make the Notification fail (even with every pod quiesced
and released): nobody released it in time, a hold ended on its own, the deadline, deletion."""
ALL_PODS_QUIESCED, RELEASED = "AllPodsQuiesced", "Released"
"""The reasons of the Quiesced condition, True and False (or ReleasedAfterMaxHold)."""
RELEASE_ATTEMPT = 1
"""The attempt of a release record (its name's digest, its rollback-attempt label): a release
runs once, never again (unlike a rollback)."""


class PodAdmission(Protocol):
    """What the fan-out needs of ``apiserver.notifier.admission.Admission``."""

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: NotifyRequest) -> Any: ...

    async def start(self, admitted: Any) -> dict[str, Any]: ...


class RunWaiter(Protocol):
    async def wait(self, namespace: str, record: str, timeout: float) -> None: ...


class FanoutMetrics(Protocol):
    def notification_finished(self, phase: str) -> None: ...

    def window_read(self) -> None: ...


class HoldReleases(Protocol):
    """What the fan-out needs of held notifiers (``apiserver.notifier.holds.HoldReleases``):
    store a release request on a Held record (idempotent; NotFound if the record is gone)."""

    async def request(self, namespace: str, name: str, by: UserInfo) -> dict[str, Any]: ...


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
    holds: HoldReleases
    """Releases Held records (a held quiesce's window ends by ending its holds)."""


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


def _is_held(record: dict[str, Any]) -> bool:
    return (record.get("status") or {}).get("phase") == Phase.HELD


def hold_end(record: Mapping[str, Any]) -> str:
    """When a finished held record's hold may first have ended: the earliest end of its
    containers' commands (an exit, or the moment the exec stream broke, seen by the replica
    that held it), not when the record could be written (kube-apiserver may have been
    unreachable meanwhile); its completionTime if no container says."""
    status = record.get("status") or {}
    ends = [c["completionTime"] for c in status.get("containers") or []
            if isinstance(c, Mapping) and isinstance(c.get("completionTime"), str)]
    return min(ends, default=str(status.get("completionTime") or records.now()))


def _keep_release_request(stored: dict[str, Any] | None, status: dict[str, Any]
                          ) -> dict[str, Any]:
    """`status` with the releaseRequestedTime that the release action (on any replica) wrote
    to the stored object, if the run has not heard of it yet."""
    requested = ((stored or {}).get("window") or {}).get("releaseRequestedTime")
    if not requested or "window" not in status or "releaseRequestedTime" in status["window"]:
        return status
    return {**status, "window": {**status["window"], "releaseRequestedTime": requested}}


def _turn_done(running: set[asyncio.Task[None]], slots: asyncio.Semaphore,
               task: asyncio.Task[None]) -> None:
    running.discard(task)
    slots.release()


class _Gone(Exception):
    """The Notification object no longer exists (or is another one with the same name)."""


class _FinishedAlready(Exception):
    """The stored Notification is finished: its status never changes again."""


class NotificationRun:
    """One Notification's fan-out, from its run row (and its status, None once the object is
    gone: then only what is due after a deletion is left to do)."""

    def __init__(self, parts: FanoutParts, run: ScopeRun, status: dict[str, Any] | None,
                 locks: QuiesceLocks) -> None:
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
        self.release: dict[str, Any] | None = self.spec.get("release")
        """spec.release: a quiesce window (docs/notifications.md, "Quiesce windows")."""
        self.window: dict[str, str] = dict(run.window)
        self.woken = asyncio.Event()
        """Set when a release was requested through this replica: look at once."""
        self.locks = locks
        self.holder = Holder(self.uid, self.namespace, self.name)
        self.conflicts: dict[str, str] = {}
        """Pod -> the Notification that was quiescing it (Forbid), for the Failed message."""
        self.waiting: dict[str, str] = {}
        """Pod -> the Notification it waits for (concurrencyPolicy Wait), for the
        WaitingForNotification condition."""
        self.run_conflicts: dict[str, str] = {}
        """Pod -> the record of the same notifier that was unfinished on it (RunConflict), for
        the Failed message."""
        self._release_detail = ""
        self.finished_stored = False
        """Set once the stored object is finished (by this run's final write, or by another
        leader's while this replica was paused past its Lease): nothing more is written."""
        self.finished_elsewhere = False
        """Set if it was another leader's final write."""
        self._hold_end_at = ""
        """When a held pod's hold ended on its own (HoldEnded): the window's end."""

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
        """Store the status; never over a finished one (a finished Notification never changes
        again, as a finished record does not: a leader paused past its Lease that resumes
        cannot overwrite the result of the leader that took over)."""
        if self.deleted.is_set() or self.finished_stored:
            return
        self.status["counts"] = self._counts()
        if self.release is not None:
            self.status["window"] = dict(self.window)
        self.status["conditions"] = self._conditions()
        snapshot = dict(self.status)

        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != self.uid:
                raise _Gone
            if (obj.get("status") or {}).get("phase") in records.FINISHED_PHASES:
                raise _FinishedAlready
            return {**obj, "status": _keep_release_request(obj.get("status"), snapshot)}

        try:
            await self.parts.notifications.guaranteed_update(self.namespace, self.name, mutate)
        except (NotFound, _Gone):
            self.deleted.set()
        except _FinishedAlready:
            self.finished_stored = self.finished_elsewhere = True
            log.warning("the notification is finished already (another leader finished it "
                        "while this replica could not run): this run writes nothing more",
                        extra={"namespace": self.namespace, "notification": self.name})
        else:
            self.finished_stored = snapshot.get("phase") in records.FINISHED_PHASES

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
        quiesced = self._quiesced_condition(current.get(CONDITION_QUIESCED))
        if quiesced is not None:
            current[CONDITION_QUIESCED] = quiesced
        waiting_for = self._waiting_condition(current.get(CONDITION_WAITING_FOR_NOTIFICATION))
        if waiting_for is not None:
            current[CONDITION_WAITING_FOR_NOTIFICATION] = waiting_for
        return sorted(current.values(), key=lambda c: c["type"] not in CONDITION_TYPES)

    def _waiting_condition(self, current: dict[str, Any] | None) -> dict[str, Any] | None:
        """WaitingForNotification: True while pods wait for other Notifications (Wait), False
        once none does; None if no pod ever waited."""
        if self.waiting:
            names = ", ".join(f'{pod} for notification "{other}"' for pod, other in
                              list(self.waiting.items())[:MAX_PODS_IN_MESSAGE]) + (
                f" and {len(self.waiting) - MAX_PODS_IN_MESSAGE} more"
                if len(self.waiting) > MAX_PODS_IN_MESSAGE else "")
            count = len(self.waiting)
            return _condition_now(
                current, CONDITION_WAITING_FOR_NOTIFICATION, OTHER_NOTIFICATION_QUIESCING,
                f"{count} pod{'s' if count != 1 else ''} wait{'' if count != 1 else 's'} for "
                f'another Notification quiescing {"them" if count != 1 else "it"} with '
                f'notifier "{self.spec["notifier"]}" to release '
                f"{'them' if count != 1 else 'it'} (concurrencyPolicy Wait): {names}")
        if current is not None and current.get("status") == "True":
            return _condition_now(current, CONDITION_WAITING_FOR_NOTIFICATION, NO_POD_WAITING,
                                  "no pod waits for another Notification", status="False")
        return None

    def _counts(self) -> dict[str, int]:
        return scope.counts(list(self.pods.values()), released=self.release is not None)

    def _quiesced_condition(self, current: dict[str, Any] | None) -> dict[str, Any] | None:
        """Quiesced: True while the window is open, False once the release started."""
        if self.release is None:
            return None
        total = sum(p.state != scope.SKIPPED for p in self.pods.values())
        if self.window.get("releaseTime"):
            why = self.window.get("releaseReason", "")
            reason = RELEASED_AFTER_MAX_HOLD if why == RELEASED_AFTER_MAX_HOLD else RELEASED
            return _condition_now(current, CONDITION_QUIESCED, reason, (
                f"released ({why}) at {self.window['releaseTime']}: "
                + (f"every pod was quiesced from {self.window['quiescedTime']}"
                   if self.window.get("quiescedTime") else "not every pod was quiesced")),
                status="False")
        if self.window.get("quiescedTime"):
            return _condition_now(current, CONDITION_QUIESCED, ALL_PODS_QUIESCED,
                                  f"all {total} pods quiesced at {self.window['quiescedTime']}; "
                                  "they stay quiesced until the release")
        return None

    def _changed(self, pod: ScopedPod) -> None:
        """Keep the pod's new state; the status (counts) follows within
        STATUS_INTERVAL_SECONDS."""
        self.pods[pod.pod_uid] = pod
        self._flush_soon()

    def _flush_soon(self) -> None:
        """Store the status within STATUS_INTERVAL_SECONDS."""
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
            self.locks.release_all(self.uid)
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
        if self.release is not None and not deadline_passed and self._all_quiesced():
            await self._hold_window(started)
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
                record = await self._record(pod.record, held=self.release is not None)
                if record is None and not self.stopped:
                    unstored.append(pod)
                else:
                    state, reason = self._result_of(record)
                    await self._record_result(pod, state, reason)
                    if not self._holds_after(state):
                        self.locks.release(self._key(pod), self.holder)
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

    async def _record(self, name: str, *, held: bool = False) -> dict[str, Any] | None:
        """The record, once finished (waiting for a run of this process, or re-reading one that
        another replica runs: a replica that dies has its records ended by a survivor), or
        with `held` once Held; None if absent."""
        if not name:
            return None

        def settled(record: dict[str, Any]) -> bool:
            return records.is_finished(record) or (held and _is_held(record))

        try:
            record = await self.parts.podnotifiers.get(self.namespace, name)
            if not settled(record):
                await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
            while not settled(record):
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
        if _is_held(record):
            return scope.SUCCEEDED, HELD
        return scope.FAILED, record["status"].get("reason") or records.INTERRUPTED

    async def _rerun_unstored(self, pod: ScopedPod) -> None:
        """Run a pod whose start was marked but whose record was never stored, as that record.
        A create of the stopped server that lands late makes this one refused (the name
        exists, or that record counts on the pod: 409): then that record's result stands, so
        the pod is notified once either way."""
        state, reason = await self._run_once(pod, self.spec["notifier"], pod.record,
                                             notification_label(self.name))
        await self._record_result(pod, state, reason)
        if not self._holds_after(state):
            self.locks.release(self._key(pod), self.holder)

    async def _run_once(self, pod: ScopedPod, notifier: str, name: str, labels: dict[str, str]
                        ) -> tuple[str, str]:
        """Run `notifier` on the pod as record `name`, whose start was stored before a stop:
        if a create of the stopped server lands late, ours is refused and that record's result
        stands, so it runs once either way."""
        state, reason = await self._attempt(pod, notifier, name, labels)
        if reason in (RunConflict.__name__, errors.AlreadyExists.reason):
            for _ in range(UNSTORED_WAIT_ATTEMPTS):
                record = await self._record(name, held=self.release is not None)
                if record is not None:
                    return self._result_of(record)
                await asyncio.sleep(RECORD_POLL_SECONDS)
            return scope.FAILED, records.INTERRUPTED
        return state, reason

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
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))
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
            other = self.locks.try_acquire(self._key(pod), self.holder)
            if other is not None and self.spec.get("concurrencyPolicy") != WAIT:
                slots.release()
                await self._conflict(pod, other)
                continue
            if other is not None:  # Wait: in its own task, holding the slot
                self.waiting[pod.pod] = other.name
                self._flush_soon()
                task = asyncio.create_task(self._wait_turn(pod, deadline))
                running.add(task)
                task.add_done_callback(functools.partial(_turn_done, running, slots))
                continue
            name = record_name(pod.pod, self.spec["notifier"], self.uid, pod.pod_uid)
            if self._halted() or not await self._stored("start a pod", functools.partial(
                    self.parts.scopes.start_pod, self.uid, pod.pod_uid, name)):
                slots.release()
                self.locks.release(self._key(pod), self.holder)
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
        if not self._holds_after(state):
            self.locks.release(self._key(pod), self.holder)

    # one quiesce at a time

    def _key(self, pod: ScopedPod) -> Key:
        return (self.namespace, pod.pod_uid, self.spec["notifier"])

    def _holds_after(self, state: str) -> bool:
        """Whether the pod's lock stays held after its run ended in `state`: a quiesced pod of
        a window, until its release."""
        return self.release is not None and state == scope.SUCCEEDED

    async def _conflict(self, pod: ScopedPod, other: Holder) -> None:
        """Forbid: the pod fails QuiesceConflict (under Abort that stops the run)."""
        self.conflicts[pod.pod] = other.name
        log.info("pod not notified: another notification is quiescing it", extra={
            "namespace": self.namespace, "notification": self.name, "pod": pod.pod,
            "other": other.name, "notifier": self.spec["notifier"]})
        await self._record_result(pod, scope.FAILED, QUIESCE_CONFLICT)

    async def _wait_turn(self, pod: ScopedPod, deadline: float | None) -> None:
        """Wait: the pod's turn once the other Notification released it; it stays pending if
        the run stops or the deadline passes first."""
        try:
            other = await self.locks.acquire_waiting(self._key(pod), self.holder,
                                                     give_up=self._halted, deadline=deadline)
        finally:
            self.waiting.pop(pod.pod, None)
            self._flush_soon()
        if other is not None:
            return
        name = record_name(pod.pod, self.spec["notifier"], self.uid, pod.pod_uid)
        if self._halted() or (deadline is not None and time.monotonic() >= deadline) or (
                not await self._stored("start a pod", functools.partial(
                    self.parts.scopes.start_pod, self.uid, pod.pod_uid, name))):
            self.locks.release(self._key(pod), self.holder)
            return
        self._changed(replace(pod, state=scope.STARTED, record=name))
        await self._turn(pod, name)

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
            if isinstance(error, RunConflict):
                self.run_conflicts[pod.pod] = error.record
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
        record = await self._record(name, held=self.release is not None and notifier ==
                                    self.spec["notifier"])
        if record is None:
            return scope.FAILED, "RecordDeleted"
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, records.COMPLETED
        if _is_held(record):
            return scope.SUCCEEDED, HELD
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
        if self.release is not None:
            outcome, reason = await self._release_window(outcome, reason)
        decided = await self._stored("store the outcome", lambda: self.parts.scopes.decide(
            self.uid, outcome, reason))
        if decided is not None:
            outcome, reason = decided.outcome, decided.outcome_reason
        if outcome == scope.OUTCOME_FAILED:
            for pod in await self.parts.scopes.pods(self.uid):
                self.pods[pod.pod_uid] = pod
            await self._rollback()
        if not self.deleted.is_set():
            await self._write_final(outcome, reason,
                                    failure[1] if failure else self._release_detail)
        if self.deleted.is_set():
            await self._stored("forget the scope", lambda: self.parts.scopes.forget(self.uid))
        else:
            await self._stored("mark the run finished",
                               lambda: self.parts.scopes.mark_finished(self.uid))

    # the quiesce window

    def _all_quiesced(self) -> bool:
        """Every pod that was not skipped is quiesced (and at least one is)."""
        states = {p.state for p in self.pods.values()} - {scope.SKIPPED}
        return states == {scope.SUCCEEDED}

    async def _hold_window(self, started: str) -> None:
        """Every pod is quiesced: store quiescedTime (once), show the window (Quiesced True),
        and wait until it ends; store why (the release is then due)."""
        if self.window.get("releaseReason"):
            return  # resumed after the window ended: release what is due
        opening = not self.window.get("quiescedTime")
        quiesced = self.window.get("quiescedTime") or records.now()
        stored = await self._stored("store the window", lambda: self.parts.scopes.note_window(
            self.uid, quiescedTime=quiesced))
        if stored is not None:
            self.window = dict(stored.window)
        if opening:
            self.parts.events.quiesced(
                self.ref, self.spec["notifier"],
                sum(p.state != scope.SKIPPED for p in self.pods.values()),
                self.window.get("quiescedTime", quiesced))
        log.info("every pod quiesced: the window is open", extra={
            "namespace": self.namespace, "notification": self.name, "quiesced": quiesced})
        await self._stored("store the status", self._write_status)
        why = await self._window_end(started)
        await self._end_window(why)

    async def _window_end(self, started: str) -> str:
        """Wait for the first end of the window and say which (see WINDOW_FAILURES)."""
        release = self.release or {}
        start = parse_timestamp(started) or time.time()
        quiesced = parse_timestamp(self.window.get("quiescedTime")) or time.time()
        ends = [(start + release.get("maxHoldSeconds", RUN_WAIT_SECONDS),
                 RELEASED_AFTER_MAX_HOLD)]
        if release.get("afterSeconds") is not None:
            ends.append((quiesced + release["afterSeconds"], AFTER_SECONDS))
        if self.spec.get("activeDeadlineSeconds") is not None:
            ends.append((start + self.spec["activeDeadlineSeconds"], DEADLINE_EXCEEDED))
        while True:
            if self.deleted.is_set():
                return DELETED
            stored = await self._stored("read the run", lambda: self.parts.scopes.run(self.uid))
            self.parts.metrics.window_read()
            if stored is None or stored.stopped == DELETED:
                self._note_stopped(DELETED)
                self.deleted.set()
                return DELETED
            due = list(ends)
            requested = parse_timestamp(stored.window.get("releaseRequestedTime"))
            if requested is not None:
                self.window["releaseRequestedTime"] = stored.window["releaseRequestedTime"]
                due.append((requested, RELEASE_REQUESTED))
            now = time.time()
            passed = sorted(end for end in due if end[0] <= now)
            if passed:
                return passed[0][1]
            ended = await self._hold_ended()
            if ended:
                self._release_detail = ended
                return HOLD_ENDED
            self.woken.clear()
            wait = min(RECORD_POLL_SECONDS, min(at for at, _ in ends) - now)
            waiters = [asyncio.create_task(self.deleted.wait()),
                       asyncio.create_task(self.woken.wait())]
            try:
                await asyncio.wait(waiters, timeout=max(0.0, wait),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def _hold_ended(self) -> str:
        """Why the window must end because a held pod's hold ended on its own (its record
        finished: HoldExpired, HoldEnded, PodDeleted, Interrupted ...), or ""."""
        for pod in list(self.pods.values()):
            if pod.state != scope.SUCCEEDED or pod.reason != HELD:
                continue
            try:
                record = await self.parts.podnotifiers.get(self.namespace, pod.record)
            except NotFound:
                return f"the held record {pod.record} of pod {pod.pod} was deleted"
            if records.is_finished(record):
                self._hold_end_at = hold_end(record)
                return (f"the hold of pod {pod.pod} ended on its own "
                        f"({record['status'].get('reason') or record['status']['phase']})")
        return ""

    async def _end_window(self, why: str) -> str:
        """Store that the window ended (the first reason stands) and that the release of every
        quiesced pod is due; returns the reason that stands."""
        at = self._hold_end_at or records.now()
        stored = await self._stored("end the window", lambda: self.parts.scopes.end_window(
            self.uid, why, at))
        if stored is None:
            return why
        self.window = dict(stored.window)
        for pod in await self.parts.scopes.pods(self.uid):
            self.pods[pod.pod_uid] = pod
        log.info("the window ends: releasing", extra={
            "namespace": self.namespace, "notification": self.name,
            "reason": self.window.get("releaseReason")})
        await self._stored("store the status", self._write_status)
        return self.window.get("releaseReason", why)

    async def _release_window(self, outcome: str, reason: str) -> tuple[str, str]:
        """End the window (if it has not ended: the forward phase failed, or it was deleted),
        release every quiesced pod, and return the outcome with the release's say."""
        why = self.window.get("releaseReason") or (reason if outcome == scope.OUTCOME_FAILED
                                                   else RELEASE_REQUESTED)
        why = await self._end_window(why)
        await self._release_pods()
        if outcome == scope.OUTCOME_FAILED:
            return outcome, reason
        if why in WINDOW_FAILURES:
            if why == RELEASED_AFTER_MAX_HOLD:
                self._release_detail = (
                    f"nobody released the window within maxHoldSeconds "
                    f"({self.release.get('maxHoldSeconds') if self.release else '?'} s), so "
                    "its orchestrator is presumed dead; a snapshot it meant to take is suspect")
            return scope.OUTCOME_FAILED, why
        failed = [p.pod for p in self.pods.values() if p.release == scope.RELEASE_FAILED]
        if failed:
            self._release_detail = (f"{len(failed)} releases failed: "
                                    + ", ".join(failed[:MAX_PODS_IN_MESSAGE]))
            return scope.OUTCOME_FAILED, RELEASE_FAILED
        return outcome, reason

    async def _release_pods(self) -> None:
        """Release every pod whose release is due, at the run's parallelism, exactly once;
        then store unquiescedTime."""
        targets = [p for p in self.pods.values()
                   if p.release in (scope.RELEASE_PENDING, scope.RELEASE_STARTED)]
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))

        async def release(pod: ScopedPod) -> None:
            async with slots:
                outcome = await self._release_pod(pod)
                await self._stored("store a release result", lambda: self.parts.scopes
                                   .finish_release(self.uid, pod.pod_uid, outcome))
                self._changed(replace(self.pods[pod.pod_uid], release=outcome))
                self.locks.release(self._key(pod), self.holder)

        await asyncio.gather(*(release(pod) for pod in targets))
        done = sum(p.release in scope.RELEASE_FINAL for p in self.pods.values())
        if done and not self.window.get("unquiescedTime"):
            unquiesced = records.now()
            stored = await self._stored("store the window", lambda: self.parts.scopes
                                        .note_window(self.uid, unquiescedTime=unquiesced))
            if stored is not None:
                self.window = dict(stored.window)
            releases = Counter(p.release for p in self.pods.values())
            self.parts.events.unquiesced(
                self.ref, self.window.get("releaseReason", ""), self.window.get("quiescedTime"),
                self.window.get("unquiescedTime", unquiesced), releases[scope.RELEASE_DONE],
                releases[scope.RELEASE_FAILED])
        if targets:
            outcomes = Counter(self.pods[p.pod_uid].release for p in targets)
            log.info("released", extra={
                "namespace": self.namespace, "notification": self.name,
                "released": outcomes[scope.RELEASE_DONE],
                "failed": outcomes[scope.RELEASE_FAILED]})

    async def _release_pod(self, pod: ScopedPod) -> str:
        """Release one quiesced pod: end its hold (a Held record) and run release.notifier,
        once; a release marked started is never run again if its record exists, whatever
        its outcome (its command may have run), and runs once under that name if not."""
        notifier = (self.release or {}).get("notifier")
        labels = {**notification_label(self.name), ROLLBACK_ATTEMPT_LABEL: str(RELEASE_ATTEMPT)}
        if pod.release == scope.RELEASE_STARTED and notifier:
            record = await self._record(pod.release_record)
            if record is None:
                state, _ = await self._run_once(pod, notifier, pod.release_record, labels)
            else:
                state, _ = self._result_of(record)
            return scope.RELEASE_DONE if state == scope.SUCCEEDED else scope.RELEASE_FAILED
        held = pod.reason == HELD
        hold_released = await self._end_hold(pod) if held else False
        if not notifier:
            if held:
                return scope.RELEASE_DONE if hold_released else scope.RELEASE_FAILED
            log.error("a quiesced pod has nothing that unquiesces it: spec.release has no "
                      "notifier and its quiesce was not held", extra={
                          "namespace": self.namespace, "notification": self.name,
                          "pod": pod.pod})
            return scope.RELEASE_FAILED
        name = record_name(pod.pod, notifier, self.uid, pod.pod_uid, RELEASE_ATTEMPT)
        if not await self._stored("start a release", lambda: self.parts.scopes.start_release(
                self.uid, pod.pod_uid, name)):
            return scope.RELEASE_FAILED
        self.pods[pod.pod_uid] = replace(pod, release=scope.RELEASE_STARTED, release_record=name)
        state, _ = await self._attempt(pod, notifier, name, labels)
        return scope.RELEASE_DONE if state == scope.SUCCEEDED else scope.RELEASE_FAILED

    async def _end_hold(self, pod: ScopedPod) -> bool:
        """Release a Held record (idempotent) and wait until it finished: whether it ended
        Succeeded (Released). A record that is gone counts as ended: its command is over."""
        try:
            record: dict[str, Any] | None = await self.parts.podnotifiers.get(
                self.namespace, pod.record)
        except NotFound:
            return True
        if record is not None and not records.is_finished(record):
            try:
                await self.parts.holds.request(self.namespace, pod.record, self.requester)
            except NotFound:
                return True
            record = await self._record(pod.record)
        return record is None or record["status"]["phase"] == records.SUCCEEDED

    def _condition(self, outcome: str, reason: str, detail: str) -> dict[str, Any]:
        counts = self._counts()
        released = (f"; released {counts['released']} of {counts['succeeded']}"
                    if self.release is not None else "")
        if outcome == scope.OUTCOME_SUCCEEDED:
            message = (f"{counts['succeeded']} pods succeeded, {counts['skipped']} skipped"
                       + released)
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
                      else "") + released)
        conflicts = [f"{pod} by {other}" for pod, other in self.conflicts.items()]
        if conflicts:
            message += ("; being quiesced by another Notification: "
                        + ", ".join(conflicts[:MAX_PODS_IN_MESSAGE]))
        running = [f"{p.pod} (podnotifier {self.run_conflicts[p.pod]})"
                   for p in self.pods.values() if p.state == scope.FAILED
                   and p.reason == RunConflict.__name__ and p.pod in self.run_conflicts]
        if running:
            message += (f'; notifier "{self.spec["notifier"]}" was already running on: '
                        + ", ".join(running[:MAX_PODS_IN_MESSAGE]))
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
        if self.finished_stored:
            return
        await self._stored("store the final status",
                           functools.partial(self._write_status, **changes))
        if not self.deleted.is_set() and not self.finished_elsewhere:
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
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))

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
        self.locks = QuiesceLocks()
        """One quiesce at a time, across this leader's runs (rebuilt when it starts leading)."""
        self._locks_rebuilt = False

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
        self._locks_rebuilt = False
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
        runner = NotificationRun(self.parts, run, status, self.locks)
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
        if not self._locks_rebuilt:
            await self._rebuild_locks(runs.values())
            self._locks_rebuilt = True
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

    async def _rebuild_locks(self, runs: Iterable[ScopeRun]) -> None:
        """Before a new leader starts any pod: the quiesce locks its unfinished runs hold, from
        their stored scopes (a pod started, or quiesced in a window and not yet released)."""
        self.locks.clear()
        held = 0
        for run in runs:
            if run.finished:
                continue
            holder = Holder(run.notification_uid, run.namespace, run.name)
            for pod in await self.parts.scopes.pods(run.notification_uid):
                if pod.state == scope.STARTED or (
                        run.spec.get("release") is not None and pod.state == scope.SUCCEEDED
                        and pod.release not in scope.RELEASE_FINAL):
                    self.locks.hold((run.namespace, pod.pod_uid, run.spec["notifier"]), holder)
                    held += 1
        if held:
            log.info("quiesce locks rebuilt from the stored scopes", extra={"locks": held})

    async def scope_pods(self, notification: dict[str, Any]) -> list[str] | None:
        """The names of the pods in the Notification's scope, in the order they joined (the
        pods its window holds and its release unquiesces); None if it has no recorded run."""
        uid = notification["metadata"]["uid"]
        if await self.parts.scopes.run(uid) is None:
            return None
        return [pod.pod for pod in await self.parts.scopes.pods(uid)]

    async def request_release(self, notification: dict[str, Any], at: str) -> bool:
        """The release action, on any replica: store the request in the run (the leader's run
        reads it within about a second; this replica's own run at once). False if the
        Notification has no run (never recorded, or forgotten)."""
        uid = notification["metadata"]["uid"]
        stored = await self.parts.scopes.note_window(uid, releaseRequestedTime=at)
        entry = self._runs.get(uid)
        if entry is not None:
            entry[0].woken.set()
        return stored is not None

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
        return {obj["metadata"]["uid"]: obj
                async for obj in all_objects(self.parts.notifications)}

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
