"""The SQLite backend beyond the conformance suite: persistence, the data directory lock, the
schema migration, the index behind cohorts, list batches, and storage failures (a full disk,
made with ``PRAGMA max_page_count``)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from apiserver import errors
from apiserver.api.status import status_body
from apiserver.registry.errors import DataDirInUse, StorageUnavailable, TooManyRequests
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import FILE_NAME, SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from tests.support.stores import names_by_pages
from tests.unit.test_store_conformance import finished, names, record


@pytest.fixture
def store(database: SqliteDatabase) -> SqliteObjectStore:
    return SqliteObjectStore(database, PODNOTIFIERS)


async def test_persistence_and_versions_survive_reopen(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = await SqliteDatabase.open(data)
    store = SqliteObjectStore(first, PODNOTIFIERS)
    kept = await store.create(record("kept"))
    await store.create(record("gone"))
    await store.delete("ns", "gone")
    await first.close()

    second = await SqliteDatabase.open(data)
    reopened = SqliteObjectStore(second, PODNOTIFIERS)
    listed = await reopened.list("ns")
    created = await reopened.create(record("new"))
    await second.close()

    assert listed.items == [kept]
    assert listed.resource_version == "3"
    assert created["metadata"]["resourceVersion"] == "4"
    assert (data / FILE_NAME).stat().st_mode & 0o077 == 0


async def test_second_process_on_the_same_data_dir_is_refused(
    database: SqliteDatabase, tmp_path: Path
) -> None:
    with pytest.raises(DataDirInUse, match="in use by another process"):
        await SqliteDatabase.open(tmp_path / "data")


async def test_pagination_across_batches(store: SqliteObjectStore) -> None:
    """More objects than one SQLite read batch (500), over two namespaces."""
    expected = []
    for namespace in ("a", "b"):
        for i in range(260):
            expected.append((namespace, f"r{i:03}"))
            await store.create(record(f"r{i:03}", namespace=namespace))

    assert await names_by_pages(store, 97) == expected
    assert len((await store.list(None, label_selector="!missing")).items) == 520


SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta (key, value) VALUES ('schema', 1), ('rv', 2), ('compacted', 0);
CREATE TABLE revisions (
    resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, rv INTEGER NOT NULL,
    superseded INTEGER, created_rv INTEGER NOT NULL, pod TEXT, notifier TEXT, phase TEXT,
    completion REAL, ttl INTEGER, object TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, rv)
);
CREATE UNIQUE INDEX current_revisions
    ON revisions (resource, namespace, name) WHERE superseded IS NULL;
CREATE INDEX current_by_pod
    ON revisions (resource, namespace, pod, created_rv) WHERE superseded IS NULL;
CREATE INDEX current_by_phase ON revisions (resource, phase) WHERE superseded IS NULL;
CREATE INDEX superseded_revisions ON revisions (superseded) WHERE superseded IS NOT NULL;
CREATE TABLE events (rv INTEGER PRIMARY KEY, resource TEXT NOT NULL, namespace TEXT NOT NULL,
                     name TEXT NOT NULL, type TEXT NOT NULL);
"""


async def test_schema_1_is_migrated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    old = finished(record("old", notifier="a"))
    old["metadata"].update(uid="u1", creationTimestamp="2026-01-01T00:00:00Z",
                           resourceVersion="2")
    with sqlite3.connect(data / FILE_NAME) as connection:
        connection.executescript(SCHEMA_1)
        connection.execute(
            "INSERT INTO revisions VALUES ('podnotifiers', 'ns', 'old', 2, NULL, 1, 'web-0', 'a',"
            " 'Succeeded', 0, NULL, ?)", (json.dumps(old),))
        connection.execute("INSERT INTO events VALUES (2, 'podnotifiers', 'ns', 'old', 'ADDED')")
    connection.close()

    database = await SqliteDatabase.open(data)
    records = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    listed = await records.list("ns", field_selector="spec.podName=web-0")
    created = await records.create_bounded(record(notifier="b"), max_per_pod=1)
    columns = await database.run(
        lambda c: [row[1] for row in c.execute("PRAGMA table_info(revisions)")])
    schema = await database.run(
        lambda c: c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])
    await database.close()

    assert listed.items == [old]
    # after the eviction of "old" at 3, in the same transaction (no other write)
    assert created["metadata"]["resourceVersion"] == "4"
    assert columns == ["resource", "namespace", "name", "rv", "superseded", "created_rv", "object"]
    assert schema == 3


