"""A fake `apiserver.clock.Clock`: time moves only when the test calls `advance`, and every
sleep or wait whose time has come then returns; nothing sleeps in real time.

The code under test may also wait for real things (a SQLite write in a thread), so a test that
advances the clock lets that code go on to its next sleep with `until_sleeping` before it looks
or advances again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

START = 1_700_000_000.0
"""The fake wall-clock time at the start (2023-11-14T22:13:20Z): a whole second."""
MONOTONIC_START = 1000.0
SETTLE_TIMEOUT_SECONDS = 5.0
"""How long, in real time, `until_sleeping` waits for the code under test."""


@dataclass(eq=False)
class _Sleeper:
    due: float
    """The clock's monotonic time at which it returns."""
    future: asyncio.Future[None]
    task: asyncio.Task[Any] | None
    """The task that sleeps."""


class FakeClock:
    """A `Clock` that a test moves with `advance`."""

    def __init__(self, start: float = START) -> None:
        self._start = start
        self._elapsed = 0.0
        self._sleepers: list[_Sleeper] = []
        self._woken: set[asyncio.Task[Any]] = set()
        """The tasks the last `advance` woke."""

    def now(self) -> float:
        return self._start + self._elapsed

    def monotonic(self) -> float:
        return MONOTONIC_START + self._elapsed

    @property
    def sleeping(self) -> list[float]:
        """How long until each pending sleep returns, soonest first."""
        return sorted(sleeper.due - self.monotonic() for sleeper in self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        sleeper = self._sleep(seconds)
        try:
            await sleeper.future
        finally:
            self._forget(sleeper)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        try:
            await self.wait_first([waiter], timeout)
        finally:
            waiter.cancel()
        return event.is_set()

    async def wait_first(self, waiters: Collection[asyncio.Future[Any]], timeout: float | None
                         ) -> set[asyncio.Future[Any]]:
        if timeout is None:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            return done
        sleeper = self._sleep(max(0.0, timeout))
        try:
            await asyncio.wait([*waiters, sleeper.future], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._forget(sleeper)
        return {waiter for waiter in waiters if waiter.done()}

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`: every sleep and wait due by then returns, soonest first
        (once the test yields to the event loop)."""
        if seconds < 0:
            raise ValueError("time does not go back")
        self._elapsed += seconds
        self._woken = set()
        for sleeper in sorted(self._sleepers, key=lambda sleeper: sleeper.due):
            if sleeper.due <= self.monotonic():
                self._wake(sleeper)

    async def until_sleeping(self, sleepers: int = 1, *, task: str | None = None,
                             timeout: float = SETTLE_TIMEOUT_SECONDS) -> None:
        """Return once every task the last `advance` woke sleeps on this clock again (or has
        ended), at least `sleepers` sleeps are pending and, with `task`, the task of that name
        is one of them: the code under test has gone as far as it can without time passing.
        Fails after `timeout` seconds of real time."""
        give_up = time.monotonic() + timeout
        while not self._settled(sleepers) or (task is not None and task not in {
                sleeper.task.get_name() for sleeper in self._sleepers if sleeper.task}):
            if time.monotonic() >= give_up:
                raise AssertionError(
                    f"the code under test did not reach its next sleep within {timeout} s "
                    f"(sleeping: {self.sleeping}; woken and not asleep again: "
                    f"{[task.get_name() for task in self._busy()]})")
            await asyncio.sleep(0.001)  # real work (a thread's write) may be under way

    def _settled(self, sleepers: int) -> bool:
        return len(self._sleepers) >= sleepers and not self._busy()

    def _busy(self) -> list[asyncio.Task[Any]]:
        asleep = {sleeper.task for sleeper in self._sleepers if not sleeper.future.done()}
        return [task for task in self._woken if not task.done() and task not in asleep]

    def _sleep(self, seconds: float) -> _Sleeper:
        sleeper = _Sleeper(self.monotonic() + seconds,
                           asyncio.get_running_loop().create_future(), asyncio.current_task())
        if seconds <= 0:
            sleeper.future.set_result(None)
        else:
            self._sleepers.append(sleeper)
        return sleeper

    def _wake(self, sleeper: _Sleeper) -> None:
        self._forget(sleeper)
        if not sleeper.future.done():
            sleeper.future.set_result(None)
        if sleeper.task is not None:
            self._woken.add(sleeper.task)

    def _forget(self, sleeper: _Sleeper) -> None:
        if sleeper in self._sleepers:
            self._sleepers.remove(sleeper)

