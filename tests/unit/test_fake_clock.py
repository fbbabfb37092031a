"""The fake clock of the fan-out's tests (tests/support/clock.py), and the real one it stands in
for (apiserver/clock.py): sleeps and waits return when time is advanced past them, never
before, and `until_sleeping` lets the code under test reach its next sleep."""

from __future__ import annotations

import asyncio
import time

import pytest

from apiserver.clock import SystemClock, utc_now
from tests.support.clock import MONOTONIC_START, START, FakeClock


async def test_time_moves_only_when_advanced() -> None:
    clock = FakeClock()
    assert (clock.now(), clock.monotonic()) == (START, MONOTONIC_START)
    await asyncio.sleep(0.01)
    assert clock.now() == START
    clock.advance(2.5)
    assert (clock.now(), clock.monotonic()) == (START + 2.5, MONOTONIC_START + 2.5)
    assert utc_now(clock).timestamp() == START + 2.5
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_a_sleep_returns_once_time_passed_it_and_not_before() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(10))
    await clock.until_sleeping()
    assert clock.sleeping == [10]
    clock.advance(9.999)
    await clock.until_sleeping()
    assert not sleeper.done()
    clock.advance(0.001)
    await asyncio.wait_for(sleeper, 1)
    assert clock.sleeping == []


async def test_sleepers_wake_in_the_order_they_are_due() -> None:
    clock = FakeClock()
    woke: list[str] = []

    async def sleep(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleep("late", 3)), asyncio.create_task(sleep("soon", 1))]
    await clock.until_sleeping(2)
    clock.advance(1)
    await clock.until_sleeping()
    assert woke == ["soon"]
    clock.advance(2)
    await asyncio.gather(*tasks)
    assert woke == ["soon", "late"]
    woke.clear()
    tasks = [asyncio.create_task(sleep("late", 3)), asyncio.create_task(sleep("soon", 1))]
    await clock.until_sleeping(2)
    clock.advance(5)  # both at once: still soonest first
    await asyncio.gather(*tasks)
    assert woke == ["soon", "late"]


async def test_a_sleep_of_nothing_only_yields() -> None:
    clock = FakeClock()
    await asyncio.wait_for(clock.sleep(0), 1)
    assert clock.sleeping == []


async def test_a_cancelled_sleep_is_forgotten() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(5))
    await clock.until_sleeping()
    sleeper.cancel()
    await asyncio.gather(sleeper, return_exceptions=True)
    assert clock.sleeping == []


async def test_wait_returns_true_when_the_event_is_set_first() -> None:
    clock = FakeClock()
    event = asyncio.Event()
    waiter = asyncio.create_task(clock.wait(event, 5))
    await clock.until_sleeping()
    event.set()
    assert await asyncio.wait_for(waiter, 1) is True
    assert clock.sleeping == []


async def test_wait_returns_false_once_its_timeout_passed() -> None:
    clock = FakeClock()
    event = asyncio.Event()
    waiter = asyncio.create_task(clock.wait(event, 5))
    await clock.until_sleeping()
    clock.advance(4)
    await clock.until_sleeping()
    assert not waiter.done()
    clock.advance(1)
    assert await asyncio.wait_for(waiter, 1) is False


async def test_wait_first_says_which_finished_or_none_on_timeout() -> None:
    clock = FakeClock()
    gate = asyncio.Event()
    first = asyncio.ensure_future(gate.wait())
    second = asyncio.ensure_future(asyncio.Event().wait())
    waiter = asyncio.create_task(clock.wait_first([first, second], 3))
    await clock.until_sleeping()
    gate.set()
    assert await asyncio.wait_for(waiter, 1) == {first}
    timed_out = asyncio.create_task(clock.wait_first([second], 3))
    await clock.until_sleeping()
    clock.advance(3)
    assert await asyncio.wait_for(timed_out, 1) == set()
    second.cancel()


async def test_until_sleeping_waits_for_a_woken_task_to_sleep_again() -> None:
    clock = FakeClock()
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            await clock.sleep(1)
            await asyncio.sleep(0.02)  # real work between two sleeps
            ticks.append(clock.monotonic() - MONOTONIC_START)

    ticker = asyncio.create_task(tick(), name="ticker")
    await clock.until_sleeping(task="ticker")
    for _ in range(3):
        clock.advance(1)
        await clock.until_sleeping()
    assert ticks == [1, 2, 3]
    ticker.cancel()
    await asyncio.gather(ticker, return_exceptions=True)


async def test_until_sleeping_fails_when_nothing_sleeps() -> None:
    with pytest.raises(AssertionError, match="did not reach its next sleep"):
        await FakeClock().until_sleeping(timeout=0.05)
    clock = FakeClock()
    other = asyncio.create_task(clock.sleep(1), name="other")
    with pytest.raises(AssertionError, match="did not reach its next sleep"):
        await clock.until_sleeping(task="ticker", timeout=0.05)
    other.cancel()


async def test_the_system_clock_is_the_real_time() -> None:
    clock = SystemClock()
    assert abs(clock.now() - time.time()) < 1
    assert abs(clock.monotonic() - time.monotonic()) < 1
    event = asyncio.Event()
    assert await clock.wait(event, 0) is False
    event.set()
    assert await clock.wait(event, None) is True
    done = asyncio.ensure_future(event.wait())
    assert await clock.wait_first([done], 1) == {done}
    await clock.sleep(0)
