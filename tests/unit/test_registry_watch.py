"""Watching the SQLite object store: what is particular to SQLite (history kept on disk,
compaction). The behaviour every backend shares is in test_store_conformance."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apiserver.registry.errors import Expired
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
def event_retention() -> int:
    return 20


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


async def test_resource_versions_count_from_one(store: SqliteObjectStore) -> None:
    watch = await store.watch(None)

    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.delete("ns", "a")

    assert summary(await take(watch, 3)) == [
        ("ADDED", "a", "1"), ("MODIFIED", "a", "2"), ("DELETED", "a", "3")]


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


async def test_history_is_compacted_to_the_retention(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    for i in range(30):  # retention is 20 versions
        await store.guaranteed_update("ns", "a", set_phase(f"P{i}"))

    with pytest.raises(Expired) as raised:
        await store.watch("ns", resource_version="1")
    assert raised.value.message == "too old resource version: 1 (11)"

    oldest_kept = await store.watch("ns", resource_version="11")
    assert summary(await take(oldest_kept, 1)) == [("MODIFIED", "a", "12")]
