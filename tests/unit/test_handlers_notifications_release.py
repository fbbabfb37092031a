"""The release action (POST .../notifications/{name}/release), authorized as a held record's
release is (create pods/notify on every pod of the window), and the create-time check of a
window without a release notifier (only a held quiesce may go without one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Decision
from apiserver.handlers import notifications
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import NOTIFICATIONS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll
from tests.unit.test_handlers_notifications_create import DB_NOTIFIERS, PATH, Pods, pod

HELD = {"db": [{"name": "quiesce", "action": {"exec": {"command": ["sh", "-c", "x"]}},
                "hold": {"maxHoldSeconds": 60}},
               {"name": "unquiesce", "action": {"signal": "SIGHUP"}}]}


@dataclass
class Fanout:
    requests: list[tuple[str, str]] = field(default_factory=list)
    recorded: bool = True
    scope: list[str] = field(default_factory=list)

    async def begin(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        self.scope = [name for name, _ in pods]

    async def scope_pods(self, notification: dict[str, Any]) -> list[str] | None:
        return list(self.scope) if self.recorded else None

    async def deleted(self, uid: str) -> None:
        pass

    async def request_release(self, notification: dict[str, Any], at: str) -> bool:
        self.requests.append((notification["metadata"]["name"], at))
        return self.recorded


class NotifyDenied(AllowAll):
    """Allows everything but create pods/notify on the pods named in `denied`."""

    def __init__(self) -> None:
        super().__init__()
        self.denied: set[str] = set()

    async def authorize(self, user: UserInfo, attributes: Any) -> Decision:
        await super().authorize(user, attributes)
        if (attributes.resource, attributes.subresource) == ("pods", "notify") and (
                attributes.name in self.denied):
            return Decision(False, "no RBAC policy matched")
        return Decision(True)


@dataclass
class Served:
    client: httpx.AsyncClient
    store: SqliteObjectStore
    kube: Pods
    fanout: Fanout
    access: NotifyDenied

    async def create(self, **spec: Any) -> httpx.Response:
        return await self.client.post(PATH, json={
            "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "snap"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "quiesce", **spec}})

    async def release(self, name: str = "snap", query: str = "") -> httpx.Response:
        return await self.client.post(f"{PATH}/{name}/release{query}", json={})


@pytest.fixture
async def served(database: SqliteDatabase) -> AsyncIterator[Served]:
    store, kube, fanout, access = (SqliteObjectStore(database, NOTIFICATIONS), Pods(), Fanout(),
                                   NotifyDenied())
    router = APIRouter()
    router.include_router(notifications.router(  # type: ignore[arg-type]
        store, fanout, kube, access, Watches(), max_parallelism=10, max_timeout_seconds=60,
        max_hold_seconds=3600))
    app = create_app(authenticator=access, authorizer=access,  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://notifier.test") as client:
        yield Served(client, store, kube, fanout, access)


async def test_the_release_is_stored_and_answered_with_the_notification(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    assert (await served.create(release={"notifier": "unquiesce"})).status_code == 201
    answer = await served.release()
    assert answer.status_code == 200, answer.text
    requested = answer.json()["status"]["window"]["releaseRequestedTime"]
    assert served.fanout.requests == [("snap", requested)]
    stored = await served.store.get("prod", "snap")
    assert stored["status"]["window"]["releaseRequestedTime"] == requested
    again = await served.release()  # idempotent: the first request's time stands
    assert again.json()["status"]["window"]["releaseRequestedTime"] == requested


async def test_a_dry_run_release_stores_nothing(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    await served.create(release={"notifier": "unquiesce"})
    answer = await served.release(query="?dryRun=All")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["window"]["releaseRequestedTime"]
    assert served.fanout.requests == []
    assert "window" not in (await served.store.get("prod", "snap"))["status"]


async def test_releasing_what_cannot_be_released(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    missing = await served.release("nope")
    assert missing.status_code == 404, missing.text
    await served.create()
    plain = await served.release()
    assert plain.status_code == 409, plain.text
    assert "has no spec.release" in plain.json()["message"]
    await served.store.delete("prod", "snap")
    served.fanout.recorded = False
    await served.create(release={"notifier": "unquiesce"})
    unrecorded = await served.release()
    assert unrecorded.status_code == 409, unrecorded.text
    assert "no recorded run" in unrecorded.json()["message"]


async def test_releasing_needs_create_pods_notify_on_every_pod_of_the_window(
        served: Served) -> None:
    served.kube.pods = [pod(f"db-{i}", {"app": "db"}, DB_NOTIFIERS) for i in range(12)]
    assert (await served.create(release={"notifier": "unquiesce"})).status_code == 201
    served.access.denied = {"", "db-10"}  # not every pod: each is asked by name
    served.access.asked.clear()
    for query in ("", "?dryRun=All"):
        refused = await served.release(query=query)
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"] == (
            'notifications.notifier.x-k8s.io "snap" is forbidden: releasing a quiesce window '
            'needs create pods/notify on its pod "db-10": User "alice" cannot create resource '
            '"pods/notify" in API group "notifier.x-k8s.io" in the namespace "prod": no RBAC '
            "policy matched")
    assert served.fanout.requests == []
    assert "window" not in (await served.store.get("prod", "snap"))["status"]
    asked = [(a.verb, a.resource, a.subresource, a.namespace, a.name)
             for a in served.access.asked if a.subresource == "notify"]
    assert asked[:13] == [("create", "pods", "notify", "prod", name)
                          for name in ["", *(f"db-{i}" for i in range(12))]]
    served.access.denied = set()
    served.access.asked.clear()
    assert (await served.release()).status_code == 200
    # allowed on every pod of the namespace: no pod is asked by name
    assert [a.name for a in served.access.asked if a.subresource == "notify"] == [""]


async def test_a_finished_window_is_answered_as_it_is_only_to_who_may_release_it(
        served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    await served.create(release={"notifier": "unquiesce"})
    await served.store.guaranteed_update("prod", "snap", lambda obj: {
        **obj, "status": {**obj["status"], "phase": "Succeeded"}})
    served.access.denied = {"", "db-0"}
    assert (await served.release()).status_code == 403
    served.access.denied = set()
    answer = await served.release()
    assert answer.status_code == 200 and answer.json()["status"]["phase"] == "Succeeded"


async def test_a_dry_run_release_of_an_unrecorded_run_is_refused_as_the_real_one(
        served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    served.fanout.recorded = False
    await served.create(release={"notifier": "unquiesce"})
    for query in ("", "?dryRun=All"):
        answer = await served.release(query=query)
        assert answer.status_code == 409, answer.text
        assert "no recorded run" in answer.json()["message"]


async def test_a_window_without_a_release_notifier_needs_held_pods(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, HELD), pod("db-1", {"app": "db"},
                                                              DB_NOTIFIERS)]
    refused = await served.create(release={"afterSeconds": 10})
    assert refused.status_code == 422, refused.text
    (cause,) = refused.json()["details"]["causes"]
    assert cause["field"] == "spec.release.notifier"
    assert 'notifier "quiesce" is not held (no hold in its declaration) in pods db-1' in (
        cause["message"])
    served.kube.pods = served.kube.pods[:1]
    assert (await served.create(release={"afterSeconds": 10})).status_code == 201
