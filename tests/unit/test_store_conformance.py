"""The store conformance suite: what every storage backend must do, written against the generic
interface (``apiserver.registry.store.ObjectStore``) and the PodNotifier strategy on top of it.

It runs once per backend of the ``backend`` fixture (tests/unit/conftest.py; the real control
plane's from tests/cluster/test_store_conformance_kubernetes.py), so it assumes
only what Kubernetes promises of resourceVersions: they increase, and other writers may take
some in between (exact values are the SQLite tests'). It covers CRUD and the
metadata the store owns, generateName, one increasing resourceVersion, preconditions, the size
cap, lists (selectors, pages from one snapshot, continue tokens that expire with the history),
watches (from now, "0", a resourceVersion; 410 for a compacted one, too large for a future one;
overflow; selector transitions), cohort creates, and the PodNotifier rules (at most one
unfinished run per notifier and pod, at most K records per pod, TTL expiry, unfinished records).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apiserver.api.status import status_body
from apiserver.registry.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Finished,
    Invalid,
    InvalidSelector,
    NotFound,
    ResourceVersionTooLarge,
    TooLarge,
    TooManyRequests,
)
from apiserver.registry.podnotifiers import PodNotifierStore, eviction_low_water, runner
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.store import Cohort, Object, ObjectStore
from apiserver.registry.watch import Watch, WatchEvent
from apiserver.timestamps import timestamp
from tests.support.backends import Backend
from tests.support.stores import names_by_pages

MAX_BYTES = 4096
MAX_QUEUED = 5


def record(name: str = "", *, namespace: str = "ns", pod: str = "web-0",
           notifier: str = "quiesce", phase: str = "Pending",
           labels: dict[str, str] | None = None, **spec: Any) -> Object:
    meta: dict[str, Any] = {"namespace": namespace}
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
        "spec": {"podName": pod, "notifier": notifier, **spec},
        "status": {"phase": phase},
    }


def finished(obj: Object, phase: str = "Succeeded", at: datetime | None = None) -> Object:
    obj["status"] = {"phase": phase, "completionTime": timestamp(at or datetime.now(UTC))}
    return obj


def set_phase(phase: str) -> Callable[[Object], Object]:
    def mutate(obj: Object) -> Object:
        obj["status"]["phase"] = phase
        return obj

    return mutate


def names(items: list[Object]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def version(obj: Object) -> int:
    return int(obj["metadata"]["resourceVersion"])


@pytest.fixture
def store(backend: Backend) -> ObjectStore:
    return backend.store(PODNOTIFIERS, max_object_bytes=MAX_BYTES, max_queued_events=MAX_QUEUED)


@pytest.fixture
def records(backend: Backend, store: ObjectStore) -> PodNotifierStore:
    return PodNotifierStore(store, "replica-0")


async def take(watch: Watch, count: int) -> list[WatchEvent]:
    return [await asyncio.wait_for(anext(watch), 2) for _ in range(count)]


def summary(events: list[WatchEvent]) -> list[tuple[str, str, int]]:
    return [(e.type.value, e.object["metadata"]["name"], version(e.object)) for e in events]


async def nothing_more(watch: Watch) -> bool:
    try:
        await asyncio.wait_for(anext(watch), 0.05)
    except TimeoutError:
        return True
    return False


# Create, get, and the metadata the store owns


async def test_create_fills_metadata(store: ObjectStore) -> None:
    created = await store.create(record("a", labels={"x": "1"}))

    meta = created["metadata"]
    assert meta["name"] == "a"
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert version(created) > 0
    assert meta["labels"] == {"x": "1"}
    assert await store.get("ns", "a") == created


async def test_generate_name(store: ObjectStore) -> None:
    created = await store.create(record())

    name = created["metadata"]["name"]
    assert re.fullmatch(r"web-0-quiesce-[bcdfghjklmnpqrstvwxz2456789]{5}", name)
    assert created["metadata"]["generateName"] == "web-0-quiesce-"


async def test_generate_name_truncates_long_prefixes(store: ObjectStore) -> None:
    obj = record()
    obj["metadata"]["generateName"] = "p" * 80

    name = (await store.create(obj))["metadata"]["name"]

    assert len(name) == 63 and name.startswith("p" * 58)


async def test_create_existing_name_is_already_exists(store: ObjectStore) -> None:
    await store.create(record("a"))

    with pytest.raises(AlreadyExists) as raised:
        await store.create(record("a"))

    status = status_body(raised.value)
    assert status["code"] == 409 and status["reason"] == "AlreadyExists"
    assert status["message"] == 'podnotifiers.notifier.x-k8s.io "a" already exists'
    assert status["details"] == {"name": "a", "group": "notifier.x-k8s.io", "kind": "podnotifiers"}


async def test_same_name_in_other_namespace_is_fine(store: ObjectStore) -> None:
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
async def test_create_requires_identity(store: ObjectStore, meta: dict, error: type) -> None:
    with pytest.raises(error):
        await store.create({"metadata": meta, "spec": {}})


async def test_client_uid_and_timestamp_are_replaced(store: ObjectStore) -> None:
    obj = record("a")
    obj["metadata"].update(uid="mine", creationTimestamp="2000-01-01T00:00:00Z")

    created = await store.create(obj)

    assert created["metadata"]["uid"] != "mine"
    assert created["metadata"]["creationTimestamp"] != "2000-01-01T00:00:00Z"


async def test_get_missing(store: ObjectStore) -> None:
    with pytest.raises(NotFound) as raised:
        await store.get("ns", "nope")

    assert raised.value.code == 404
    assert raised.value.message == 'podnotifiers.notifier.x-k8s.io "nope" not found'


async def test_size_cap(store: ObjectStore) -> None:
    with pytest.raises(TooLarge) as raised:
        await store.create(record("big", output="x" * 5000))
    await store.create(record("small"))

    def grow(obj: Object) -> Object:
        obj["status"]["stdout"] = "y" * 5000
        return obj

    with pytest.raises(TooLarge):
        await store.guaranteed_update("ns", "small", grow)

    assert raised.value.code == 413
    assert f"the limit is {MAX_BYTES}" in raised.value.message
    with pytest.raises(NotFound):
        await store.get("ns", "big")
    assert "stdout" not in (await store.get("ns", "small"))["status"]


async def test_a_dry_run_create_makes_the_creates_checks_and_stores_nothing(
        store: ObjectStore) -> None:
    with pytest.raises(TooLarge) as too_large:
        await store.check_create(record("big", output="x" * 5000))
    with pytest.raises(TooLarge) as stored_too_large:
        await store.create(record("big", output="x" * 5000))
    assert too_large.value.message == stored_too_large.value.message
    assert f"the limit is {MAX_BYTES}" in too_large.value.message

    await store.create(record("taken"))
    with pytest.raises(AlreadyExists) as taken:
        await store.check_create(record("taken"))
    assert taken.value.message == 'podnotifiers.notifier.x-k8s.io "taken" already exists'
    with pytest.raises(Invalid):
        await store.check_create({"metadata": {"namespace": "ns"}})
    with pytest.raises(BadRequest):
        await store.check_create({**record("rv"), "metadata": {
            "namespace": "ns", "name": "rv", "resourceVersion": "1"}})

    checked = await store.check_create(record(pod="web-7"))
    assert checked["metadata"]["name"].startswith("web-7-quiesce-")
    assert checked["metadata"]["generateName"] == "web-7-quiesce-"
    assert names((await store.list("ns")).items) == ["taken"]


async def test_the_size_cap_is_one_measure_before_and_after_the_store_stamps(
        store: ObjectStore) -> None:
    """An object just under the cap by the dry run's measure is stored, and just over it is
    not: the dry run and the write measure alike."""
    base = len(json.dumps(record("edge", output=""), separators=(",", ":")))
    stamped = len(',"uid":"","resourceVersion":"","creationTimestamp":""') + 36 + 19 + 20
    fits = record("edge", output="x" * (MAX_BYTES - base - stamped))
    await store.check_create(fits)
    await store.create(fits)
    over = record("edge2", output="x" * (MAX_BYTES - base - stamped + 2))
    with pytest.raises(TooLarge):
        await store.check_create(over)
    with pytest.raises(TooLarge):
        await store.create(over)


async def test_a_dry_run_update_checks_the_size_cap(store: ObjectStore) -> None:
    small = await store.create(record("small"))
    store.check_update(small)
    with pytest.raises(TooLarge):
        store.check_update({**small, "status": {"stdout": "y" * 5000}})


async def test_returned_objects_are_not_shared_with_watchers(store: ObjectStore) -> None:
    start = (await store.list("ns")).resource_version
    watch = await store.watch("ns", resource_version=start)
    created = await store.create(record("a"))
    created["spec"]["podName"] = "changed"

    event = await asyncio.wait_for(anext(watch), 2)
    assert event.object["spec"]["podName"] == "web-0"
    watch.close()


async def test_cancelled_caller_does_not_undo_a_write(store: ObjectStore) -> None:
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


# Updates


async def test_guaranteed_update(store: ObjectStore) -> None:
    created = await store.create(record("a"))

    updated = await store.guaranteed_update("ns", "a", set_phase("Running"))

    assert updated["status"]["phase"] == "Running"
    assert version(updated) > version(created)
    assert await store.get("ns", "a") == updated


async def test_guaranteed_update_keeps_identity(store: ObjectStore) -> None:
    created = await store.create(record("a"))

    def rename(obj: Object) -> Object:
        obj["metadata"].update(name="b", uid="other", creationTimestamp="2000-01-01T00:00:00Z")
        return obj

    updated = await store.guaranteed_update("ns", "a", rename)

    for key in ("name", "namespace", "uid", "creationTimestamp"):
        assert updated["metadata"][key] == created["metadata"][key]


async def test_noop_update_keeps_version(store: ObjectStore) -> None:
    created = await store.create(record("a"))
    watch = await store.watch("ns", resource_version=created["metadata"]["resourceVersion"])

    again = await store.guaranteed_update("ns", "a", lambda obj: obj)

    assert again == created
    assert await nothing_more(watch)
    watch.close()


async def test_guaranteed_update_aborts_on_error(store: ObjectStore) -> None:
    created = await store.create(record("a"))

    def refuse(obj: Object) -> Object:
        raise Conflict("no")

    with pytest.raises(Conflict):
        await store.guaranteed_update("ns", "a", refuse)
    assert await store.get("ns", "a") == created


async def test_update_missing(store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        await store.guaranteed_update("ns", "nope", lambda obj: obj)


async def test_concurrent_guaranteed_updates_all_apply(store: ObjectStore) -> None:
    await store.create(record("a", count=0))

    def bump(obj: Object) -> Object:
        obj["spec"]["count"] += 1
        return obj

    await asyncio.gather(*(store.guaranteed_update("ns", "a", bump) for _ in range(20)))

    assert (await store.get("ns", "a"))["spec"]["count"] == 20


# Deletes and preconditions


async def test_delete_returns_object_at_deletion_version(store: ObjectStore) -> None:
    created = await store.create(record("a"))

    deleted = await store.delete("ns", "a")

    assert version(deleted) > version(created)
    assert deleted["spec"] == created["spec"]
    with pytest.raises(NotFound):
        await store.get("ns", "a")
    with pytest.raises(NotFound):
        await store.delete("ns", "a")
    recreated = await store.create(record("a"))
    assert recreated["metadata"]["uid"] != created["metadata"]["uid"]


async def test_delete_preconditions(store: ObjectStore) -> None:
    created = await store.create(record("a"))
    meta = created["metadata"]

    with pytest.raises(Conflict, match="the object has been modified") as stale:
        await store.delete("ns", "a", resource_version=str(version(created) + 100))
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition: other"):
        await store.delete("ns", "a", uid="other")
    assert stale.value.message.startswith(
        'Operation cannot be fulfilled on podnotifiers.notifier.x-k8s.io "a": ')
    await store.get("ns", "a")
    await store.delete("ns", "a", resource_version=meta["resourceVersion"], uid=meta["uid"])


async def test_delete_collection(store: ObjectStore) -> None:
    for name, pod in [("a", "web-0"), ("b", "web-1"), ("c", "web-0")]:
        await store.create(record(name, pod=pod))
    await store.create(record("d", namespace="ns2"))

    deleted = await store.delete_collection("ns", field_selector="spec.podName=web-0")

    assert names(deleted) == ["a", "c"]
    assert version(deleted[0]) < version(deleted[1])
    remaining = await store.list(None)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in remaining.items] == [
        ("ns", "b"),
        ("ns2", "d"),
    ]


# resourceVersions


async def test_resource_version_is_global_and_increasing(backend: Backend) -> None:
    notifiers = backend.store(PODNOTIFIERS)
    notifications = backend.store(NOTIFICATIONS)
    first = await notifiers.create(record("a"))
    second = await notifications.create({"metadata": {"namespace": "ns", "name": "a"},
                                         "spec": {"notifier": "flush"}})
    third = await notifiers.delete("ns", "a")

    assert version(first) < version(second) < version(third)
    assert await notifications.get("ns", "a") == second
    with pytest.raises(NotFound):
        await notifications.get("ns", "missing")


async def test_failed_writes_leave_no_trace(store: ObjectStore) -> None:
    first = await store.create(record("a"))
    with pytest.raises(AlreadyExists):
        await store.create(record("a"))
    with pytest.raises(TooLarge):
        await store.guaranteed_update("ns", "a", lambda o: {**o, "spec": {"x": "y" * MAX_BYTES}})
    second = await store.create(record("b"))

    watch = await store.watch("ns", resource_version=first["metadata"]["resourceVersion"])
    assert summary(await take(watch, 1)) == [("ADDED", "b", version(second))]
    assert await store.get("ns", "a") == first
    watch.close()


# Lists


async def test_list_filters_by_namespace_and_selectors(store: ObjectStore) -> None:
    await store.create(record("a", labels={"app": "db"}, phase="Running"))
    await store.create(record("b", labels={"app": "web"}, notifier="flush"))
    await store.create(record("c", namespace="ns2", labels={"app": "db"}, pod="web-1"))

    assert names((await store.list("ns")).items) == ["a", "b"]
    assert names((await store.list(None, label_selector="app=db")).items) == ["a", "c"]
    assert names((await store.list("ns", label_selector="app in (db,web),app!=web")).items) == ["a"]
    assert names((await store.list(None, field_selector="status.phase!=Running")).items) == [
        "b", "c"]
    assert names((await store.list(None, field_selector="metadata.namespace=ns2")).items) == ["c"]
    assert names((await store.list(None, field_selector="spec.podName=web-1")).items) == ["c"]
    assert names((await store.list(None, field_selector="spec.notifier=flush")).items) == ["b"]
    with pytest.raises(InvalidSelector):
        await store.list("ns", field_selector="spec.other=x")
    with pytest.raises(InvalidSelector):
        await store.list("ns", label_selector="app in (")


async def test_field_selectors_compare_the_text_of_any_value(store: ObjectStore) -> None:
    await store.create({"metadata": {"namespace": "ns", "name": "no-phase"},
                        "spec": {"podName": "web-0", "notifier": "x"}})
    await store.create({"metadata": {"namespace": "ns", "name": "numeric"},
                        "spec": {"podName": "web-0", "notifier": 5},
                        "status": {"phase": "Running"}})

    assert names((await store.list("ns", field_selector="status.phase=")).items) == ["no-phase"]
    assert names((await store.list("ns", field_selector="spec.notifier=5")).items) == ["numeric"]
    assert names((await store.list("ns", field_selector="status.phase!=Running")).items) == [
        "no-phase"]
    assert names((await store.list("ns", field_selector="metadata.name!=numeric")).items) == [
        "no-phase"]
    assert names(await store.delete_collection("ns", field_selector="spec.notifier=5")) == [
        "numeric"]


async def test_notification_selectable_fields(backend: Backend) -> None:
    notifications = backend.store(NOTIFICATIONS)
    for name, notifier, phase in [("a", "quiesce", "Running"), ("b", "flush", "Pending")]:
        await notifications.create({"metadata": {"namespace": "ns", "name": name},
                                    "spec": {"notifier": notifier}, "status": {"phase": phase}})

    assert names((await notifications.list("ns", field_selector="spec.notifier=flush")).items
                 ) == ["b"]
    assert names((await notifications.list("ns", field_selector="status.phase=Running")).items
                 ) == ["a"]
    with pytest.raises(InvalidSelector, match='"spec.podName" is not a known field selector'):
        await notifications.list("ns", field_selector="spec.podName=x")


async def test_list_resource_version_is_the_latest(store: ObjectStore) -> None:
    await store.create(record("a"))
    await store.create(record("b"))
    deleted = await store.delete("ns", "b")

    listed = await store.list("ns")
    watch = await store.watch("ns", resource_version=listed.resource_version)
    c = await store.create(record("c"))

    assert int(listed.resource_version) >= version(deleted)
    assert summary(await take(watch, 1)) == [("ADDED", "c", version(c))]  # nothing before
    watch.close()


async def test_pagination_is_a_consistent_snapshot(store: ObjectStore) -> None:
    for i in range(7):
        await store.create(record(f"r{i}", phase="Running"))

    first = await store.list("ns", limit=3)
    # Writes between pages: a delete of a later item, an update, and a new item.
    await store.delete("ns", "r5")
    await store.guaranteed_update("ns", "r4", set_phase("Failed"))
    await store.create(record("r3a"))
    second = await store.list("ns", limit=3, continue_token=first.continue_token)
    third = await store.list("ns", limit=3, continue_token=second.continue_token)

    assert names(first.items) == ["r0", "r1", "r2"]
    assert names(second.items) == ["r3", "r4", "r5"]
    assert second.items[1]["status"]["phase"] == "Running"
    assert names(third.items) == ["r6"]
    assert third.continue_token == ""
    assert first.resource_version == second.resource_version == third.resource_version
    fresh = await store.list("ns")
    assert names(fresh.items) == ["r0", "r1", "r2", "r3", "r3a", "r4", "r6"]


async def test_pagination_with_selectors_and_exact_pages(store: ObjectStore) -> None:
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


async def test_pagination_by_an_indexed_field_is_a_consistent_snapshot(
        store: ObjectStore) -> None:
    """A list selecting on an indexed field (read through the index, not a scan) pages the
    objects as they were at the first page: one that stopped matching since, or was deleted,
    is still there; one that matches only since is not."""
    for i in range(6):
        await store.create(record(f"r{i}", pod="web-0" if i % 2 else "web-1"))

    first = await store.list("ns", limit=1, field_selector="spec.podName=web-0")
    await store.guaranteed_update("ns", "r3", lambda r: {**r, "spec": {**r["spec"],
                                                                      "podName": "web-1"}})
    await store.delete("ns", "r5")
    await store.guaranteed_update("ns", "r2", lambda r: {**r, "spec": {**r["spec"],
                                                                      "podName": "web-0"}})
    rest = await store.list("ns", limit=5, field_selector="spec.podName=web-0",
                            continue_token=first.continue_token)

    assert names(first.items) + names(rest.items) == ["r1", "r3", "r5"]
    assert rest.items[0]["spec"]["podName"] == "web-0"
    fresh = await store.list("ns", field_selector="spec.podName=web-0")
    assert names(fresh.items) == ["r1", "r2"]


async def test_pagination_across_namespaces(store: ObjectStore) -> None:
    expected = []
    for namespace in ("a", "b"):
        for i in range(13):
            expected.append((namespace, f"r{i:02}"))
            await store.create(record(f"r{i:02}", namespace=namespace))

    assert await names_by_pages(store, 4) == expected
    assert len((await store.list(None, label_selector="!missing")).items) == 26


async def test_continue_token_expires_with_history(backend: Backend, store: ObjectStore) -> None:
    for i in range(3):
        await store.create(record(f"r{i}"))
    first = await store.list("ns", limit=1)

    for i in range(backend.history + 5):
        await store.guaranteed_update("ns", "r2", set_phase(f"P{i}"))

    with pytest.raises(Expired) as raised:
        await store.list("ns", limit=1, continue_token=first.continue_token)
    assert raised.value.code == 410
    assert "continue parameter is too old" in raised.value.message


@pytest.mark.parametrize("token", ["garbage!", "eyJydiI6MX0", "bm90IGpzb24"])
async def test_malformed_continue_token(store: ObjectStore, token: str) -> None:
    with pytest.raises(BadRequest, match="continue token"):
        await store.list("ns", limit=1, continue_token=token)


async def test_negative_limit(store: ObjectStore) -> None:
    with pytest.raises(BadRequest, match="limit"):
        await store.list("ns", limit=-1)


# Watches


async def test_watch_from_now_starts_with_current_objects(store: ObjectStore) -> None:
    a = await store.create(record("a"))
    await store.create(record("b"))
    await store.delete("ns", "b")

    watch = await store.watch("ns")
    c = await store.create(record("c"))

    assert summary(await take(watch, 2)) == [("ADDED", "a", version(a)), ("ADDED", "c", version(c))]
    assert await nothing_more(watch)


async def test_watch_from_zero_is_the_same(store: ObjectStore) -> None:
    a = await store.create(record("a"))

    watch = await store.watch("ns", resource_version="0")

    assert summary(await take(watch, 1)) == [("ADDED", "a", version(a))]


async def test_live_events_in_commit_order(store: ObjectStore) -> None:
    watch = await store.watch(None)

    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.create(record("b", namespace="ns2"))
    await store.delete("ns", "a")

    events = await take(watch, 4)
    assert [(t, n) for t, n, _ in summary(events)] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert [version(e.object) for e in events] == sorted({version(e.object) for e in events})
    assert events[1].object["status"]["phase"] == "Running"
    assert events[3].object["status"]["phase"] == "Running"


async def test_concurrent_writers_are_seen_in_resource_version_order(store: ObjectStore) -> None:
    watch = await store.watch(None)

    created = await asyncio.gather(*(store.create(record(f"r{i}")) for i in range(5)))

    versions = [version(e.object) for e in await take(watch, 5)]
    assert versions == sorted(version(obj) for obj in created)


async def test_resume_from_a_resource_version(store: ObjectStore) -> None:
    created = await store.create(record("a"))
    running = await store.guaranteed_update("ns", "a", set_phase("Running"))
    b = await store.create(record("b"))
    gone = await store.delete("ns", "a")

    watch = await store.watch("ns", resource_version=created["metadata"]["resourceVersion"])
    c = await store.create(record("c"))

    events = await take(watch, 4)
    assert summary(events) == [
        ("MODIFIED", "a", version(running)),
        ("ADDED", "b", version(b)),
        ("DELETED", "a", version(gone)),
        ("ADDED", "c", version(c)),
    ]
    assert events[2].object["status"]["phase"] == "Running"
    assert await nothing_more(watch)


async def test_resume_at_the_latest_version_sees_only_new_changes(store: ObjectStore) -> None:
    await store.create(record("a"))
    listed = await store.list("ns")

    watch = await store.watch("ns", resource_version=listed.resource_version)
    b = await store.create(record("b"))

    assert summary(await take(watch, 1)) == [("ADDED", "b", version(b))]


async def test_too_old_resource_version_is_expired(backend: Backend, store: ObjectStore) -> None:
    created = await store.create(record("a"))
    for i in range(backend.history + 10):
        await store.guaranteed_update("ns", "a", set_phase(f"P{i}"))

    with pytest.raises(Expired) as raised:
        await store.watch("ns", resource_version=created["metadata"]["resourceVersion"])

    assert raised.value.code == 410
    assert status_body(raised.value)["reason"] == "Expired"
    assert raised.value.message.startswith(
        f"too old resource version: {created['metadata']['resourceVersion']} (")


async def test_future_resource_version(store: ObjectStore) -> None:
    latest = await store.create(record("a"))

    with pytest.raises(ResourceVersionTooLarge) as raised:
        await store.watch("ns", resource_version=str(version(latest) + 1_000_000))

    assert raised.value.code == 504
    assert raised.value.causes[0].reason == "ResourceVersionTooLarge"


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", "²"])
async def test_malformed_resource_version(store: ObjectStore, text: str) -> None:
    with pytest.raises(BadRequest, match="invalid resource version"):
        await store.watch("ns", resource_version=text)


async def test_slow_watcher_is_closed_with_expired(store: ObjectStore) -> None:
    slow = await store.watch("ns")
    fast = await store.watch("ns")

    fast_events = []
    for i in range(MAX_QUEUED + 1):
        await store.create(record(f"r{i}"))
        fast_events += await take(fast, 1)
    await store.create(record("after"))

    with pytest.raises(Expired, match=f"fell more than {MAX_QUEUED} events behind"):
        await anext(slow)
    with pytest.raises(StopAsyncIteration):
        await anext(slow)
    assert len(fast_events) == MAX_QUEUED + 1
    assert names([e.object for e in await take(fast, 1)]) == ["after"]


async def test_initial_events_do_not_count_against_the_bound(store: ObjectStore) -> None:
    for i in range(MAX_QUEUED + 3):
        await store.create(record(f"r{i}"))

    watch = await store.watch("ns")
    await store.create(record("live"))

    events = await take(watch, MAX_QUEUED + 4)
    assert names([e.object for e in events])[-1] == "live"


async def test_selectors_turn_transitions_into_added_and_deleted(store: ObjectStore) -> None:
    await store.create(record("a"))
    running = await store.watch("ns", field_selector="status.phase=Running")

    started = await store.guaranteed_update("ns", "a", set_phase("Running"))
    changed = await store.guaranteed_update(
        "ns", "a", lambda o: {**o, "spec": {**o["spec"], "x": 1}})
    done = await store.guaranteed_update("ns", "a", set_phase("Succeeded"))
    await store.create(record("b"))

    events = await take(running, 3)
    assert summary(events) == [
        ("ADDED", "a", version(started)),
        ("MODIFIED", "a", version(changed)),
        ("DELETED", "a", version(done)),
    ]
    assert events[2].object["status"]["phase"] == "Running"  # the last state that matched
    assert await nothing_more(running)


async def test_label_and_namespace_filters(store: ObjectStore) -> None:
    watch = await store.watch("ns", label_selector="app=db")

    await store.create(record("web", labels={"app": "web"}))
    await store.create(record("other-ns", namespace="ns2", labels={"app": "db"}))
    await store.create(record("db", labels={"app": "db"}))

    assert names([e.object for e in await take(watch, 1)]) == ["db"]
    assert await nothing_more(watch)


async def test_replayed_history_applies_selectors_too(store: ObjectStore) -> None:
    created = await store.create(record("a"))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    await store.guaranteed_update("ns", "a", set_phase("Failed"))

    watch = await store.watch("ns", resource_version=created["metadata"]["resourceVersion"],
                              field_selector="status.phase=Running")

    assert [(t, n) for t, n, _ in summary(await take(watch, 2))] == [
        ("ADDED", "a"), ("DELETED", "a")]


async def test_watch_bad_selector(store: ObjectStore) -> None:
    with pytest.raises(InvalidSelector):
        await store.watch("ns", field_selector="spec.x=1")


async def test_closing_ends_iteration(store: ObjectStore) -> None:
    watch = await store.watch("ns")
    waiting = asyncio.create_task(anext(watch))
    await asyncio.sleep(0)

    watch.close()

    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 1)
    await store.create(record("a"))
    with pytest.raises(StopAsyncIteration):
        await anext(watch)


async def test_closing_the_store_ends_all_watches(store: ObjectStore) -> None:
    watches = [await store.watch("ns") for _ in range(3)]

    store.close()

    for watch in watches:
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(watch), 1)


async def test_watch_started_between_queued_writes_misses_nothing(backend: Backend) -> None:
    store = backend.store(PODNOTIFIERS, max_queued_events=20)
    before = [asyncio.create_task(store.create(record(f"a{i}"))) for i in range(5)]
    await asyncio.sleep(0.001)  # the first writes queue
    starting = asyncio.create_task(store.watch("ns"))
    await asyncio.sleep(0.001)  # the watch queues behind them
    after = [asyncio.create_task(store.create(record(f"b{i}"))) for i in range(5)]
    created = await asyncio.gather(*before, *after)
    watch = await starting

    events = await take(watch, 10)

    assert sorted(names([e.object for e in events])) == sorted(names(created))
    assert len({version(e.object) for e in events}) == 10
    assert await nothing_more(watch)


# Cohort creates (the generic primitive under the per-pod bound)


FINISHED_ONLY = "status.phase!=Pending,status.phase!=Running,status.phase!=Held"


async def test_cohort_create_under_its_limit_evicts_nothing(store: ObjectStore) -> None:
    for name in "ab":
        await store.create(finished(record(name)))

    await store.create(record("c"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 3, 1))

    assert names((await store.list("ns")).items) == ["a", "b", "c"]


async def test_cohort_create_at_its_limit_evicts_the_oldest_evictable_down_to_the_low_water(
    store: ObjectStore
) -> None:
    """Limit 4, low water 2: at 4 members the create leaves 2 (itself included), deleting the
    oldest finished members of the cohort only: not the unfinished one, not another pod's."""
    for name, pod, done in [("a", "web-0", True), ("b", "web-1", True), ("c", "web-0", False),
                            ("d", "web-0", True), ("e", "web-0", True)]:
        await store.create(finished(record(name, pod=pod)) if done else record(name, pod=pod))
    cohort = Cohort("spec.podName=web-0", FINISHED_ONLY, 4, 2)

    created = await store.create(record("f"), cohort=cohort)

    assert names((await store.list("ns")).items) == ["b", "c", "f"]
    assert version(created) > version(await store.get("ns", "c"))
    await store.create(record("g"), cohort=cohort)  # room made for limit - low water
    assert names((await store.list("ns")).items) == ["b", "c", "f", "g"]


