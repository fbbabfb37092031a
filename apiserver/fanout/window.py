"""A run's quiesce window (spec.release; docs/notifications.md, "Quiesce windows") and its
release.

Once every pod is quiesced (its run Succeeded, or its record is Held) the window opens
(quiescedTime, Quiesced True) and stays open until its first end (`window_ends`: the release
action stored in the run by any replica, afterSeconds, maxHoldSeconds, the deadline; or
deletion, or a hold that ended on its own, whose end is the window's). Then every quiesced
pod is released at least once: the window's end is stored before it takes effect, and each
pod's release attempts are claimed by their records (``RunBase._undo``): an attempt whose
record ended is never run again, one that was interrupted is followed by the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from apiserver.api.types import DEFAULT_PARALLELISM
from apiserver.fanout import run_base, scope
from apiserver.fanout.reasons import (
    AFTER_SECONDS,
    DEADLINE_EXCEEDED,
    DELETED,
    HELD,
    HOLD_ENDED,
    RELEASE_FAILED,
    RELEASE_REQUESTED,
    RELEASED_AFTER_MAX_HOLD,
    WINDOW_FAILURES,
)
from apiserver.fanout.run_base import RUN_WAIT_SECONDS, RunBase, status_time
from apiserver.fanout.run_records import hold_end
from apiserver.fanout.scope import ScopedPod
from apiserver.fanout.status import MAX_PODS_IN_MESSAGE
from apiserver.notifier import records
from apiserver.registry.errors import NotFound
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)


def window_ends(spec: Mapping[str, Any], started: str, quiesced: str | None, now: float
                ) -> list[tuple[float, str]]:
    """The times (seconds since the epoch) at which a window opened at `quiesced` of a run
    started at `started` ends by itself, each with its reason: maxHoldSeconds after the start,
    afterSeconds after the quiesce, the deadline (a time missing or unreadable counts as
    `now`)."""
    release = spec.get("release") or {}
    start = parse_timestamp(started) or now
    opened = parse_timestamp(quiesced) or now
    ends = [(start + release.get("maxHoldSeconds", RUN_WAIT_SECONDS), RELEASED_AFTER_MAX_HOLD)]
    if release.get("afterSeconds") is not None:
        ends.append((opened + release["afterSeconds"], AFTER_SECONDS))
    if spec.get("activeDeadlineSeconds") is not None:
        ends.append((start + spec["activeDeadlineSeconds"], DEADLINE_EXCEEDED))
    return ends


class WindowRun(RunBase):
    """The window's steps of a run (apiserver/fanout/run.py's NotificationRun is one)."""

    def _all_quiesced(self) -> bool:
        """Every pod that was not skipped is quiesced (and at least one is)."""
        states = {p.state for p in self.pods.values()} - {scope.SKIPPED}
        return states == {scope.SUCCEEDED}

    async def _hold_window(self, started: str) -> None:
        """Every pod is quiesced: store quiescedTime (once: when the last pod's quiesce ended,
        as its record says), show the window (Quiesced True), and
        wait until it ends; store why (the release is then due)."""
        opening = not self.window.get("quiescedTime")
        quiesced = (self.window.get("quiescedTime") or self._last_success_at
                    or status_time(self.clock))
        if opening:
            stored = await self._stored("store the window", lambda: self.parts.scopes
                                        .note_window(self.uid, quiescedTime=quiesced))
            if stored is not None:
                self.window = dict(stored.window)
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
        """Wait for the first end of the window and say which (see WINDOW_FAILURES); the
        stored one at once if it has ended (a pass resumed after a crash)."""
        ends = window_ends(self.spec, started, self.window.get("quiescedTime"),
                           self.clock.now())
        while True:
            if self.deleted.is_set():
                return DELETED
            stored = await self._stored("read the run", lambda: self.parts.scopes.run(self.uid))
            self.parts.metrics.window_read()
            if stored is None or stored.stopped == DELETED:
                self._note_stopped(DELETED)
                self.deleted.set()
                return DELETED
            if stored.window.get("releaseReason"):
                return str(stored.window["releaseReason"])
            due = list(ends)
            requested = parse_timestamp(stored.window.get("releaseRequestedTime"))
            if requested is not None:
                self.window["releaseRequestedTime"] = stored.window["releaseRequestedTime"]
                due.append((requested, RELEASE_REQUESTED))
            now = self.clock.now()
            passed = sorted(end for end in due if end[0] <= now)
            if passed:
                return passed[0][1]
            ended = await self._hold_ended()
            if ended:
                self._release_detail = ended
                return HOLD_ENDED
            self.woken.clear()
            wait = min(run_base.RECORD_POLL_SECONDS, min(at for at, _ in ends) - now)
            waiters = [asyncio.create_task(self.deleted.wait()),
                       asyncio.create_task(self.woken.wait())]
            try:
                await self.clock.wait_first(waiters, max(0.0, wait))
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
        """Store that the window ended, unless it is stored already (the first reason stands:
        from then on the release of every quiesced pod is due); returns the reason that
        stands. The status shows it when the release begins (``_release_window``)."""
        if self.window.get("releaseReason"):
            return self.window["releaseReason"]
        at = self._hold_end_at or status_time(self.clock)
        stored = await self._stored("end the window", lambda: self.parts.scopes.end_window(
            self.uid, why, at))
        if stored is None:
            return why
        self.window = dict(stored.window)
        log.info("the window ends: releasing", extra={
            "namespace": self.namespace, "notification": self.name,
            "reason": self.window.get("releaseReason")})
        return self.window.get("releaseReason", why)

    async def _release_window(self, outcome: str, reason: str) -> tuple[str, str]:
        """End the window (if it has not ended: the forward phase failed, or it was deleted),
        release every quiesced pod, and return the outcome with the release's say. The end
        is stored in the run before any release starts (its releaseTime precedes them); the
        status that shows it is written alongside the first releases, not before them."""
        why = self.window.get("releaseReason") or (reason if outcome == scope.OUTCOME_FAILED
                                                   else RELEASE_REQUESTED)
        why = await self._end_window(why)
        await asyncio.gather(self._stored("store the status", self._write_status),
                             self._release_pods())
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
        """Release every pod whose release is due, at the run's parallelism, at least once;
        then store unquiescedTime."""
        targets = [p for p in self.pods.values() if p.release_due]
        slots = asyncio.Semaphore(self.spec.get("parallelism", DEFAULT_PARALLELISM))

        async def release(pod: ScopedPod) -> None:
            async with slots:
                outcome, name, attempt = await self._release_pod(pod)
            await self._stored("store a release result", lambda: self.parts.scopes
                               .finish_release(self.uid, pod.pod_uid, outcome, record=name,
                                               attempts=attempt))
            self._changed(replace(self.pods[pod.pod_uid], release=outcome, release_record=name,
                                  release_attempts=attempt))
            self.locks.release(self._key(pod), self.holder)

        await asyncio.gather(*(release(pod) for pod in targets))
        done = sum(p.release in scope.RELEASE_FINAL for p in self.pods.values())
        if done and not self.window.get("unquiescedTime"):
            unquiesced = status_time(self.clock)
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

    async def _release_pod(self, pod: ScopedPod) -> tuple[str, str, int]:
        """Release one quiesced pod, at least once: end its hold (a Held record; idempotent)
        and run release.notifier (``_undo``: the same step first and after a crash; a pod
        whose release took more than one attempt may have run it twice,
        ``ScopedPod.may_have_run_twice``). Returns (RELEASE_DONE or RELEASE_FAILED, the
        release's record, its attempt), the record empty without release.notifier."""
        notifier = (self.release or {}).get("notifier")
        held = pod.reason == HELD
        hold_released = await self._end_hold(pod) if held else False
        if not notifier:
            if held:
                return (scope.RELEASE_DONE if hold_released else scope.RELEASE_FAILED), "", 0
            log.error("a quiesced pod has nothing that unquiesces it: spec.release has no "
                      "notifier and its quiesce was not held", extra={
                          "namespace": self.namespace, "notification": self.name,
                          "pod": pod.pod})
            return scope.RELEASE_FAILED, "", 0
        state, name, attempt = await self._undo(pod, notifier)
        return (scope.RELEASE_DONE if state == scope.SUCCEEDED else scope.RELEASE_FAILED), name, \
            attempt

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
