"""A Notification's run: its state, how it stores its status, and one pod's attempt.

`RunBase` holds what every phase of a run uses (apiserver/fanout/run.py runs the pods and
rolls back, apiserver/fanout/window.py holds and releases the quiesce window): the pods of its
scope as last stored, the status it writes (counts coalesced, never over a finished stored
object: a leader paused past its Lease that resumes cannot overwrite the result of the leader
that took over), and `_attempt`, which runs a notifier on one pod as the Notification's
requester and turns every error into that pod's reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.authz.attributes import denial_message
from apiserver.clock import Clock, utc_now
from apiserver.fanout import scope, status
from apiserver.fanout.parts import FanoutParts
from apiserver.fanout.quiesce_locks import Holder, Key, QuiesceLocks
from apiserver.fanout.reasons import DELETED, HELD, INTERNAL_ERROR, pod_outcome
from apiserver.fanout.run_records import (
    ROLLBACK_ATTEMPT_LABEL,
    is_held,
    notification_label,
    record_name,
    requester,
    result_of,
    stored_record,
)
from apiserver.fanout.scope import ScopedPod, ScopeRun
from apiserver.fanout.spec import ABORT
from apiserver.notifier import records
from apiserver.notifier.errors import NotAuthorized, PodNotFound, RunConflict, ServerAtCapacity
from apiserver.notifier.events import notification_ref
from apiserver.notifier.notifier_pods import notify_attributes
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import retry_until_stored
from apiserver.registry.errors import NotFound

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS_INTERVAL_SECONDS = 0.5
"""How long a change of counts alone waits before the status is stored (coalesced)."""
RUN_WAIT_SECONDS = 24 * 3600
"""How long a pod's turn waits for its run; runs end by their own timeouts long before."""
RECORD_POLL_SECONDS = 1.0
"""How often a run re-reads a record that another replica's runner is running."""
CAPACITY_WAIT_SECONDS = (0.02, 1.0)
"""A run that the server's capacity refused (``ServerAtCapacity``) asks again after the first
wait, doubled each time up to the second."""


def status_time(clock: Clock) -> str:
    """A time the fan-out writes into a status (startTime, quiescedTime ...): the clock's now,
    as records write theirs."""
    return records.rfc3339(utc_now(clock))


class Gone(Exception):
    """The Notification object no longer exists (or is another one with the same name)."""


class FinishedAlready(Exception):
    """The stored Notification is finished: its status never changes again."""


class NotStarted(Exception):
    """A pod's forward step waited for the server's capacity, and the run was stopped
    meanwhile: it never started (the pod stays pending)."""