async def test_cohort_create_keeps_what_it_cannot_evict(store: ObjectStore) -> None:
    for name in "abc":
        await store.create(record(name))

    await store.create(record("d"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 2, 1))

    assert names((await store.list("ns")).items) == ["a", "b", "c", "d"]


def test_a_cohort_needs_its_low_water_between_one_and_its_limit() -> None:
    for limit, low_water in [(3, 0), (3, 4)]:
        with pytest.raises(ValueError, match="low_water"):
            Cohort("spec.podName=web-0", FINISHED_ONLY, limit, low_water)


def refuse(members: list[Object]) -> None:
    raise Conflict("refused", resource=PODNOTIFIERS, name="")


async def test_a_cohort_admits_among_the_members_created_before(store: ObjectStore) -> None:
    """``admit`` gets the cohort's members created before the new object, oldest first, as
    they are now (not another pod's, not the new one)."""
    await store.create(record("a"))
    await store.create(record("b", pod="web-1"))
    await store.create(finished(record("c")))
    await store.guaranteed_update("ns", "a", set_phase("Running"))
    seen: list[list[tuple[str, str]]] = []

    created = await store.create(record("d"), cohort=Cohort(
        "spec.podName=web-0", FINISHED_ONLY, 10, 5, admit=lambda members: seen.append(
            [(m["metadata"]["name"], m["status"]["phase"]) for m in members])))

    assert seen == [[("a", "Running"), ("c", "Succeeded")]]
    assert await store.get("ns", "d") == created


