"""The leader's quiesce locks: one Notification per (namespace, pod, notifier) at a time."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.fanout.quiesce_locks import WAIT_POLL_SECONDS, Holder, QuiesceLocks
from tests.support.clock import FakeClock

KEY = ("prod", "uid-db-0", "quiesce")
FIRST, SECOND = Holder("uid-1", "prod", "first"), Holder("uid-2", "prod", "second")


async def test_one_holder_at_a_time() -> None:
    locks = QuiesceLocks(FakeClock())
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
    clock = FakeClock()
    locks = QuiesceLocks(clock)
    locks.try_acquire(KEY, FIRST)
    waiter = asyncio.create_task(locks.acquire_waiting(KEY, SECOND, give_up=lambda: False,
                                                       deadline=None))
    await clock.until_sleeping()
    assert not waiter.done()
    locks.release_all(FIRST.uid)  # at once, without time passing
    assert await asyncio.wait_for(waiter, 1) is None
    assert locks.holder(KEY) == SECOND


async def test_a_waiter_gives_up_at_its_deadline_and_not_before() -> None:
    clock = FakeClock()
    locks = QuiesceLocks(clock)
    locks.try_acquire(KEY, FIRST)
    waiter = asyncio.create_task(locks.acquire_waiting(
        KEY, SECOND, give_up=lambda: False, deadline=clock.monotonic() + 1.2))
    await clock.until_sleeping()
    assert clock.sleeping == [WAIT_POLL_SECONDS]  # it polls, the deadline further away
    clock.advance(1.1)
    await clock.until_sleeping()
    assert not waiter.done()
    assert clock.sleeping == pytest.approx([0.1])  # never past the deadline
    clock.advance(0.1)
    assert await asyncio.wait_for(waiter, 1) == FIRST
    assert locks.holder(KEY) == FIRST


async def test_a_waiter_gives_up_when_told_at_its_next_poll() -> None:
    clock = FakeClock()
    locks = QuiesceLocks(clock)
    locks.try_acquire(KEY, FIRST)
    stop = asyncio.Event()
    waiter = asyncio.create_task(locks.acquire_waiting(KEY, SECOND, give_up=stop.is_set,
                                                       deadline=None))
    await clock.until_sleeping()
    stop.set()
    clock.advance(WAIT_POLL_SECONDS - 0.01)
    await clock.until_sleeping()
    assert not waiter.done()
    clock.advance(0.01)
    assert await asyncio.wait_for(waiter, 1) == FIRST
    assert locks.holder(KEY) == FIRST


async def test_rebuilt_holds_and_clear() -> None:
    locks = QuiesceLocks(FakeClock())
    locks.hold(KEY, FIRST)
    locks.hold(KEY, SECOND)  # a second stored holder is logged; the first stays
    assert locks.holder(KEY) == FIRST
    locks.clear()
    assert locks.holder(KEY) is None
