"""Watches: what ends a held store watch (timeout, stop, leaving the block)."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.handlers.watch_response import Watches
from apiserver.registry.selectors import FieldSelector, LabelSelector
from apiserver.registry.watch import Watch, WatchFilter
from tests.support.stores import watch_closed


def store_watch() -> Watch:
    return Watch([], WatchFilter(None, LabelSelector(), FieldSelector()))


async def test_leaving_the_block_closes_the_watch():
    watch = store_watch()
    with Watches().holding(watch, timeout=60):
        assert not await watch_closed(watch)
    assert await watch_closed(watch)


async def test_leaving_by_an_error_closes_the_watch():
    watch = store_watch()
    with pytest.raises(RuntimeError), Watches().holding(watch, timeout=60):
        raise RuntimeError("stream failed")
    assert await watch_closed(watch)


async def test_timeout_closes_the_watch():
    watch = store_watch()
    with Watches().holding(watch, timeout=0.05):
        await asyncio.sleep(0.1)
        assert await watch_closed(watch)


async def test_stop_closes_every_held_watch_and_later_ones():
    watches = Watches()
    first, second, later = store_watch(), store_watch(), store_watch()
    with watches.holding(first, timeout=60), watches.holding(second, timeout=60):
        watches.stop()
        assert await watch_closed(first) and await watch_closed(second)
    with watches.holding(later, timeout=60):
        assert await watch_closed(later)


async def test_stop_leaves_other_registries_alone():
    mine, theirs = Watches(), Watches()
    watch = store_watch()
    with theirs.holding(watch, timeout=60):
        mine.stop()
        assert not await watch_closed(watch)