async def test_a_refused_cohort_create_stores_nothing(store: ObjectStore) -> None:
    await store.create(finished(record("a")))
    listed = await store.list("ns")
    watch = await store.watch("ns", resource_version=listed.resource_version)

    with pytest.raises(Conflict, match="refused"):
        await store.create(record("b"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 9, 1,
                                                      admit=refuse))
    with pytest.raises(Conflict, match="refused"):
        await store.create(record(), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 9, 1,
                                                   admit=refuse))

    assert names((await store.list("ns")).items) == ["a"]
    with pytest.raises(NotFound):
        await store.get("ns", "b")
    await store.create(record("c"))
    events = [await asyncio.wait_for(anext(watch), 2)]
    while events[-1].object["metadata"]["name"] != "c":
        events.append(await asyncio.wait_for(anext(watch), 2))
    # Kubernetes has each refused object created, then deleted; SQLite never writes it
    added = [e.object["metadata"]["name"] for e in events[:-1] if e.type.value == "ADDED"]
    deleted = [e.object["metadata"]["name"] for e in events[:-1] if e.type.value == "DELETED"]
    assert added == deleted and len(events) - 1 == 2 * len(added), summary(events)
    watch.close()


async def test_two_creates_into_a_cohort_at_once_are_decided_in_one_order(
    store: ObjectStore,
) -> None:
    """Whichever is created first, the other one's ``admit`` sees it, and only one way."""
    seen: dict[str, list[str]] = {}

    def admitting(name: str) -> Cohort:
        return Cohort("spec.podName=web-0", FINISHED_ONLY, 10, 5, admit=lambda members: (
            seen.__setitem__(name, names(members))))

    for attempt in range(5):
        first, second = f"x{attempt}", f"y{attempt}"
        seen.clear()
        await asyncio.gather(store.create(record(first), cohort=admitting(first)),
                             store.create(record(second), cohort=admitting(second)))
        earlier = {name for name in (first, second) if name in seen[
            second if name == first else first]}
        assert len(earlier) == 1, seen
        (head,) = earlier
        later = second if head == first else first
        assert head in seen[later] and later not in seen[head], seen


