"""How the writes of the scope store (apiserver/fanout/scope_store.py) are ordered in this
process: ``Turns`` (the writes of one Notification take turns: shared turns for changes of
single pods, exclusive ones for anything that spans objects) and ``Batches`` (changes of one
object made while it is being written are written together, in the next single update)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

Entry = dict[str, Any]


class Turns:
    """Whose turn it is to write, per key (a Notification's UID)."""

    def __init__(self) -> None:
        self._turns: dict[Hashable, _Turn] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: Hashable, *, shared: bool = False) -> AsyncIterator[None]:
        """A `shared` turn (a change of one pod, after reading the run) runs alongside other
        shared ones; any other turn is exclusive (it spans objects, or stops the run), and
        waits for the shared ones to end and goes before new ones."""
        turn = self._turns.setdefault(key, _Turn())
        turn.users += 1
        try:
            async with turn.changed:
                if shared:
                    await turn.changed.wait_for(lambda: not turn.writing and not turn.waiting)
                    turn.readers += 1
                else:
                    turn.waiting += 1
                    try:
                        await turn.changed.wait_for(lambda: not turn.writing and not turn.readers)
                    finally:
                        turn.waiting -= 1
                        turn.changed.notify_all()
                    turn.writing = True
            try:
                yield
            finally:
                async with turn.changed:
                    if shared:
                        turn.readers -= 1
                    else:
                        turn.writing = False
                    turn.changed.notify_all()
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[key]


@dataclass(frozen=True)
class Change:
    """A change of one entry (by its key) waiting to be written with its object: it changes
    the entry and returns True, or leaves it and returns False."""

    entry_key: str
    change: Callable[[Entry], bool]
    done: asyncio.Future[bool]


Write = Callable[[list[Change]], Awaitable[list[bool]]]
"""Applies changes (in order) in one update of their object; whether each changed its entry."""


class Batches:
    """Per object (a key), the changes made while it is being written join one batch, written
    once the write under way is done (the first one after a turn of the event loop)."""

    def __init__(self) -> None:
        self._batches: dict[Hashable, list[Change]] = {}
        self._flushes: dict[Hashable, asyncio.Task[None]] = {}
        """The last write of each object under way."""

    async def change(self, key: Hashable, entry_key: str, change: Callable[[Entry], bool],
                     write: Write) -> bool:
        """Apply `change` to entry `entry_key` of object `key` with the next batch, written by
        `write` (that of the batch's first change); whether it changed the entry."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = []
            flush = asyncio.create_task(self._flush(key, batch, write, self._flushes.get(key)))
            self._flushes[key] = flush
            flush.add_done_callback(functools.partial(self._flushed, key))
        batch.append(Change(entry_key, change, done))
        return await done

    async def _flush(self, key: Hashable, batch: list[Change], write: Write,
                     previous: asyncio.Task[None] | None) -> None:
        """Write `batch` once the previous write of the object is done (meanwhile the changes
        made join it), and settle each change's future."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        else:
            await asyncio.sleep(0)  # the changes made in this turn of the event loop join
        if self._batches.get(key) is batch:
            del self._batches[key]
        try:
            results = await write(batch)
        except Exception as error:
            for item in batch:
                if not item.done.done():
                    item.done.set_exception(error)
            return
        for item, result in zip(batch, results, strict=True):
            if not item.done.done():
                item.done.set_result(result)

    def _flushed(self, key: Hashable, flush: asyncio.Task[None]) -> None:
        if self._flushes.get(key) is flush:
            del self._flushes[key]


@dataclass
class _Turn:
    """Whose turn it is to write under one key (see ``Turns.turn``)."""

    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    readers: int = 0
    """Shared turns under way."""
    writing: bool = False
    """An exclusive turn is under way."""
    waiting: int = 0
    """Exclusive turns waiting (no new shared turn starts meanwhile)."""
    users: int = 0
