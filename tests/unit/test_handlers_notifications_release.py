"""The release action (POST .../notifications/{name}/release) and the create-time check of a
window without a release notifier (only a held quiesce may go without one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

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

    async def begin(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        pass

    async def deleted(self, uid: str) -> None:
        pass

    async def request_release(self, notification: dict[str, Any], at: str) -> bool:
        self.requests.append((notification["metadata"]["name"], at))
        return self.recorded


@dataclass
class Served:
    client: httpx.AsyncClient
    store: SqliteObjectStore
    kube: Pods
    fanout: Fanout

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
                                   AllowAll())
    router = APIRouter()
    router.include_router(notifications.router(  # type: ignore[arg-type]
        store, fanout, kube, access, Watches(), max_parallelism=10, max_timeout_seconds=60,
        max_hold_seconds=3600))
    app = create_app(authenticator=access, authorizer=access,  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://notifier.test") as client:
        yield Served(client, store, kube, fanout)


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
