"""apiserver/fanout/write_turns.py: the order of the scope store's writes in one process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from apiserver.fanout.write_turns import Batches, Change, Entry, Turns


def set_state(state: str) -> Callable[[Entry], bool]:
    def change(entry: Entry) -> bool:
        if entry.get("state") == state:
            return False
        entry["state"] = state
        return True

    return change


async def test_changes_made_while_an_object_is_written_are_written_together_next() -> None:
    entries: dict[str, Entry] = {"a": {}, "b": {}, "c": {}, "d": {}}
    writes: list[list[str]] = []
    first_written = asyncio.Event()

    async def write(changes: list[Change]) -> list[bool]:
        writes.append([item.entry_key for item in changes])
        if len(writes) == 1:
            await first_written.wait()
        return [item.change(entries[item.entry_key]) for item in changes]

    batches = Batches()
    first = [asyncio.create_task(batches.change("pod-set-0", key, set_state("done"), write))
             for key in ("a", "b")]
    while not writes:
        await asyncio.sleep(0)
    later = [asyncio.create_task(batches.change("pod-set-0", key, set_state("done"), write))
             for key in ("c", "d", "a")]
    await asyncio.sleep(0)
    assert writes == [["a", "b"]]  # the second batch waits for the write under way
    first_written.set()

    assert await asyncio.gather(*first) == [True, True]
    assert await asyncio.gather(*later) == [True, True, False]  # "a" was done already
    assert writes == [["a", "b"], ["c", "d", "a"]]


async def test_a_failed_write_fails_each_change_of_its_batch() -> None:
    async def write(changes: list[Change]) -> list[bool]:
        raise OSError("storage unavailable")

    batches = Batches()
    results = await asyncio.gather(
        *(batches.change("pod-set-0", key, set_state("done"), write) for key in ("a", "b")),
        return_exceptions=True)
    assert [type(result) for result in results] == [OSError, OSError]


async def test_an_exclusive_turn_waits_for_shared_ones_and_goes_before_new_ones() -> None:
    turns, order = Turns(), []
    shared_may_end = asyncio.Event()

    async def shared(name: str, hold: asyncio.Event | None = None) -> None:
        async with turns.turn("uid", shared=True):
            order.append(f"{name} starts")
            if hold is not None:
                await hold.wait()
            order.append(f"{name} ends")

    async def exclusive() -> None:
        async with turns.turn("uid"):
            order.append("exclusive")

    first = asyncio.create_task(shared("first", shared_may_end))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(exclusive())
    await asyncio.sleep(0)
    late = asyncio.create_task(shared("late"))
    await asyncio.sleep(0)
    assert order == ["first starts"]
    shared_may_end.set()
    await asyncio.gather(first, waiting, late)
    assert order == ["first starts", "first ends", "exclusive", "late starts", "late ends"]
