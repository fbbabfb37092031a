"""Time as the server's long-running parts read and wait on it: one `Clock`, given by the
composition root (apiserver/server.py builds one `SystemClock`), so that tests give a fake one
that moves only when they say (tests/support/clock.py). A leaf module: every layer may use it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any, Protocol


class Clock(Protocol):
    """Wall-clock and monotonic time, and waiting by them."""

    def now(self) -> float:
        """Wall-clock time: seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never goes back: for deadlines and intervals."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Wait until `event` is set (True) or `timeout` seconds passed (False); None waits
        as long as it takes."""
        ...

    async def wait_first(self, waiters: Collection[asyncio.Future[Any]], timeout: float | None
                         ) -> set[asyncio.Future[Any]]:
        """Wait until one of `waiters` is done or `timeout` seconds passed (None: no limit);
        the ones done (asyncio.wait with FIRST_COMPLETED)."""
        ...


class SystemClock:
    """The real time: ``time.time``, ``time.monotonic`` and asyncio's own timeouts."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        return event.is_set()

    async def wait_first(self, waiters: Collection[asyncio.Future[Any]], timeout: float | None
                         ) -> set[asyncio.Future[Any]]:
        done, _ = await asyncio.wait(waiters, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        return done


def utc_now(clock: Clock) -> datetime:
    """The clock's wall-clock time as an aware UTC datetime (for timestamps)."""
    return datetime.fromtimestamp(clock.now(), UTC)
