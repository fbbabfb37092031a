"""A finished record never changes again, whoever writes: a run whose record another writer
finished first (a takeover while the replica was paused, a lost Lease) stores nothing more and
stops what it holds; the record keeps the first result."""

from __future__ import annotations

import asyncio

from apiserver.notifier import records
from apiserver.notifier.runner import FINISHED_ELSEWHERE
from tests.unit.test_holds import NS as HOLD_NS
from tests.unit.test_holds import Held, held  # noqa: F401 (the fixture)
from tests.unit.test_runner import NS, Setup, setup  # noqa: F401 (the fixture)

TAKEN_OVER = "taken over: the replica that ran it stopped renewing its Lease"


def take_over(record: dict[str, object]) -> dict[str, object]:
    """What another replica's takeover writes (housekeeping: Failed/Interrupted)."""
    return records.finish(record, records.now(), records.INTERRUPTED, TAKEN_OVER)


async def test_a_run_whose_record_was_taken_over_keeps_the_takeovers_result(
        setup: Setup) -> None:  # noqa: F811
    setup.execute.gates["app"] = asyncio.Event()
    plan = await setup.plan("app")
    setup.runner.start(plan)
    async with asyncio.timeout(5):
        while setup.execute.running != 1:
            await asyncio.sleep(0.005)
    taken = await setup.store.guaranteed_update(NS, plan.record, take_over)

    setup.execute.gates["app"].set()
    await setup.runner.wait(NS, plan.record, 5)

    stored = await setup.store.get(NS, plan.record)
    assert stored["metadata"]["resourceVersion"] == taken["metadata"]["resourceVersion"]
    assert (stored["status"]["phase"], stored["status"]["reason"],
            stored["status"]["message"]) == ("Failed", "Interrupted", TAKEN_OVER)
    assert setup.metrics.finished == [("Failed", FINISHED_ELSEWHERE)]


async def test_a_held_run_taken_over_stops_its_commands_and_writes_nothing(
        held: Held) -> None:  # noqa: F811
    name = await held.start("db")
    assert (await held.held(name))["status"]["phase"] == "Held"
    taken = await held.store.guaranteed_update(HOLD_NS, name, take_over)

    async with asyncio.timeout(5):
        while not held.holding.commands["db"].released:
            await asyncio.sleep(0.01)
        while held.runner.is_running(HOLD_NS, name):
            await asyncio.sleep(0.01)

    stored = await held.store.get(HOLD_NS, name)
    assert stored["metadata"]["resourceVersion"] == taken["metadata"]["resourceVersion"]
    assert (stored["status"]["phase"], stored["status"]["message"]) == ("Failed", TAKEN_OVER)
