"""Watches: what ends a held store watch (timeout, stop, leaving the block)."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.handlers.watch_response import Watches
from apiserver.registry.selectors import FieldSelector, LabelSelector
from apiserver.registry.watch import Watch, WatchFilter


def store_watch() -> Watch:
    return Watch([], WatchFilter(None, LabelSelector(), FieldSelector()))


async def ended(watch: Watch) -> bool:
    try:
        await asyncio.wait_for(anext(watch), 0.05)
    except StopAsyncIteration:
        return True
    except TimeoutError:
        return False
    return False


async def test_leaving_the_block_closes_the_watch():
    watch = store_watch()
    with Watches().holding(watch, timeout=60):
        assert not await ended(watch)
    assert await ended(watch)


async def test_leaving_by_an_error_closes_the_watch():
    watch = store_watch()
    with pytest.raises(RuntimeError), Watches().holding(watch, timeout=60):
        raise RuntimeError("stream failed")
    assert await ended(watch)


async def test_timeout_closes_the_watch():
    watch = store_watch()
    with Watches().holding(watch, timeout=0.05):
        await asyncio.sleep(0.1)
        assert await ended(watch)


async def test_stop_closes_every_held_watch_and_later_ones():
    watches = Watches()
    first, second, later = store_watch(), store_watch(), store_watch()
    with watches.holding(first, timeout=60), watches.holding(second, timeout=60):
        watches.stop()
        assert await ended(first) and await ended(second)
    with watches.holding(later, timeout=60):
        assert await ended(later)


async def test_stop_leaves_other_registries_alone():
    mine, theirs = Watches(), Watches()
    watch = store_watch()
    with theirs.holding(watch, timeout=60):
        mine.stop()
        assert not await ended(watch)
