"""Watching the SQLite object store: ordering, resume, expiry, overflow, selectors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apiserver.api.status import status_body
from apiserver.registry.errors import BadRequest, Expired, ResourceVersionTooLarge
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.watch import Watch, WatchEvent


def record(name: str, namespace: str = "ns", phase: str = "Pending", **labels: str) -> dict:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"podName": "web-0", "notifier": name},
        "status": {"phase": phase},
    }


def set_phase(phase: str):
    def mutate(obj: dict) -> dict:
        obj["status"]["phase"] = phase
        return obj

    return mutate


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    opened = await SqliteDatabase.open(tmp_path, event_retention=20)
    yield opened
    await opened.close()


@pytest.fixture
def store(database: SqliteDatabase) -> SqliteObjectStore:
    opened = SqliteObjectStore(database, PODNOTIFIERS, max_queued_events=5)
    yield opened
    opened.close()


async def take(watch: Watch, count: int) -> list[WatchEvent]:
    return [await asyncio.wait_for(anext(watch), 2) for _ in range(count)]


def summary(events: list[WatchEvent]) -> list[tuple[str, str, str]]:
    return [
        (e.type.value, e.object["metadata"]["name"], e.object["metadata"]["resourceVersion"])
        for e in events
    ]


async def nothing_more(watch: Watch) -> bool:
    try:
        await asyncio.wait_for(anext(watch), 0.05)
    except TimeoutError:
        return True
    return False


async def test_watch_from_now_starts_with_current_objects(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    await store.create(record("b"))
    await store.delete("ns", "b")

    watch = await store.watch("ns")
    await store.create(record("c"))

    assert summary(await take(watch, 2)) == [("ADDED", "a", "1"), ("ADDED", "c", "4")]
    assert await nothing_more(watch)


async def test_watch_from_zero_is_the_same(store: SqliteObjectStore) -> None:
    await store.create(record("a"))

    watch = await store.watch("ns", resource_version="0")

    assert summary(await take(watch, 1)) == [("ADDED", "a", "1")]


async def test_live_events_in_commit_order(store: SqliteObjectStore) -> None:
    watch = await store.watch(None)

    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.create(record("b", namespace="ns2"))
    await store.delete("ns", "a")

    events = await take(watch, 4)
    assert summary(events) == [
        ("ADDED", "a", "1"),
        ("MODIFIED", "a", "2"),
        ("ADDED", "b", "3"),
        ("DELETED", "a", "4"),
    ]
    assert events[1].object["status"]["phase"] == "Running"
    assert events[3].object["status"]["phase"] == "Running"
    assert events[3].as_dict()["type"] == "DELETED"


async def test_concurrent_writers_are_seen_in_resource_version_order(
    store: SqliteObjectStore,
) -> None:
    watch = await store.watch(None)

    await asyncio.gather(*(store.create(record(f"r{i}")) for i in range(5)))

    versions = [int(e.object["metadata"]["resourceVersion"]) for e in await take(watch, 5)]
    assert versions == [1, 2, 3, 4, 5]


async def test_resume_from_a_resource_version(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.create(record("b"))
    await store.delete("ns", "a")

    watch = await store.watch("ns", resource_version=created["metadata"]["resourceVersion"])
    await store.create(record("c"))

    events = await take(watch, 4)
    assert summary(events) == [
        ("MODIFIED", "a", "2"),
        ("ADDED", "b", "3"),
        ("DELETED", "a", "4"),
        ("ADDED", "c", "5"),
    ]
    assert events[2].object["status"]["phase"] == "Running"
    assert await nothing_more(watch)


async def test_resume_at_the_latest_version_sees_only_new_changes(
    store: SqliteObjectStore,
) -> None:
    await store.create(record("a"))
    listed = await store.list("ns")

    watch = await store.watch("ns", resource_version=listed.resource_version)
    await store.create(record("b"))

    assert summary(await take(watch, 1)) == [("ADDED", "b", "2")]


async def test_resume_survives_reopen(tmp_path: Path) -> None:
    first = await SqliteDatabase.open(tmp_path)
    store = SqliteObjectStore(first, PODNOTIFIERS)
    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await first.close()

    second = await SqliteDatabase.open(tmp_path)
    reopened = SqliteObjectStore(second, PODNOTIFIERS)
    watch = await reopened.watch("ns", resource_version="1")
    events = await take(watch, 1)
    reopened.close()
    await second.close()

    assert summary(events) == [("MODIFIED", "a", "2")]


async def test_too_old_resource_version_is_expired(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    for i in range(30):  # retention is 20 versions
        await store.guaranteed_update("ns", "a", set_phase(f"P{i}"))

    with pytest.raises(Expired) as raised:
        await store.watch("ns", resource_version="1")
    assert raised.value.code == 410
    assert status_body(raised.value)["reason"] == "Expired"
    assert raised.value.message == "too old resource version: 1 (11)"

    oldest_kept = await store.watch("ns", resource_version="11")
    assert summary(await take(oldest_kept, 1)) == [("MODIFIED", "a", "12")]


async def test_future_resource_version(store: SqliteObjectStore) -> None:
    with pytest.raises(ResourceVersionTooLarge) as raised:
        await store.watch("ns", resource_version="5")

    assert raised.value.code == 504
    assert raised.value.causes[0].reason == "ResourceVersionTooLarge"


@pytest.mark.parametrize("version", ["abc", "-1", "1.5", "²"])
async def test_malformed_resource_version(store: SqliteObjectStore, version: str) -> None:
    with pytest.raises(BadRequest, match="invalid resource version"):
        await store.watch("ns", resource_version=version)


async def test_slow_watcher_is_closed_with_expired(store: SqliteObjectStore) -> None:
    slow = await store.watch("ns")
    fast = await store.watch("ns")

    fast_events = []
    for i in range(6):  # the queue bound is 5
        await store.create(record(f"r{i}"))
        fast_events += await take(fast, 1)
    await store.create(record("after"))

    with pytest.raises(Expired, match="fell more than 5 events behind"):
        await anext(slow)
    with pytest.raises(StopAsyncIteration):
        await anext(slow)
    assert len(fast_events) == 6
    assert summary(await take(fast, 1)) == [("ADDED", "after", "7")]


async def test_initial_events_do_not_count_against_the_bound(store: SqliteObjectStore) -> None:
    for i in range(8):
        await store.create(record(f"r{i}"))

    watch = await store.watch("ns")
    await store.create(record("live"))

    events = await take(watch, 9)
    assert [e.object["metadata"]["name"] for e in events][-1] == "live"


async def test_selectors_turn_transitions_into_added_and_deleted(
    store: SqliteObjectStore,
) -> None:
    await store.create(record("a"))
    running = await store.watch("ns", field_selector="status.phase=Running")

    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.guaranteed_update("ns", "a", lambda o: {**o, "spec": {**o["spec"], "x": 1}})
    await store.guaranteed_update("ns", "a", set_phase("Succeeded"))
    await store.create(record("b"))

    events = await take(running, 3)
    assert summary(events) == [
        ("ADDED", "a", "2"),
        ("MODIFIED", "a", "3"),
        ("DELETED", "a", "4"),
    ]
    assert events[2].object["status"]["phase"] == "Running"  # the last state that matched
    assert await nothing_more(running)


async def test_label_and_namespace_filters(store: SqliteObjectStore) -> None:
    watch = await store.watch("ns", label_selector="app=db")

    await store.create(record("web", app="web"))
    await store.create(record("other-ns", namespace="ns2", app="db"))
    await store.create(record("db", app="db"))

    assert summary(await take(watch, 1)) == [("ADDED", "db", "3")]
    assert await nothing_more(watch)


async def test_replayed_history_applies_selectors_too(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.guaranteed_update("ns", "a", set_phase("Failed"))

    watch = await store.watch("ns", resource_version="1", field_selector="status.phase=Running")

    assert summary(await take(watch, 2)) == [("ADDED", "a", "2"), ("DELETED", "a", "3")]


async def test_closing_ends_iteration(store: SqliteObjectStore) -> None:
    watch = await store.watch("ns")
    waiting = asyncio.create_task(anext(watch))
    await asyncio.sleep(0)

    watch.close()

    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 1)
    await store.create(record("a"))
    with pytest.raises(StopAsyncIteration):
        await anext(watch)


async def test_closing_the_store_ends_all_watches(store: SqliteObjectStore) -> None:
    watches = [await store.watch("ns") for _ in range(3)]

    store.close()

    for watch in watches:
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(watch), 1)


async def test_watch_started_between_queued_writes_misses_nothing(
    database: SqliteDatabase,
) -> None:
    store = SqliteObjectStore(database, PODNOTIFIERS)
    before = [asyncio.create_task(store.create(record(f"a{i}"))) for i in range(5)]
    await asyncio.sleep(0.001)  # the first writes queue for the write lock
    starting = asyncio.create_task(store.watch("ns"))
    await asyncio.sleep(0.001)  # the watch queues behind them
    after = [asyncio.create_task(store.create(record(f"b{i}"))) for i in range(5)]
    await asyncio.gather(*before, *after)
    watch = await starting

    events = await take(watch, 10)

    assert [e.object["metadata"]["name"] for e in events] == [
        *(f"a{i}" for i in range(5)),
        *(f"b{i}" for i in range(5)),
    ]
    assert [e.object["metadata"]["resourceVersion"] for e in events] == [
        str(v) for v in range(1, 11)
    ]
    assert await nothing_more(watch)
