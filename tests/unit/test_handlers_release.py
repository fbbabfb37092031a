"""POST .../podnotifiers/{name}/release on a real SQLite store, through the real app: the
request is stored on the record, authorized like notify (create pods/notify on the record's
pod), idempotent on a finished record, refused for a record that does not hold, dry-run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Decision
from apiserver.handlers import podnotifiers
from apiserver.notifier.holds import HoldReleases
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll

RECORDS = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers"


class NotifyAccess:
    """Allows create pods/notify on the pods in `allowed`; records what it was asked."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = set(allowed)
        self.asked: list[Any] = []

    async def authorize(self, user: UserInfo, attributes: Any) -> Decision:
        self.asked.append(attributes)
        if attributes.name in self.allowed:
            return Decision(True)
        return Decision(False, "no RBAC policy matched")


def record(name: str, *, phase: str = "Held", held: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "containers": [{"name": "db", "phase": phase}]}
    if held:
        status["maxHoldSeconds"] = 60
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"podName": "db-0", "notifier": "lock"}, "status": status}


@pytest.fixture
def store(database: SqliteDatabase) -> SqliteObjectStore:
    return SqliteObjectStore(database, PODNOTIFIERS)


@pytest.fixture
def access() -> NotifyAccess:
    return NotifyAccess("db-0")


@pytest.fixture
async def client(store: SqliteObjectStore, access: NotifyAccess
                 ) -> AsyncIterator[httpx.AsyncClient]:
    router = APIRouter()
    router.include_router(podnotifiers.release_router(store, HoldReleases(store), access))
    app = create_app(authenticator=AllowAll(), authorizer=AllowAll(), readiness=Readiness(),
                     resource_router=router)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://notifier.test") as c:
        yield c


async def test_a_release_is_stored_on_the_record(client: httpx.AsyncClient,
                                                 store: SqliteObjectStore,
                                                 access: NotifyAccess) -> None:
    await store.create(record("lock-1"))
    answer = await client.post(f"{RECORDS}/lock-1/release")
    assert answer.status_code == 200, answer.text
    status = answer.json()["status"]
    assert status["releaseRequestedBy"] == "alice" and status["releaseRequestedTime"]
    assert (await store.get("ns", "lock-1"))["status"] == status
    (asked,) = access.asked
    assert (asked.verb, asked.resource, asked.subresource, asked.name, asked.namespace) == (
        "create", "pods", "notify", "db-0", "ns")
    again = await client.post(f"{RECORDS}/lock-1/release", json={"any": "object"})
    assert again.status_code == 200 and again.json() == answer.json()


async def test_a_caller_who_may_not_notify_the_pod_is_forbidden(
        client: httpx.AsyncClient, store: SqliteObjectStore, access: NotifyAccess) -> None:
    access.allowed.clear()
    await store.create(record("lock-1"))
    answer = await client.post(f"{RECORDS}/lock-1/release", json={})
    assert answer.status_code == 403, answer.text
    body = answer.json()
    assert body["reason"] == "Forbidden" and body["details"]["name"] == "lock-1"
    assert body["message"] == (
        'podnotifiers.notifier.x-k8s.io "lock-1" is forbidden: releasing a held notifier needs '
        'create pods/notify on its pod "db-0": User "alice" cannot create resource '
        '"pods/notify" in API group "notifier.x-k8s.io" in the namespace "ns": no RBAC policy '
        "matched")
    assert "releaseRequestedTime" not in (await store.get("ns", "lock-1"))["status"]


async def test_a_finished_record_is_answered_unchanged(client: httpx.AsyncClient,
                                                       store: SqliteObjectStore) -> None:
    created = await store.create(record("lock-1", phase="Succeeded"))
    answer = await client.post(f"{RECORDS}/lock-1/release")
    assert answer.status_code == 200 and answer.json() == created


async def test_a_record_that_does_not_hold_is_a_conflict(client: httpx.AsyncClient,
                                                         store: SqliteObjectStore) -> None:
    await store.create(record("quiesce-1", phase="Running", held=False))
    answer = await client.post(f"{RECORDS}/quiesce-1/release")
    assert answer.status_code == 409, answer.text
    assert "not held" in answer.json()["message"]
    missing = await client.post(f"{RECORDS}/missing/release")
    assert missing.status_code == 404, missing.text


async def test_a_dry_run_stores_nothing(client: httpx.AsyncClient,
                                        store: SqliteObjectStore) -> None:
    created = await store.create(record("lock-1", phase="Running"))
    answer = await client.post(f"{RECORDS}/lock-1/release", params={"dryRun": "All"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["releaseRequestedBy"] == "alice"
    assert await store.get("ns", "lock-1") == created


async def test_a_body_that_is_not_an_object_is_refused(client: httpx.AsyncClient,
                                                       store: SqliteObjectStore) -> None:
    await store.create(record("lock-1"))
    answer = await client.post(f"{RECORDS}/lock-1/release", content=b"[1]",
                               headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
