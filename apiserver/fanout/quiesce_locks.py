"""One quiesce at a time (spec.concurrencyPolicy): which Notification is quiescing a pod with a
notifier.

A Notification holds (namespace, pod UID, notifier) from its pod's start until that pod is
released (with spec.release) or its run of the pod ended (without). Only the fan-out leader
runs Notifications, so the locks live on the leader, in memory; a new leader rebuilds them from
the stored scopes (``FanoutManager``) before any pod starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from apiserver.clock import Clock

log = logging.getLogger(__name__)

WAIT_POLL_SECONDS = 0.5
"""How often a waiting pod re-checks whether it should give up (its run stopped)."""

Key = tuple[str, str, str]
"""(namespace, pod UID, notifier)."""


@dataclass(frozen=True)
class Holder:
    """The Notification holding a lock."""

    uid: str
    namespace: str
    name: str


class QuiesceLocks:
    """The leader's locks; waiting for one goes by `clock`."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._held: dict[Key, Holder] = {}
        self._freed = asyncio.Event()
        """Set (and replaced) whenever a lock is released: waiters try again."""

    def holder(self, key: Key) -> Holder | None:
        return self._held.get(key)

    def try_acquire(self, key: Key, holder: Holder) -> Holder | None:
        """Take the lock; None if `holder` has it now, else the Notification that has it."""
        current = self._held.setdefault(key, holder)
        return None if current.uid == holder.uid else current

    async def acquire_waiting(self, key: Key, holder: Holder, *, give_up: Callable[[], bool],
                              deadline: float | None) -> Holder | None:
        """Wait for the lock (concurrencyPolicy Wait): None once `holder` has it; the holder
        that still has it when `give_up()` became true or the `deadline` (the clock's
        monotonic()) passed."""
        while True:
            other = self.try_acquire(key, holder)
            if other is None:
                return None
            now = self._clock.monotonic()
            if give_up() or (deadline is not None and now >= deadline):
                return other
            freed = self._freed
            wait = WAIT_POLL_SECONDS if deadline is None else min(WAIT_POLL_SECONDS,
                                                                  deadline - now)
            await self._clock.wait(freed, wait)

    def hold(self, key: Key, holder: Holder) -> None:
        """Record a lock a resumed Notification holds (from its stored scope)."""
        current = self._held.setdefault(key, holder)
        if current.uid != holder.uid:  # two stored holders: both quiesce already; keep one
            log.warning("two notifications hold one quiesce", extra={
                "namespace": key[0], "pod_uid": key[1], "notifier": key[2],
                "holder": current.name, "also": holder.name})

    def release(self, key: Key, holder: Holder) -> None:
        if self._held.get(key, None) == holder:
            del self._held[key]
            self._wake()

    def release_all(self, uid: str) -> None:
        """Every lock of the Notification `uid` (its run ended)."""
        mine = [key for key, held in self._held.items() if held.uid == uid]
        for key in mine:
            del self._held[key]
        if mine:
            self._wake()

    def clear(self) -> None:
        self._held.clear()
        self._wake()

    def _wake(self) -> None:
        self._freed.set()
        self._freed = asyncio.Event()
