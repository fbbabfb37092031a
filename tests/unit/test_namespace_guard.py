"""The namespace lifecycle of stored objects (``registry.namespace_guard``): creates refused in a
missing (404) or terminating (403) namespace as NamespaceLifecycle refuses them, everything else
passed through, and the collector that deletes what deleted namespaces left behind."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from apiserver import errors
from apiserver.registry import paging
from apiserver.registry.errors import TooLarge
from apiserver.registry.namespace_guard import (
    NamespaceGuardedStore,
    collect_deleted_namespaces,
    collect_forever,
)
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import Object


@dataclass
class FakeNamespaces:
    """``Namespaces`` from a dict: namespace -> terminating; a missing one does not exist."""

    known: dict[str, bool] = field(default_factory=dict)
    synced: bool = True
    checked: list[str] = field(default_factory=list)

    async def check_open(self, namespace: str) -> None:
        self.checked.append(namespace)
        if namespace not in self.known:
            raise errors.not_found("namespaces", "", namespace)
        if self.known[namespace]:
            raise errors.Forbidden(f"unable to create new content in namespace {namespace} "
                                   "because it is being terminated")

    async def gone(self, namespace: str) -> bool:
        return self.synced and namespace not in self.known


def record(name: str, namespace: str = "open") -> Object:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"podName": "web-0", "notifier": "quiesce"}, "status": {"phase": "Pending"}}


def keys(objects: list[Object]) -> list[tuple[str, str]]:
    return sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects)


@pytest.fixture
def namespaces() -> FakeNamespaces:
    return FakeNamespaces({"open": False, "closing": True})


@pytest.fixture
async def inner(database: SqliteDatabase) -> AsyncIterator[SqliteObjectStore]:
    store = SqliteObjectStore(database, PODNOTIFIERS)
    yield store
    store.close()


@pytest.fixture
def guarded(inner: SqliteObjectStore, namespaces: FakeNamespaces) -> NamespaceGuardedStore:
    return NamespaceGuardedStore(inner, namespaces)


async def test_a_create_in_an_open_namespace_is_stored(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore,
        namespaces: FakeNamespaces) -> None:
    created = await guarded.create(record("a"))

    assert created["metadata"]["uid"]
    assert await inner.get("open", "a") == created
    assert namespaces.checked == ["open"]


@pytest.mark.parametrize(("namespace", "error", "code", "words"), [
    ("missing", errors.NotFound, 404, 'namespaces "missing" not found'),
    ("closing", errors.Forbidden, 403, "because it is being terminated"),
])
@pytest.mark.parametrize("dry_run", [False, True], ids=["create", "check_create"])
async def test_a_create_in_a_missing_or_terminating_namespace_is_refused(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore, namespace: str,
        error: type[errors.APIError], code: int, words: str, dry_run: bool) -> None:
    obj = record("a", namespace)

    with pytest.raises(error) as raised:
        await (guarded.check_create(obj) if dry_run else guarded.create(obj))

    assert raised.value.code == code
    assert words in raised.value.message
    assert (await inner.list(None)).items == []


async def test_the_namespace_is_checked_before_the_inner_checks(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore) -> None:
    """A name taken in a terminating namespace is refused as terminating, not as taken (an
    admission refusal, as in kube-apiserver, comes before the store is asked)."""
    await inner.create(record("a", "closing"))

    with pytest.raises(errors.Forbidden):
        await guarded.create(record("a", "closing"))


async def test_a_dry_run_create_in_an_open_namespace_stores_nothing(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore) -> None:
    checked = await guarded.check_create(record("a"))

    assert checked["metadata"]["name"] == "a"
    assert (await inner.list(None)).items == []


async def test_objects_of_a_terminating_namespace_can_still_be_read_changed_and_deleted(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore,
        namespaces: FakeNamespaces) -> None:
    """The namespace controller deletes a terminating namespace's objects, and runs in it go
    on: only creates are refused."""
    await inner.create(record("a", "closing"))
    await inner.create(record("b", "closing"))

    def running(obj: Object) -> Object:
        obj["status"]["phase"] = "Running"
        return obj

    updated = await guarded.guaranteed_update("closing", "a", running)
    assert updated["status"]["phase"] == "Running"
    assert (await guarded.get("closing", "a"))["status"]["phase"] == "Running"
    assert keys((await guarded.list("closing")).items) == [("closing", "a"), ("closing", "b")]
    await guarded.delete("closing", "a")
    assert keys(await guarded.delete_collection("closing")) == [("closing", "b")]
    assert (await inner.list(None)).items == []
    assert namespaces.checked == []


async def test_a_watch_passes_through(guarded: NamespaceGuardedStore) -> None:
    created = await guarded.create(record("a"))
    watch = await guarded.watch("open")
    try:
        async with asyncio.timeout(5):
            event = await anext(aiter(watch))
        assert event.object["metadata"]["uid"] == created["metadata"]["uid"]
    finally:
        watch.close()


async def test_the_collector_deletes_only_the_gone_namespaces_objects(
        inner: SqliteObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "ALL_OBJECTS_PAGE", 2)  # across pages
    for namespace, name in [("kept", "a"), ("gone", "a"), ("gone", "b"), ("gone", "c"),
                            ("closing", "a"), ("also-gone", "x"), ("kept", "b")]:
        await inner.create(record(name, namespace))
    namespaces = FakeNamespaces({"kept": False, "closing": True})

    deleted = await collect_deleted_namespaces(inner, namespaces)

    assert deleted == 4
    assert keys((await inner.list(None)).items) == [
        ("closing", "a"), ("kept", "a"), ("kept", "b")]
    assert await collect_deleted_namespaces(inner, namespaces) == 0


async def test_the_collector_deletes_nothing_before_the_namespaces_are_known(
        inner: SqliteObjectStore) -> None:
    await inner.create(record("a", "unknown"))

    assert await collect_deleted_namespaces(inner, FakeNamespaces(synced=False)) == 0
    assert keys((await inner.list(None)).items) == [("unknown", "a")]


async def test_the_collector_retries_after_a_failure(
        inner: SqliteObjectStore, caplog: pytest.LogCaptureFixture) -> None:
    await inner.create(record("a", "gone"))
    failures = [RuntimeError("namespaces unavailable")]

    class Flaky(FakeNamespaces):
        async def gone(self, namespace: str) -> bool:
            if failures:
                raise failures.pop()
            return await super().gone(namespace)

    with caplog.at_level(logging.INFO, logger="apiserver.registry.namespace_guard"):
        task = asyncio.create_task(collect_forever(inner, Flaky(), interval=0.01))
        try:
            async with asyncio.timeout(5):
                while (await inner.list(None)).items:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.ERROR, "collecting deleted namespaces' objects failed; retrying") in messages
    [info] = [r for r in caplog.records if r.levelno == logging.INFO]
    assert info.getMessage() == "deleted the objects of deleted namespaces"
    assert (info.resource, info.deleted) == ("podnotifiers", 1)


def test_the_guard_serves_the_inner_stores_resource(
        guarded: NamespaceGuardedStore, inner: SqliteObjectStore) -> None:
    assert guarded.resource is inner.resource
    assert guarded.max_object_bytes == inner.max_object_bytes
    big: dict[str, Any] = {**record("a"), "spec": {"x": "y" * inner.max_object_bytes}}
    with pytest.raises(TooLarge):
        guarded.check_update(big)