# The PodNotifier strategy on the backend


async def pod_records(store: ObjectStore, pod: str) -> list[str]:
    return names((await store.list("ns", field_selector=f"spec.podName={pod}")).items)


async def test_bounded_create_evicts_oldest_finished_in_a_batch(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    """K 4: a create that finds 4 records evicts down to half of K, the new one included, so
    the next K // 2 creates evict nothing."""
    for i in range(4):
        await store.create(finished(record(f"old{i}", notifier=f"n{i}")))
    await store.create(record("other-pod", pod="web-1", notifier="n9"))

    created = await records.create_bounded(record(notifier="n9"), max_per_pod=4)

    assert created["metadata"]["name"].startswith("web-0-n9-")
    kept = await pod_records(store, "web-0")
    assert kept[:1] == ["old3"] and len(kept) == 2
    assert len(await pod_records(store, "web-1")) == 1
    await records.create_bounded(record(notifier="n8"), max_per_pod=4)
    assert len(await pod_records(store, "web-0")) == 3


async def test_a_finished_record_never_changes_but_its_metadata(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    """Whoever writes: a status or spec change of a finished record is refused (409, naming
    the phase); labels may still change."""
    await store.create(record("run", phase="Running"))

    await records.guaranteed_update("ns", "run", lambda r: finished(r, "Failed"))
    for change in (set_phase("Succeeded"), lambda r: {**r, "spec": {**r["spec"], "x": 1}}):
        with pytest.raises(Finished) as refused:
            await records.guaranteed_update("ns", "run", change)
        assert refused.value.code == 409 and "phase Failed" in str(refused.value)

    labelled = await records.guaranteed_update(
        "ns", "run", lambda r: {**r, "metadata": {**r["metadata"], "labels": {"kept": "yes"}}})
    assert labelled["metadata"]["labels"] == {"kept": "yes"}
    assert labelled["status"]["phase"] == "Failed"
    assert (await store.get("ns", "run"))["status"]["phase"] == "Failed"


def test_eviction_keeps_half_of_k_rounded_up() -> None:
    assert [eviction_low_water(k) for k in (1, 2, 3, 4, 10, 11)] == [1, 1, 2, 2, 5, 6]


async def test_bounded_create_refuses_when_all_are_unfinished(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    await store.create(finished(record("done", notifier="a")))
    await records.create_bounded(record("busy1", notifier="b", phase="Running"), max_per_pod=9)
    await records.create_bounded(record("busy2", notifier="c"), max_per_pod=9)

    with pytest.raises(TooManyRequests) as raised:
        await records.create_bounded(record(notifier="d"), max_per_pod=2)

    assert raised.value.code == 429
    assert raised.value.message == (
        'pod "web-0" has 2 or more unfinished notifier records, the most it may keep; retry '
        "when one of them finishes")
    assert status_body(raised.value)["details"]["retryAfterSeconds"] == 5
    assert len(await pod_records(store, "web-0")) == 3


async def test_bounded_create_refuses_the_same_notifier_twice(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    await records.create_bounded(record("first", notifier="quiesce", phase="Running"),
                                 max_per_pod=10)
    await records.create_bounded(record("elsewhere", pod="web-1", notifier="quiesce",
                                        phase="Running"), max_per_pod=10)

    with pytest.raises(Conflict) as raised:
        await records.create_bounded(record(notifier="quiesce"), max_per_pod=10)
    assert raised.value.message == (
        'notifier "quiesce" is already running on pod "web-0" '
        '(podnotifiers.notifier.x-k8s.io "first"); wait for it to finish')
    assert raised.value.name == "first"

    await records.guaranteed_update("ns", "first", finished)  # counts no more
    await records.create_bounded(record(notifier="quiesce"), max_per_pod=10)
    assert len(await pod_records(store, "web-0")) == 2


async def test_bounded_create_is_atomic_under_concurrency(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    results = await asyncio.gather(
        *(records.create_bounded(record(notifier=f"n{i}"), max_per_pod=4) for i in range(10)),
        return_exceptions=True,
    )

    created = [r for r in results if not isinstance(r, BaseException)]
    assert len(created) == 4
    assert all(isinstance(r, TooManyRequests) for r in results if isinstance(r, BaseException))
    assert len(await pod_records(store, "web-0")) == 4


async def test_a_dry_run_bounded_create_refuses_as_the_create_and_writes_nothing(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    await records.create_bounded(record("first", notifier="quiesce", phase="Running"),
                                 max_per_pod=2)
    with pytest.raises(Conflict) as conflict:
        await records.check_bounded(record(notifier="quiesce"), max_per_pod=2)
    assert conflict.value.name == "first"
    await records.create_bounded(record("second", notifier="b"), max_per_pod=2)
    with pytest.raises(TooManyRequests):
        await records.check_bounded(record(notifier="c"), max_per_pod=2)
    with pytest.raises(TooLarge):
        await records.check_bounded(record(pod="web-1", output="x" * 5000), max_per_pod=2)
    with pytest.raises(AlreadyExists):
        await records.check_bounded(record("first", pod="web-1"), max_per_pod=2)

    checked = await records.check_bounded(record(pod="web-1"), max_per_pod=2)
    assert checked["metadata"]["name"].startswith("web-1-quiesce-")
    assert runner(checked) == "replica-0"  # as it would be created
    assert await pod_records(store, "web-1") == []
    assert names((await store.list(None)).items) == ["first", "second"]


async def test_a_bounded_create_names_the_replica_that_runs_it(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    created = await records.create_bounded(record("a", notifier="a"), max_per_pod=2)

    assert created["status"] == {"phase": "Pending", "replica": "replica-0"}
    assert runner(await store.get("ns", "a")) == "replica-0"
    assert runner(await store.create(record("legacy", notifier="b"))) == ""


async def test_a_refused_bounded_create_leaves_no_record(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    """Refused on the pod's current records (nothing is written), or among the records created
    before it when two creates race (the refused record is not kept)."""
    await records.create_bounded(record("first", notifier="quiesce"), max_per_pod=2)
    with pytest.raises(Conflict):
        await records.create_bounded(record("again", notifier="quiesce"), max_per_pod=2)
    await records.create_bounded(record("second", notifier="flush"), max_per_pod=2)
    with pytest.raises(TooManyRequests):
        await records.create_bounded(record("third", notifier="drain"), max_per_pod=2)
    assert await pod_records(store, "web-0") == ["first", "second"]

    results = await asyncio.gather(
        *(records.create_bounded(record(f"race{i}", pod="web-1", notifier="quiesce"),
                                 max_per_pod=2) for i in range(4)), return_exceptions=True)

    created = [r for r in results if isinstance(r, dict)]
    assert len(created) == 1
    assert all(isinstance(r, Conflict) for r in results if not isinstance(r, dict)), results
    assert await pod_records(store, "web-1") == names(created)
    assert names(await records.unfinished()) == ["first", *names(created), "second"]


async def test_bounded_create_requires_pod_and_notifier(records: PodNotifierStore) -> None:
    with pytest.raises(Invalid) as raised:
        await records.create_bounded({"metadata": {"namespace": "ns", "name": "x"}},
                                     max_per_pod=1)

    assert [c.field for c in raised.value.causes] == ["spec.podName", "spec.notifier"]


async def test_collect_deletes_the_expired_records(store: ObjectStore,
                                                    records: PodNotifierStore) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    await store.create(finished(record("old", notifier="a"), at=now - timedelta(seconds=120)))
    await store.create(finished(record("recent", notifier="b"), at=now - timedelta(seconds=30)))
    await store.create(finished(record("short-ttl", notifier="c", ttlSecondsAfterFinished=10),
                                at=now - timedelta(seconds=30)))
    await store.create(record("running", notifier="d", phase="Running"))
    await store.create(
        finished(record("failed", notifier="e"), phase="Failed", at=now - timedelta(seconds=60)))
    await store.create(record("no-completion", notifier="f", phase="Succeeded"))

    expired, trimmed = await records.collect(now, default_ttl_seconds=60, max_per_pod=10)

    assert sorted(names(expired)) == ["failed", "old", "short-ttl"]
    assert trimmed == 0
    assert names((await store.list("ns")).items) == ["no-completion", "recent", "running"]


async def test_collect_trims_what_did_not_expire_in_the_same_scan(
        store: ObjectStore, records: PodNotifierStore) -> None:
    """web-0 has four finished records, one expired, and a running one: with K = 2 the expired
    one goes, then the two oldest finished ones of those left (the running one counts toward
    K); web-1 is within K."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    for index, age in enumerate((300, 50, 40, 30)):
        await store.create(finished(record(f"w0-{index}", notifier=f"n{index}"),
                                    at=now - timedelta(seconds=age)))
    await store.create(record("w0-running", notifier="r", phase="Running"))
    await store.create(finished(record("w1-0", pod="web-1"), at=now - timedelta(seconds=10)))

    expired, trimmed = await records.collect(now, default_ttl_seconds=60, max_per_pod=2)

    assert (names(expired), trimmed) == (["w0-0"], 2)
    assert names((await store.list("ns")).items) == ["w0-3", "w0-running", "w1-0"]


async def test_unfinished(store: ObjectStore, records: PodNotifierStore) -> None:
    await store.create(record("p", notifier="a", phase="Pending"))
    await store.create(record("r", notifier="b", namespace="ns2", phase="Running"))
    await store.create(finished(record("s", notifier="c")))
    await store.create(finished(record("f", notifier="d"), phase="Failed"))

    assert names(await records.unfinished()) == ["p", "r"]


async def test_podnotifier_store_passes_generic_operations_through(
    store: ObjectStore, records: PodNotifierStore
) -> None:
    watch = await records.watch("ns")
    created = await records.create(record("a"))
    updated = await records.guaranteed_update("ns", "a", set_phase("Running"))
    listed = await records.list("ns", field_selector="status.phase=Running")
    deleted = await records.delete("ns", "a")

    assert await store.list("ns") == await records.list("ns")
    assert names(listed.items) == ["a"]
    assert [e.type.value for e in await take(watch, 3)] == ["ADDED", "MODIFIED", "DELETED"]
    assert version(created) < version(updated) < version(deleted)
    await records.create(record("b"))
    assert names(await records.delete_collection("ns")) == ["b"]
    with pytest.raises(NotFound):
        await records.get("ns", "b")
    records.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(watch), 1)
