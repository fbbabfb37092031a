"""The fan-out leader's bookkeeping: which Notification runs here, started, stopped, resumed.

With several replicas (docs/high-availability.md) only the elected fan-out leader runs
Notifications (`FanoutManager.lead` / `step_down`): any replica stores a new Notification's
scope, and the leader's reconciler starts it within about a second; a deletion through another
replica stores the run's stop flag (Deleted), which the leader's run and reconciler read. A
leader that steps down cancels its runs without writing anything final (as a crash would), and
the next leader resumes them; a pod whose record another replica is still running takes that
record's result once it finishes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from apiserver import errors
from apiserver.clock import Clock
from apiserver.fanout import scope
from apiserver.fanout.parts import FanoutParts
from apiserver.fanout.quiesce_locks import Holder, QuiesceLocks
from apiserver.fanout.reasons import DELETED, SCOPE_NOT_RECORDED
from apiserver.fanout.run import NotificationRun
from apiserver.fanout.run_base import Gone, status_time
from apiserver.fanout.run_records import claim_name, stored_record
from apiserver.fanout.scope import ScopeRun
from apiserver.notifier import records
from apiserver.notifier.events import notification_ref
from apiserver.registry.errors import NotFound
from apiserver.registry.paging import all_objects
from apiserver.registry.watch import EventType
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)

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


class FanoutManager:
    """Starts, stops and resumes Notification runs, and deletes the scope of Notifications
    that are gone. Runs happen only while this replica leads (`lead` to `step_down`); on any
    replica `begin` stores a new Notification's scope and `deleted` its stop flag.

    `scope_grace` and `absent_grace` (seconds) are the waits of SCOPE_GRACE_SECONDS and
    ABSENT_GRACE_SECONDS; a single replica over SQLite, where no other replica writes and no
    cache lags, may set them to 0. Every wait and time read of the fan-out (its runs, their
    windows and quiesce locks) goes by `clock`."""

    def __init__(self, parts: FanoutParts, sweep_delay: float = SWEEP_DELAY_SECONDS, *,
                 clock: Clock, reconcile_interval: float = RECONCILE_INTERVAL_SECONDS,
                 scope_grace: float = SCOPE_GRACE_SECONDS,
                 absent_grace: float = ABSENT_GRACE_SECONDS) -> None:
        self.parts = parts
        self.clock = clock
        self._sweep_delay = sweep_delay
        self._interval = reconcile_interval
        self._scope_grace = scope_grace
        self._absent_grace = absent_grace
        self._runs: dict[str, tuple[NotificationRun, asyncio.Task[None]]] = {}
        self._leading = False
        self._reconciler: asyncio.Task[None] | None = None
        self._wakers: list[asyncio.Task[None]] = []
        """While leading: the watches that wake runs (release requests, records ending)."""
        self._wake = asyncio.Event()
        """Set by a deletion: reconcile soon (after sweep_delay), not at the next interval."""
        self._ended: set[str] = set()
        """UIDs whose run ended in this leadership (not cancelled): never started again in it,
        however stale the listing a reconcile pass works from."""
        self._absent_since: dict[str, float] = {}
        """UID of a scope: the clock's monotonic() when its Notification was first missing."""
        self.locks = QuiesceLocks(clock)
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
        if self._leading and not self._wakers:
            self._wakers = [
                asyncio.create_task(self._keep_watching(what, follow), name=f"fan-out {what}")
                for what, follow in (("release requests", self._follow_release_requests),
                                     ("records ending", self._follow_records_ending))]

    async def step_down(self) -> None:
        """Stop leading: cancel every run without writing anything final (the next leader
        resumes them; records this replica is running go on and end by themselves)."""
        was_leading, self._leading = self._leading, False
        runs = [task for _, task in self._runs.values()]
        tasks = [*runs, *self._wakers, *([self._reconciler] if self._reconciler else [])]
        self._reconciler, self._wakers = None, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if was_leading:
            log.info("stopped leading the notification fan-out; the next leader resumes its "
                     "runs", extra={"runs_cancelled": len(runs)})

    async def _keep_reconciling(self) -> None:
        while True:
            if await self.clock.wait(self._wake, self._interval):
                await self.clock.sleep(self._sweep_delay)  # deletions in a burst share a pass
                self._wake.clear()
            await self._reconcile_logged()

    async def _keep_watching(self, what: str, follow: Callable[[], Awaitable[None]]) -> None:
        """While leading: `follow` one watch to its end, again and again; a watch that fails is
        logged and watched again after the reconcile interval (each run also re-reads what it
        waits for every RECORD_POLL_SECONDS, so a broken watch delays it by at most that)."""
        while True:
            try:
                await follow()
            except Exception as error:
                log.warning("a fan-out watch failed; watching again", extra={
                    "watch": what, "error": f"{type(error).__name__}: {error}"})
            await self.clock.sleep(self._interval)

    async def _follow_release_requests(self) -> None:
        """A release request stored through any replica wakes its run at once, from the runs'
        watch."""
        async for uid in self.parts.scopes.release_requests():
            entry = self._runs.get(uid)
            if entry is not None:
                entry[0].woken.set()

    async def _follow_records_ending(self) -> None:
        """A fan-out record that finishes or goes wakes its run at once, from the records' watch
        (from the store's cache: no request of its own to kube-apiserver), so that a hold
        ending on its own ends its window at once."""
        watch = await self.parts.podnotifiers.watch(None, label_selector=records.NOTIFICATION_LABEL)
        try:
            async for event in watch:
                if event.type == EventType.DELETED or records.is_finished(event.object):
                    self._wake_run_of(event.object)
        finally:
            watch.close()

    def _wake_run_of(self, record: dict[str, Any]) -> None:
        meta = record.get("metadata") or {}
        name = (meta.get("labels") or {}).get(records.NOTIFICATION_LABEL)
        for run, _ in self._runs.values():
            if (run.namespace, run.name) == (meta.get("namespace"), name):
                run.woken.set()

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
        runner = NotificationRun(self.parts, run, status, self.locks, self.clock)
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
        scope deleted; one without a run fails ScopeNotRecorded once older than
        `scope_grace` (pod sets written without their run are deleted first, as are those of a
        Notification that is gone). Returns how many runs started."""
        if not self._leading:
            return 0
        running_before = set(self._runs)
        objects = await self._all_notifications()
        scopes = self.parts.scopes
        runs = {run.notification_uid: run for run in await scopes.runs()}
        if not self._locks_rebuilt:
            await self._rebuild_locks(runs.values())
            self._locks_rebuilt = True
        orphans = await scopes.orphan_uids(runs.values())
        self._ended &= set(runs)
        now = self.clock.monotonic()
        self._absent_since = {uid: since for uid, since in self._absent_since.items()
                              if (uid in runs or uid in orphans) and uid not in objects}
        for uid in orphans:
            if uid not in objects and self._absent_long(uid, now):
                await scopes.forget(uid)
        started = 0
        for uid, run in runs.items():
            obj = objects.get(uid)
            gone = run.stopped == DELETED or (obj is None and self._absent_long(uid, now))
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
                await scopes.forget(uid)  # the pod sets of a create interrupted before its run
                await self._fail_unrecorded(obj)
        return started

    def _absent_long(self, uid: str, now: float) -> bool:
        """Whether the Notification has been missing from the store for `absent_grace` (since
        the first pass that missed it)."""
        return now - self._absent_since.setdefault(uid, now) >= self._absent_grace

    async def _rebuild_locks(self, runs: Iterable[ScopeRun]) -> None:
        """Before a new leader starts any pod: the quiesce locks its unfinished runs hold, from
        their stored scopes and records (a pod whose record exists and whose result the scope
        lacks, or quiesced in a window and not yet released). A run whose outcome is decided
        holds none (every pod has its result, and the window was released before the
        decision), and its pods are not read: it may be forgetting them."""
        self.locks.clear()
        held = 0
        for run in runs:
            if run.finished or run.outcome:
                continue
            holder = Holder(run.notification_uid, run.namespace, run.name)
            notifier = run.spec["notifier"]
            for pod in await self.parts.scopes.pods(run.notification_uid):
                if pod.state in (scope.PENDING, scope.STARTED):
                    holds = await stored_record(self.parts.podnotifiers, run.namespace,
                                                claim_name(pod, notifier,
                                                           run.notification_uid)) is not None
                else:
                    holds = run.spec.get("release") is not None and pod.release_due
                if holds:
                    self.locks.hold((run.namespace, pod.pod_uid, notifier), holder)
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
        is woken by the runs' watch, see `_follow_release_requests`; this replica's own run
        at once). False if the Notification has no run (never recorded, or forgotten)."""
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
            self.clock.now() - created >= self._scope_grace)

    async def _all_notifications(self) -> dict[str, dict[str, Any]]:
        return {obj["metadata"]["uid"]: obj
                async for obj in all_objects(self.parts.notifications)}

    async def _fail_unrecorded(self, notification: dict[str, Any]) -> None:
        meta = notification["metadata"]
        now = status_time(self.clock)
        log.warning("notification has no recorded scope; failing it", extra={
            "namespace": meta["namespace"], "notification": meta["name"]})
        condition = {"type": "Failed", "status": "True", "reason": SCOPE_NOT_RECORDED,
                     "message": "the server stopped after storing this Notification and before "
                                "recording its pod set, so no pod was notified; delete it and "
                                "create it again", "lastTransitionTime": now}

        def fail(obj: dict[str, Any]) -> dict[str, Any]:
            if obj["metadata"].get("uid") != meta["uid"] or (obj.get("status") or {}).get(
                    "phase") in records.FINISHED_PHASES:
                raise Gone  # another one by that name, or failed already
            status = {**(obj.get("status") or {}), "phase": records.FAILED,
                      "completionTime": now, "conditions": [condition]}
            status.setdefault("startTime", now)
            return {**obj, "status": status}

        try:
            await self.parts.notifications.guaranteed_update(meta["namespace"], meta["name"],
                                                             fail)
        except (NotFound, Gone):
            return
        self.parts.metrics.notification_finished(records.FAILED)
        self.parts.events.finished(notification_ref(meta["namespace"], meta["name"], meta["uid"]),
                                   records.FAILED, SCOPE_NOT_RECORDED, condition["message"])

    async def shutdown(self) -> None:
        """Stop as `step_down` does (nothing final is written; the next leader resumes)."""
        await self.step_down()
