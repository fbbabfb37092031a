"""The leader's quiesce locks: one Notification per (namespace, pod, notifier) at a time."""

from __future__ import annotations

import asyncio
import time

from apiserver.fanout.quiesce_locks import Holder, QuiesceLocks

KEY = ("prod", "uid-db-0", "quiesce")
FIRST, SECOND = Holder("uid-1", "prod", "first"), Holder("uid-2", "prod", "second")


async def test_one_holder_at_a_time() -> None:
    locks = QuiesceLocks()
    assert locks.try_acquire(KEY, FIRST) is None
    assert locks.try_acquire(KEY, FIRST) is None  # again by the holder: still its
    assert locks.try_acquire(KEY, SECOND) == FIRST
    assert locks.try_acquire(("prod", "uid-db-0", "flush"), SECOND) is None  # another notifier
    assert locks.try_acquire(("prod", "uid-db-1", "quiesce"), SECOND) is None  # another pod
    locks.release(KEY, SECOND)  # not its lock: nothing happens
    assert locks.holder(KEY) == FIRST
    locks.release(KEY, FIRST)
    assert locks.try_acquire(KEY, SECOND) is None


async def test_a_waiter_gets_the_lock_when_it_is_released() -> None:
    locks = QuiesceLocks()
    locks.try_acquire(KEY, FIRST)
    waiter = asyncio.create_task(locks.acquire_waiting(KEY, SECOND, give_up=lambda: False,
                                                       deadline=None))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    locks.release_all(FIRST.uid)
    assert await asyncio.wait_for(waiter, 1) is None
    assert locks.holder(KEY) == SECOND


async def test_a_waiter_gives_up_at_its_deadline_or_when_told() -> None:
    locks = QuiesceLocks()
    locks.try_acquire(KEY, FIRST)
    started = time.monotonic()
    assert await locks.acquire_waiting(KEY, SECOND, give_up=lambda: False,
                                       deadline=started + 0.2) == FIRST
    assert 0.15 < time.monotonic() - started < 1
    stop = asyncio.Event()
    waiter = asyncio.create_task(locks.acquire_waiting(KEY, SECOND, give_up=stop.is_set,
                                                       deadline=None))
    stop.set()
    assert await asyncio.wait_for(waiter, 2) == FIRST
    assert locks.holder(KEY) == FIRST


async def test_rebuilt_holds_and_clear() -> None:
    locks = QuiesceLocks()
    locks.hold(KEY, FIRST)
    locks.hold(KEY, SECOND)  # a second stored holder is logged; the first stays
    assert locks.holder(KEY) == FIRST
    locks.clear()
    assert locks.holder(KEY) is None
