"""The SQLite object store: CRUD, resourceVersions, lists, per-pod bounds, persistence."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apiserver.api.status import status_body
from apiserver.registry.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    DataDirInUse,
    Expired,
    Invalid,
    InvalidSelector,
    NotFound,
    TooLarge,
    TooManyRequests,
)
from apiserver.registry.objects import timestamp
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore


def record(
    name: str = "",
    *,
    namespace: str = "ns",
    pod: str = "web-0",
    notifier: str = "quiesce",
    phase: str = "Pending",
    labels: dict[str, str] | None = None,
    **extra: object,
) -> dict:
    meta: dict = {"namespace": namespace}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = f"{pod}-{notifier}-"
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "notifier.x-k8s.io/v1alpha1",
        "kind": "PodNotifier",
        "metadata": meta,
        "spec": {"podName": pod, "notifier": notifier, **extra},
        "status": {"phase": phase},
    }


def finished(obj: dict, phase: str = "Succeeded", at: datetime | None = None) -> dict:
    obj["status"] = {"phase": phase, "completionTime": timestamp(at or datetime.now(UTC))}
    return obj


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    opened = await SqliteDatabase.open(tmp_path / "data", event_retention=50)
    yield opened
    await opened.close()


@pytest.fixture
def store(database: SqliteDatabase) -> SqliteObjectStore:
    return SqliteObjectStore(database, PODNOTIFIERS, max_object_bytes=4096)


async def test_create_fills_metadata(store: SqliteObjectStore) -> None:
    created = await store.create(record("a", labels={"x": "1"}))

    meta = created["metadata"]
    assert meta["name"] == "a"
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["resourceVersion"] == "1"
    assert meta["labels"] == {"x": "1"}
    assert await store.get("ns", "a") == created


async def test_generate_name(store: SqliteObjectStore) -> None:
    created = await store.create(record())

    name = created["metadata"]["name"]
    assert re.fullmatch(r"web-0-quiesce-[bcdfghjklmnpqrstvwxz2456789]{5}", name)
    assert created["metadata"]["generateName"] == "web-0-quiesce-"


async def test_generate_name_truncates_long_prefixes(store: SqliteObjectStore) -> None:
    obj = record()
    obj["metadata"]["generateName"] = "p" * 80

    name = (await store.create(obj))["metadata"]["name"]

    assert len(name) == 63 and name.startswith("p" * 58)


async def test_create_existing_name_is_already_exists(store: SqliteObjectStore) -> None:
    await store.create(record("a"))

    with pytest.raises(AlreadyExists) as raised:
        await store.create(record("a"))

    status = status_body(raised.value)
    assert status["code"] == 409 and status["reason"] == "AlreadyExists"
    assert status["message"] == 'podnotifiers.notifier.x-k8s.io "a" already exists'
    assert status["details"] == {"name": "a", "group": "notifier.x-k8s.io", "kind": "podnotifiers"}


async def test_same_name_in_other_namespace_is_fine(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    other = await store.create(record("a", namespace="ns2"))

    assert other["metadata"]["namespace"] == "ns2"


@pytest.mark.parametrize(
    ("meta", "error"),
    [
        ({"name": "a"}, Invalid),
        ({"namespace": "ns"}, Invalid),
        ({"namespace": "ns", "name": "a", "resourceVersion": "3"}, BadRequest),
    ],
)
async def test_create_requires_identity(store: SqliteObjectStore, meta: dict, error: type) -> None:
    with pytest.raises(error):
        await store.create({"metadata": meta, "spec": {}})


async def test_client_uid_and_timestamp_are_replaced(store: SqliteObjectStore) -> None:
    obj = record("a")
    obj["metadata"].update(uid="mine", creationTimestamp="2000-01-01T00:00:00Z")

    created = await store.create(obj)

    assert created["metadata"]["uid"] != "mine"
    assert created["metadata"]["creationTimestamp"] != "2000-01-01T00:00:00Z"


async def test_get_missing(store: SqliteObjectStore) -> None:
    with pytest.raises(NotFound) as raised:
        await store.get("ns", "nope")

    assert raised.value.code == 404
    assert raised.value.message == 'podnotifiers.notifier.x-k8s.io "nope" not found'


async def test_update_with_current_version(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    created["status"]["phase"] = "Running"

    updated = await store.update(created)

    assert updated["status"]["phase"] == "Running"
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert await store.get("ns", "a") == updated


async def test_update_with_stale_version_conflicts(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    await store.update({**created, "status": {"phase": "Running"}})

    with pytest.raises(Conflict) as raised:
        await store.update({**created, "status": {"phase": "Failed"}})

    assert "the object has been modified" in raised.value.message
    assert (await store.get("ns", "a"))["status"]["phase"] == "Running"


async def test_update_without_version_is_unconditional(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    await store.update({**created, "status": {"phase": "Running"}})
    blind = {**created, "metadata": {"namespace": "ns", "name": "a"}, "status": {"phase": "Failed"}}

    updated = await store.update(blind)

    assert updated["status"]["phase"] == "Failed"
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]


async def test_update_with_other_uid_conflicts(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))
    created["metadata"]["uid"] = "someone-else"

    with pytest.raises(Conflict, match="Precondition failed: UID"):
        await store.update(created)


async def test_noop_update_keeps_version(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))

    again = await store.update(created)

    assert again == created


async def test_update_missing(store: SqliteObjectStore) -> None:
    with pytest.raises(NotFound):
        await store.update(record("nope"))


async def test_guaranteed_update(store: SqliteObjectStore) -> None:
    await store.create(record("a"))

    def start(obj: dict) -> dict:
        obj["status"]["phase"] = "Running"
        return obj

    updated = await store.guaranteed_update("ns", "a", start)

    assert updated["status"]["phase"] == "Running"


async def test_guaranteed_update_aborts_on_error(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))

    def refuse(obj: dict) -> dict:
        raise Conflict("no")

    with pytest.raises(Conflict):
        await store.guaranteed_update("ns", "a", refuse)
    assert await store.get("ns", "a") == created


async def test_concurrent_guaranteed_updates_all_apply(store: SqliteObjectStore) -> None:
    await store.create(record("a", count=0))

    def bump(obj: dict) -> dict:
        obj["spec"]["count"] += 1
        return obj

    await asyncio.gather(*(store.guaranteed_update("ns", "a", bump) for _ in range(20)))

    assert (await store.get("ns", "a"))["spec"]["count"] == 20


async def test_delete_returns_object_at_deletion_version(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))

    deleted = await store.delete("ns", "a")

    assert int(deleted["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert deleted["spec"] == created["spec"]
    with pytest.raises(NotFound):
        await store.get("ns", "a")
    with pytest.raises(NotFound):
        await store.delete("ns", "a")
    recreated = await store.create(record("a"))
    assert recreated["metadata"]["uid"] != created["metadata"]["uid"]


async def test_delete_preconditions(store: SqliteObjectStore) -> None:
    created = await store.create(record("a"))

    with pytest.raises(Conflict):
        await store.delete("ns", "a", resource_version="999")
    with pytest.raises(Conflict):
        await store.delete("ns", "a", uid="other")
    await store.delete(
        "ns",
        "a",
        resource_version=created["metadata"]["resourceVersion"],
        uid=created["metadata"]["uid"],
    )


async def test_delete_collection(store: SqliteObjectStore) -> None:
    for name, pod in [("a", "web-0"), ("b", "web-1"), ("c", "web-0")]:
        await store.create(record(name, pod=pod))
    await store.create(record("d", namespace="ns2"))

    deleted = await store.delete_collection("ns", field_selector="spec.podName=web-0")

    assert [d["metadata"]["name"] for d in deleted] == ["a", "c"]
    remaining = await store.list(None)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in remaining.items] == [
        ("ns", "b"),
        ("ns2", "d"),
    ]


async def test_resource_version_is_global_and_increasing(database: SqliteDatabase) -> None:
    notifiers = SqliteObjectStore(database, PODNOTIFIERS)
    notifications = SqliteObjectStore(database, NOTIFICATIONS)
    versions = [
        (await notifiers.create(record("a")))["metadata"]["resourceVersion"],
        (await notifications.create({"metadata": {"namespace": "ns", "name": "a"}}))["metadata"][
            "resourceVersion"
        ],
        (await notifiers.delete("ns", "a"))["metadata"]["resourceVersion"],
    ]

    assert [int(v) for v in versions] == [1, 2, 3]
    assert (await notifications.get("ns", "a"))["metadata"]["resourceVersion"] == "2"
    with pytest.raises(NotFound):
        await notifications.get("ns", "missing")


async def test_failed_writes_take_no_version(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    with pytest.raises(AlreadyExists):
        await store.create(record("a"))

    assert (await store.create(record("b")))["metadata"]["resourceVersion"] == "2"


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
    assert (data / "registry.sqlite3").stat().st_mode & 0o077 == 0


async def test_second_process_on_the_same_data_dir_is_refused(
    database: SqliteDatabase, tmp_path: Path
) -> None:
    with pytest.raises(DataDirInUse, match="in use by another process"):
        await SqliteDatabase.open(tmp_path / "data")


async def test_size_cap(store: SqliteObjectStore) -> None:
    with pytest.raises(TooLarge) as raised:
        await store.create(record("big", output="x" * 5000))
    created = await store.create(record("small"))
    created["status"]["stdout"] = "y" * 5000
    with pytest.raises(TooLarge):
        await store.update(created)

    assert raised.value.code == 413
    assert "the limit is 4096" in raised.value.message
    with pytest.raises(NotFound):
        await store.get("ns", "big")
    assert "stdout" not in (await store.get("ns", "small"))["status"]


def names(items: list[dict]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


async def test_list_filters_by_namespace_and_selectors(store: SqliteObjectStore) -> None:
    await store.create(record("a", labels={"app": "db"}, phase="Running"))
    await store.create(record("b", labels={"app": "web"}))
    await store.create(record("c", namespace="ns2", labels={"app": "db"}))

    assert names((await store.list("ns")).items) == ["a", "b"]
    assert names((await store.list(None, label_selector="app=db")).items) == ["a", "c"]
    assert names((await store.list("ns", label_selector="app in (db,web),app!=web")).items) == ["a"]
    assert names((await store.list(None, field_selector="status.phase!=Running")).items) == [
        "b",
        "c",
    ]
    assert names((await store.list(None, field_selector="metadata.namespace=ns2")).items) == ["c"]
    with pytest.raises(InvalidSelector):
        await store.list("ns", field_selector="spec.other=x")
    with pytest.raises(InvalidSelector):
        await store.list("ns", label_selector="app in (")


async def test_list_resource_version_is_the_latest(store: SqliteObjectStore) -> None:
    await store.create(record("a"))
    deleted = await store.create(record("b"))
    await store.delete("ns", "b")

    listed = await store.list("ns")

    assert listed.resource_version == "3"
    assert int(listed.resource_version) > int(deleted["metadata"]["resourceVersion"])


async def test_pagination_is_a_consistent_snapshot(store: SqliteObjectStore) -> None:
    for i in range(7):
        await store.create(record(f"r{i}", phase="Running"))

    first = await store.list("ns", limit=3)
    # Writes between pages: a delete of a later item, an update, and a new item.
    await store.delete("ns", "r5")
    await store.guaranteed_update("ns", "r4", lambda o: {**o, "status": {"phase": "Failed"}})
    await store.create(record("r3a"))
    second = await store.list("ns", limit=3, continue_token=first.continue_token)
    third = await store.list("ns", limit=3, continue_token=second.continue_token)

    assert names(first.items) == ["r0", "r1", "r2"]
    assert names(second.items) == ["r3", "r4", "r5"]
    assert second.items[1]["status"]["phase"] == "Running"
    assert names(third.items) == ["r6"]
    assert third.continue_token == ""
    assert first.resource_version == second.resource_version == third.resource_version == "7"
    fresh = await store.list("ns")
    assert names(fresh.items) == ["r0", "r1", "r2", "r3", "r3a", "r4", "r6"]


async def test_pagination_with_selectors_and_exact_pages(store: SqliteObjectStore) -> None:
    for i in range(6):
        await store.create(record(f"r{i}", phase="Running" if i % 2 else "Pending"))

    first = await store.list("ns", limit=2, field_selector="status.phase=Running")
    second = await store.list(
        "ns", limit=2, field_selector="status.phase=Running", continue_token=first.continue_token
    )

    assert names(first.items) == ["r1", "r3"]
    assert names(second.items) == ["r5"]
    assert second.continue_token == ""
    exact = await store.list("ns", limit=6)
    assert len(exact.items) == 6 and exact.continue_token == ""


async def test_pagination_across_namespaces_and_batches(database: SqliteDatabase) -> None:
    store = SqliteObjectStore(database, PODNOTIFIERS)
    expected = []
    for namespace in ("a", "b"):
        for i in range(260):
            expected.append((namespace, f"r{i:03}"))
            await store.create(record(f"r{i:03}", namespace=namespace))

    seen, token = [], ""
    while True:
        page = await store.list(None, limit=97, continue_token=token)
        seen += [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in page.items]
        token = page.continue_token
        if not token:
            break

    assert seen == expected
    unlimited = await store.list(None, label_selector="!missing")
    assert len(unlimited.items) == 520


async def test_continue_token_expires_with_history(database: SqliteDatabase) -> None:
    store = SqliteObjectStore(database, PODNOTIFIERS)
    for i in range(3):
        await store.create(record(f"r{i}"))
    first = await store.list("ns", limit=1)

    for _ in range(60):  # retention is 50 versions
        await store.guaranteed_update("ns", "r2", lambda o: {**o, "spec": {**o["spec"], "n": 1}})
        await store.guaranteed_update("ns", "r2", lambda o: {**o, "spec": {**o["spec"], "n": 2}})

    with pytest.raises(Expired) as raised:
        await store.list("ns", limit=1, continue_token=first.continue_token)
    assert raised.value.code == 410


@pytest.mark.parametrize("token", ["garbage!", "eyJydiI6MX0", "bm90IGpzb24"])
async def test_malformed_continue_token(store: SqliteObjectStore, token: str) -> None:
    with pytest.raises(BadRequest, match="continue token"):
        await store.list("ns", limit=1, continue_token=token)


async def pod_records(store: SqliteObjectStore, pod: str) -> list[str]:
    """Names of the pod's records, in name order."""
    return names((await store.list("ns", field_selector=f"spec.podName={pod}")).items)