async def test_cohorts_use_the_index_of_the_indexed_field(database: SqliteDatabase) -> None:
    records = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    await records.create(record("a"))
    statements: list[str] = []
    await database.run(lambda c: c.set_trace_callback(statements.append))

    await records.create_bounded(record(notifier="b"), max_per_pod=5)

    await database.run(lambda c: c.set_trace_callback(None))
    # the cohort's members, read in the create's transaction (the pod's records listed before
    # it, to refuse without writing, are a list's snapshot read)
    in_transaction = statements[statements.index("BEGIN IMMEDIATE"):]
    cohort_query = next(s for s in in_transaction if "json_extract" in s
                        and s.startswith("SELECT") and "'$.spec.podName'" in s)
    plan = await database.run(
        lambda c: c.execute(f"EXPLAIN QUERY PLAN {cohort_query}").fetchall())
    assert any('USING INDEX "current_by_spec.podName"' in row[3]
               or "USING INDEX current_by_spec.podName" in row[3] for row in plan), plan


# Storage failures


async def fill_disk(database: SqliteDatabase) -> None:
    """Make the database as full as a full file system would: no page can be added."""
    await database.run(lambda c: c.execute(
        "PRAGMA max_page_count = " + str(c.execute("PRAGMA page_count").fetchone()[0])))


async def free_space(database: SqliteDatabase) -> None:
    await database.run(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))


def big(name: str, **fields: object) -> dict:
    return record(name, output="x" * 20_000, **fields)


async def test_full_disk_is_service_unavailable_until_space_is_freed(
    database: SqliteDatabase, store: SqliteObjectStore
) -> None:
    before = await store.create(record("a"))
    watch = await store.watch("ns", resource_version=before["metadata"]["resourceVersion"])
    await fill_disk(database)

    with pytest.raises(StorageUnavailable) as raised:
        await store.create(big("b"))

    error = raised.value
    assert isinstance(error, errors.ServiceUnavailable)
    status = status_body(error)
    assert (status["code"], status["reason"]) == (503, "ServiceUnavailable")
    assert "storage failed" in status["message"]
    assert "database or disk is full" in status["message"]
    assert "free space on the file system of --data-dir" in status["message"]
    assert status["details"]["retryAfterSeconds"] == 5
    assert not database.writable and database.write_error == error.message
    listed = await store.list("ns")  # reads still work; nothing of the write was kept
    assert names(listed.items) == ["a"] and listed.resource_version == "1"
    with pytest.raises(StorageUnavailable):
        await store.create(big("c"))
    assert not database.writable

    await free_space(database)
    created = await store.create(big("b"))

    assert database.writable and database.write_error == ""
    assert created["metadata"]["resourceVersion"] == "2"  # the failed writes took none
    event = await asyncio.wait_for(anext(watch), 2)
    assert event.object["metadata"]["name"] == "b"  # no event of the failed writes came first
    watch.close()


async def test_failed_transaction_leaves_no_partial_state(database: SqliteDatabase) -> None:
    records = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    await records.create(finished(record("old", notifier="a")))
    await fill_disk(database)

    with pytest.raises(StorageUnavailable):  # evicts "old", then cannot add the new record
        await records.create_bounded(big("", notifier="b"), max_per_pod=1)

    await free_space(database)
    listed = await records.list("ns")
    assert names(listed.items) == ["old"]
    # "old" at 1 is the last write: the eviction and the create were rolled back together
    assert listed.resource_version == "1"


async def test_failed_update_keeps_the_object(database: SqliteDatabase,
                                              store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    await fill_disk(database)

    def grow(obj: dict) -> dict:
        obj["status"]["stdout"] = "y" * 20_000
        return obj

    with pytest.raises(StorageUnavailable):
        await store.guaranteed_update("ns", "a", grow)

    assert await store.get("ns", "a") == created


async def test_refusals_and_bugs_are_not_storage_failures(database: SqliteDatabase) -> None:
    records = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    await records.create_bounded(record("busy", notifier="a"), max_per_pod=1)

    with pytest.raises(TooManyRequests):
        await records.create_bounded(record(notifier="b"), max_per_pod=1)
    with pytest.raises(sqlite3.IntegrityError):
        await database.transaction(
            lambda c: c.execute("INSERT INTO meta (key, value) VALUES ('rv', 0)"))

    assert database.writable


async def test_writable_again_after_space_is_freed_without_other_writes(tmp_path: Path) -> None:
    """A server that is not ready gets no requests: the database's own probe must notice."""
    database = await SqliteDatabase.open(tmp_path / "data", probe_interval=0.02)
    store = SqliteObjectStore(database, PODNOTIFIERS)
    await store.create(record("a"))
    await fill_disk(database)
    with pytest.raises(StorageUnavailable):
        await store.create(big("b"))

    await asyncio.sleep(0.2)  # probes fail while the disk is full
    still_full = database.writable
    await free_space(database)
    for _ in range(100):
        if database.writable:
            break
        await asyncio.sleep(0.02)
    recovered = database.writable
    listed = await store.list("ns")
    await database.close()

    assert not still_full
    assert recovered
    assert names(listed.items) == ["a"] and listed.resource_version == "1"
