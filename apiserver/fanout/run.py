"""Running Notifications: each pod in scope gets one ordinary PodNotifier run.

A run starts at most `parallelism` pods at a time. With failurePolicy Abort it starts no new pod
after the first failure; with Continue it runs them all. When the Notification ends Failed, or
is deleted before it finished, `rollback.notifier` runs on every pod whose notifier succeeded.
With spec.release the run holds a quiesce window between the two (apiserver/fanout/window.py).

Crash safety (what the stored scope, apiserver/fanout/scope_store.py, makes possible):

- a pod's claim is its record: a Notification's run on a pod is a PodNotifier with a name known
  before it is created (``run_records.record_name``), so "has this pod started?" is "does its
  record exist?", with no write of its own. A pod starts only while the run is not stopped (read
  again just before: another replica may have stopped it); the first failure under Abort stops
  the run in the same write that records it; the outcome is stored before the rollback runs
  (a Failed one makes every succeeded pod due a rollback, ``ScopedPod.rollback_due``);
- every pass is the same: a pod whose result the scope lacks but whose record exists takes that
  record's result (Interrupted if its server stopped during it, a failure: under Abort that
  stops the run), and is never run again; one without a record runs. A create of a stopped
  server that lands late makes the pod's own create refused (the name exists, or that record
  is the same notifier's unfinished run on the pod: 409), and that record's result stands, so a
  pod is notified at most once either way. A rollback's attempts are claimed by their records
  the same way: one that was interrupted is followed by the next (a new record, labelled with
  its attempt), at least once;
- a Notification deleted while its server was down is still rolled back, from the spec kept
  in its run row, and its rows are deleted once nothing remains to do.

Every run takes the leader's quiesce locks (``quiesce_locks``, spec.concurrencyPolicy) for its
pods while it quiesces them. No exception leaves a pod counted running: every error of a pod's
run becomes that pod's reason (see `reasons.pod_outcome`), and a failure of the run itself ends
the Notification Failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from apiserver.api.types import CONDITION_TYPES, DEFAULT_PARALLELISM, WAIT
from apiserver.fanout import scope, status
from apiserver.fanout.quiesce_locks import Holder
from apiserver.fanout.reasons import (
    DEADLINE_EXCEEDED,
    DELETED,
    FAIL_FAST,
    INTERNAL_ERROR,
    NOT_DECLARED,
    PODS_FAILED,
    PODS_SUCCEEDED,
    QUIESCE_CONFLICT,
)
from apiserver.fanout.run_base import NotStarted, status_time
from apiserver.fanout.run_records import (
    claim_name,
    notification_label,
    quiesced_at,
    record_name,
    result_of,
    stored_record,
)
from apiserver.fanout.scope import ScopedPod
from apiserver.fanout.spec import ALL_PODS, selector_string
from apiserver.fanout.window import WindowRun
from apiserver.notifier import records
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)


def _turn_done(running: set[asyncio.Task[None]], slots: asyncio.Semaphore,
               task: asyncio.Task[None]) -> None:
    running.discard(task)
    slots.release()


class NotificationRun(WindowRun):
    """One Notification's fan-out, to its end: the forward phase, the window if any, the
    outcome, the rollback, the final status."""

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
        await self._take_claimed()
        if self.deleted.is_set() or self.stopped:
            await self._finish(False)
            return
        first_start = not self.status.get("startTime")
        started = self.status.get("startTime") or status_time(self.clock)
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

    async def _take_claimed(self) -> None:
        """Every pod whose result the scope lacks but whose record exists (its run started
        before this one: a leader that stopped, or this server before a restart) takes that
        record's result, once it has one, and is never run again; the others stay pending. A
        first run finds none. Under Abort, a failure among them stops the run before any
        pending pod starts."""
        claimed = []
        for pod in list(self.pods.values()):
            if pod.state in (scope.PENDING, scope.STARTED):
                name = claim_name(pod, self.spec["notifier"], self.uid)
                if await stored_record(self.parts.podnotifiers, self.namespace, name):
                    claimed.append(replace(pod, state=scope.STARTED, record=name))
                elif pod.state == scope.STARTED:  # marked by an older release, never created
                    self.pods[pod.pod_uid] = replace(pod, state=scope.PENDING)
        for pod in claimed:
            self._changed(pod)
        await asyncio.gather(*(self._take_result(pod) for pod in claimed))
        if self.abort and not self.stopped and any(
                p.state == scope.FAILED for p in self.pods.values()):
            # a failure stored before the stop that follows it was (the server stopped between)
            self._note_stopped(await self._stored("stop the run", lambda: self.parts.scopes.stop(
                self.uid, FAIL_FAST)))

    async def _take_result(self, pod: ScopedPod) -> None:
        record = await self._record(pod.record, held=self.release is not None)
        state, reason = result_of(record)
        await self._record_result(pod, state, reason, quiesced_at(record))
        if not self._holds_after(state):
            self.locks.release(self._key(pod), self.holder)

    def _record_name(self, pod: ScopedPod) -> str:
        """The name of the pod's record of this run (its claim)."""
        return record_name(pod.pod, self.spec["notifier"], self.uid, pod.pod_uid)

    async def _record_result(self, pod: ScopedPod, state: str, reason: str,
                             quiesced: str = "") -> None:
        """Store a pod's final state (with the name of its record, if it has one); under Abort
        a failure stops the run, in the same write. A success moves `_last_success_at` to
        when the pod was `quiesced` (its record says; else now), if that is later."""
        if state == scope.SUCCEEDED:
            moment = quiesced or status_time(self.clock)
            if (parse_timestamp(moment) or 0.0) > (parse_timestamp(self._last_success_at)
                                                     or 0.0):
                self._last_success_at = moment
        stop = FAIL_FAST if state == scope.FAILED and self.abort else ""
        await self._stored("store a pod's result", lambda: self.parts.scopes.finish_pod(
            self.uid, pod.pod_uid, state, reason, record=pod.record or None, stop=stop))
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
        return self.clock.monotonic() + max(0.0, start + seconds - self.clock.now())

    async def _run_pods(self, started: str) -> bool:
        """Start pods as slots free up; returns True if the deadline stopped the run."""
        deadline = self._deadline(started)
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))
        running: set[asyncio.Task[None]] = set()
        all_pods = self.spec.get("policy") == ALL_PODS
        deadline_passed = False
        while not self._halted():
            remaining = None if deadline is None else deadline - self.clock.monotonic()
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
            if deadline is not None and self.clock.monotonic() >= deadline:
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
            if not await self._may_start():
                slots.release()
                self.locks.release(self._key(pod), self.holder)
                break
            name = self._record_name(pod)
            pod = replace(pod, state=scope.STARTED, record=name)
            self._changed(pod)
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
            done = await self.clock.wait_first(waiters, remaining)
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
        try:
            state, reason = await self._attempt(pod, self.spec["notifier"], name,
                                                notification_label(self.name), forward=True)
        except NotStarted:  # stopped while it waited for the server's capacity
            self._changed(replace(pod, state=scope.PENDING, record=""))
            self.locks.release(self._key(pod), self.holder)
            return
        at = ""
        if state == scope.SUCCEEDED and self.release is not None:  # the window's quiescedTime
            at = quiesced_at(await stored_record(self.parts.podnotifiers, self.namespace, name))
        await self._record_result(pod, state, reason, at)
        if not self._holds_after(state):
            self.locks.release(self._key(pod), self.holder)

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
        if (deadline is not None and self.clock.monotonic() >= deadline) or (
                not await self._may_start()):
            self.locks.release(self._key(pod), self.holder)
            return
        name = self._record_name(pod)
        pod = replace(pod, state=scope.STARTED, record=name)
        self._changed(pod)
        await self._turn(pod, name)

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
            outcome, reason = scope.OUTCOME_SUCCEEDED, PODS_SUCCEEDED
        if self.release is not None:
            outcome, reason = await self._release_window(outcome, reason)
        decided = await self._stored("store the outcome", lambda: self.parts.scopes.decide(
            self.uid, outcome, reason))
        if decided is not None:
            outcome, reason = decided.outcome, decided.outcome_reason
        if outcome == scope.OUTCOME_FAILED:
            await self._rollback()
        if not self.deleted.is_set():
            await self._write_final(outcome, reason,
                                    failure[1] if failure else self._release_detail)
        await self._stored("mark the run finished",
                           lambda: self.parts.scopes.mark_finished(self.uid))
        if self.deleted.is_set():  # interrupted, the next pass forgets the finished run
            await self._stored("forget the scope", lambda: self.parts.scopes.forget(self.uid))

    async def _write_final(self, outcome: str, reason: str, detail: str) -> None:
        """The final status, retried until stored (or the object is gone)."""
        now = status_time(self.clock)
        phase = records.SUCCEEDED if outcome == scope.OUTCOME_SUCCEEDED else records.FAILED
        self.status.setdefault("startTime", now)
        condition = status.final_condition(outcome, reason, detail, self._facts())
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
        run's parallelism, at least once (``_undo``): the same step first and after a crash."""
        notifier = self.spec.get("rollback", {}).get("notifier")
        if not notifier:
            return
        targets = [p for p in self.pods.values() if p.rollback_due]
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))

        async def undo(pod: ScopedPod) -> None:
            async with slots:
                state, name, attempt = await self._undo(pod, notifier)
            outcome = scope.ROLLBACK_DONE if state == scope.SUCCEEDED else scope.ROLLBACK_FAILED
            await self._stored("store a rollback result", lambda: self.parts.scopes
                               .finish_rollback(self.uid, pod.pod_uid, outcome, record=name,
                                                attempts=attempt))
            self._changed(replace(self.pods[pod.pod_uid], rollback=outcome,
                                  rollback_record=name, rollback_attempts=attempt))

        await asyncio.gather(*(undo(pod) for pod in targets))
        if targets:
            outcomes = Counter(self.pods[p.pod_uid].rollback for p in targets)
            self.parts.events.rolled_back(self.ref, notifier, outcomes[scope.ROLLBACK_DONE],
                                          outcomes[scope.ROLLBACK_FAILED])