class RunBase:
    """One Notification's run, from its run row (and its status, None once the object is
    gone: then only what is due after a deletion is left to do). Its waits and the times it
    stores go by `clock`."""

    def __init__(self, parts: FanoutParts, run: ScopeRun, stored_status: dict[str, Any] | None,
                 locks: QuiesceLocks, clock: Clock) -> None:
        self.parts = parts
        self.clock = clock
        self.spec = run.spec
        self.namespace, self.name, self.uid = run.namespace, run.name, run.notification_uid
        self.ref = notification_ref(self.namespace, self.name, self.uid)
        self.stopped = ""
        self.status: dict[str, Any] = dict(stored_status or {})
        self.pods: dict[str, ScopedPod] = {}
        self.deleted = asyncio.Event()
        """Set when the Notification is deleted: start no more pods, then roll back."""
        self._note_stopped(run.stopped)
        if stored_status is None:
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
        self._last_success_at = ""
        """The latest moment a pod's forward step succeeded (its record's completionTime, or
        heldTime if it holds): in a window, when the last pod was quiesced (quiescedTime)."""

    def _halted(self) -> bool:
        return self.deleted.is_set() or bool(self.stopped)

    async def _may_start(self) -> bool:
        """Whether a pod may start now: this run is not halted, and its stored run (read again:
        another replica may have stopped it; on Kubernetes from this replica's cache) is
        neither stopped nor gone."""
        if self._halted():
            return False
        stored = await self._stored("read the run", lambda: self.parts.scopes.run(self.uid))
        if stored is not None and stored.stopped:
            self._note_stopped(stored.stopped)  # stopped by a deletion meanwhile
        return stored is not None and not stored.stopped

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
        await self.clock.sleep(STATUS_INTERVAL_SECONDS)
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
        self.status["counts"] = self._facts().counts()
        if self.release is not None:
            self.status["window"] = dict(self.window)
        self.status["conditions"] = status.conditions(
            self.status.get("conditions") or [], self._facts())
        snapshot = dict(self.status)

        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != self.uid:
                raise Gone
            if (obj.get("status") or {}).get("phase") in records.FINISHED_PHASES:
                raise FinishedAlready
            return {**obj, "status": status.keep_release_request(obj.get("status"), snapshot)}

        try:
            await self.parts.notifications.guaranteed_update(self.namespace, self.name, mutate)
        except (NotFound, Gone):
            self.deleted.set()
        except FinishedAlready:
            self.finished_stored = self.finished_elsewhere = True
            log.warning("the notification is finished already (another leader finished it "
                        "while this replica could not run): this run writes nothing more",
                        extra={"namespace": self.namespace, "notification": self.name})
        else:
            self.finished_stored = snapshot.get("phase") in records.FINISHED_PHASES

    def _facts(self) -> status.RunFacts:
        return status.RunFacts(
            notifier=self.spec["notifier"], pods=list(self.pods.values()),
            window=self.window if self.release is not None else None,
            rollback=bool(self.spec.get("rollback")), waiting=self.waiting,
            conflicts=self.conflicts, run_conflicts=self.run_conflicts,
            now=status_time(self.clock))

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

    # one pod

    def _key(self, pod: ScopedPod) -> Key:
        return (self.namespace, pod.pod_uid, self.spec["notifier"])

    async def _record(self, name: str, *, held: bool = False) -> dict[str, Any] | None:
        """The record, once finished (waiting for a run of this process, or re-reading one that
        another replica runs: a replica that dies has its records ended by a survivor), or
        with `held` once Held; None if absent."""
        if not name:
            return None

        def settled(record: dict[str, Any]) -> bool:
            return records.is_finished(record) or (held and is_held(record))

        try:
            record = await self.parts.podnotifiers.get(self.namespace, name)
            if not settled(record):
                await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
            while not settled(record):
                await self.clock.sleep(RECORD_POLL_SECONDS)
                record = await self.parts.podnotifiers.get(self.namespace, name)
        except NotFound:
            return None
        return record

    async def _undo(self, pod: ScopedPod, notifier: str) -> tuple[str, str, int]:
        """Run the undo step `notifier` (a rollback, a release) on the pod, at least once:
        (SUCCEEDED or FAILED, the deciding attempt's record, its number). Attempt n is the
        record ``record_name(..., n)``, its claim: an attempt whose record ended stands,
        whatever its outcome; one that was interrupted (its server stopped during it) is
        followed by the next; the first without a record runs. The same step first and after a
        crash; a pod whose step took more than one attempt may have run it twice."""
        attempt = 1
        while True:
            name = record_name(pod.pod, notifier, self.uid, pod.pod_uid, attempt)
            if await stored_record(self.parts.podnotifiers, self.namespace, name) is None:
                labels = {**notification_label(self.name), ROLLBACK_ATTEMPT_LABEL: str(attempt)}
                state, reason = await self._attempt(pod, notifier, name, labels)
            else:
                state, reason = result_of(await self._record(name))
            if reason != records.INTERRUPTED:
                return state, name, attempt
            attempt += 1

    async def _start_when_capacity(self, pod_object: dict[str, Any], ask: NotifyRequest,
                                   forward: bool) -> None:
        """Admit and start the run; while the server runs its maximum of notifiers at once,
        wait and ask again (that refusal comes before anything is stored or run, so asking
        again runs the notifier at most once): a Notification's parallelism may exceed the
        server's capacity, and other requests share it. A forward step asks again only while
        the run may start pods (else ``NotStarted``)."""
        admission = self.parts.admission
        wait, longest = CAPACITY_WAIT_SECONDS
        while True:
            try:
                await admission.start(await admission.admit(self.requester, pod_object, ask))
                return
            except ServerAtCapacity:
                await self.clock.sleep(wait)
                wait = min(2 * wait, longest)
            if forward and not await self._may_start():
                raise NotStarted

    async def _attempt(self, pod: ScopedPod, notifier: str, name: str,
                       labels: dict[str, str], *, forward: bool = False) -> tuple[str, str]:
        """Run `notifier` on the pod as the Notification's requester, as record `name`:
        (final scope state, reason). A `forward` step (the notifier, not an undo step) that
        waited for the server's capacity starts only if the run may still start pods, and
        raises ``NotStarted`` otherwise; nothing else is raised but cancellation."""
        try:
            return await self._run_notifier(pod, notifier, name, labels, forward)
        except (asyncio.CancelledError, NotStarted):
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

    async def _authorize(self, pod: ScopedPod) -> None:
        """Raise NotAuthorized unless the requester may notify the pod now. First one review of
        every pod of the namespace, which the authorizer caches (so a fan-out over thousands of
        pods asks kube-apiserver once per cache TTL, not once per pod); only if that is refused,
        one of the pod by name (RBAC may grant some pods by resourceNames)."""
        authorizer = self.parts.authorizer
        if (await authorizer.authorize(self.requester, notify_attributes(self.namespace))).allowed:
            return
        notify = notify_attributes(self.namespace, pod.pod)
        decision = await authorizer.authorize(self.requester, notify)
        if not decision.allowed:
            raise NotAuthorized(errors.forbidden_message(
                "pods", GROUP, pod.pod, denial_message(self.requester.name, notify,
                                                       decision.reason)),
                group=GROUP, resource="pods", name=pod.pod)

    async def _run_notifier(self, pod: ScopedPod, notifier: str, name: str,
                            labels: dict[str, str], forward: bool) -> tuple[str, str]:
        admission = self.parts.admission
        pod_object = await admission.read_pod(self.namespace, pod.pod)
        if pod_object["metadata"]["uid"] != pod.pod_uid:
            raise PodNotFound(self.namespace, pod.pod)
        await self._authorize(pod)
        ask = NotifyRequest(name=name, generate_name="", labels=labels, notifier=notifier,
                            containers=self.spec.get("containers"),
                            timeout_seconds=self.spec.get("timeoutSeconds"),
                            ttl_seconds_after_finished=None)
        try:
            await self._start_when_capacity(pod_object, ask, forward)
        except (errors.AlreadyExists, RunConflict) as refused:
            if getattr(refused, "record", name) != name:
                raise  # another run of the notifier on the pod
            # The record exists already: this attempt's claim, taken by a create that landed
            # late (its server stopped, or was paused, meanwhile). Its result stands: the pod
            # runs at most once.
            log.info("the pod's record exists already: taking its result", extra={
                "namespace": self.namespace, "notification": self.name, "pod": pod.pod,
                "record": name})
            await self.parts.podnotifiers.consistent_read(self.namespace, name)
        await self.parts.runner.wait(self.namespace, name, RUN_WAIT_SECONDS)
        record = await self._record(name, held=self.release is not None and notifier ==
                                    self.spec["notifier"])
        if record is None:
            return scope.FAILED, "RecordDeleted"
        if record["status"]["phase"] == records.SUCCEEDED:
            return scope.SUCCEEDED, records.COMPLETED
        if is_held(record):
            return scope.SUCCEEDED, HELD
        return scope.FAILED, record["status"].get("reason") or records.FAILED