async def test_bounded_create_evicts_oldest_finished(store: SqliteObjectStore) -> None:
    made = []
    for i in range(3):
        made.append(await store.create(finished(record(f"old{i}", notifier=f"n{i}"))))
    await store.create(record("other-pod", pod="web-1", notifier="n9"))

    result = await store.create_bounded(record(notifier="n9"), max_per_pod=3)

    assert names(result.evicted) == ["old0"]
    assert result.object["metadata"]["name"].startswith("web-0-n9-")
    kept = await pod_records(store, "web-0")
    assert kept[:2] == ["old1", "old2"] and len(kept) == 3
    assert len(await pod_records(store, "web-1")) == 1


async def test_bounded_create_refuses_when_all_are_unfinished(store: SqliteObjectStore) -> None:
    await store.create(finished(record("done", notifier="a")))
    await store.create(record("busy1", notifier="b", phase="Running"))
    await store.create(record("busy2", notifier="c"))

    with pytest.raises(TooManyRequests) as raised:
        await store.create_bounded(record(notifier="d"), max_per_pod=2)

    assert raised.value.code == 429
    assert status_body(raised.value)["details"]["retryAfterSeconds"] == 5
    assert len(await pod_records(store, "web-0")) == 3


async def test_bounded_create_refuses_the_same_notifier_twice(store: SqliteObjectStore) -> None:
    await store.create(record("first", notifier="quiesce", phase="Running"))
    await store.create(record("elsewhere", pod="web-1", notifier="quiesce", phase="Running"))

    with pytest.raises(Conflict, match='notifier "quiesce" is already running on pod "web-0"'):
        await store.create_bounded(record(notifier="quiesce"), max_per_pod=10)
    await store.guaranteed_update("ns", "first", finished)
    again = await store.create_bounded(record(notifier="quiesce"), max_per_pod=10)
    assert again.evicted == []


async def test_bounded_create_is_atomic_under_concurrency(store: SqliteObjectStore) -> None:
    results = await asyncio.gather(
        *(store.create_bounded(record(notifier=f"n{i}"), max_per_pod=4) for i in range(10)),
        return_exceptions=True,
    )

    created = [r for r in results if not isinstance(r, Exception)]
    assert len(created) == 4
    assert all(isinstance(r, TooManyRequests) for r in results if isinstance(r, Exception))
    assert len(await pod_records(store, "web-0")) == 4


async def test_bounded_create_requires_pod_and_notifier(store: SqliteObjectStore) -> None:
    with pytest.raises(Invalid) as raised:
        await store.create_bounded({"metadata": {"namespace": "ns", "name": "x"}}, max_per_pod=1)

    assert [c.field for c in raised.value.causes] == ["spec.podName", "spec.notifier"]


async def test_delete_expired(store: SqliteObjectStore) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    await store.create(finished(record("old", notifier="a"), at=now - timedelta(seconds=120)))
    await store.create(finished(record("recent", notifier="b"), at=now - timedelta(seconds=30)))
    await store.create(
        finished(
            record("short-ttl", notifier="c", ttlSecondsAfterFinished=10),
            at=now - timedelta(seconds=30),
        )
    )
    await store.create(record("running", notifier="d", phase="Running"))
    await store.create(
        finished(record("failed", notifier="e"), phase="Failed", at=now - timedelta(seconds=60))
    )

    expired = await store.delete_expired(now, default_ttl_seconds=60)

    assert names(expired) == ["old", "short-ttl", "failed"]
    assert names((await store.list("ns")).items) == ["recent", "running"]


async def test_unfinished(store: SqliteObjectStore) -> None:
    await store.create(record("p", notifier="a", phase="Pending"))
    await store.create(record("r", notifier="b", namespace="ns2", phase="Running"))
    await store.create(finished(record("s", notifier="c")))
    await store.create(finished(record("f", notifier="d"), phase="Failed"))

    assert names(await store.unfinished()) == ["p", "r"]


async def test_returned_objects_are_not_shared_with_watchers(store: SqliteObjectStore) -> None:
    start = (await store.list("ns")).resource_version
    watch = await store.watch("ns", resource_version=start)
    created = await store.create(record("a"))
    created["spec"]["podName"] = "changed"

    event = await asyncio.wait_for(anext(watch), 2)
    assert event.object["spec"]["podName"] == "web-0"
    watch.close()


async def test_cancelled_caller_does_not_undo_a_write(store: SqliteObjectStore) -> None:
    task = asyncio.create_task(store.create(record("a")))
    await asyncio.sleep(0)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        await asyncio.sleep(0.01)
        listed = await store.list("ns")
        if listed.items:
            break
    assert names(listed.items) == ["a"]
