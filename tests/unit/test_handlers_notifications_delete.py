"""Deleting a Notification stops its fan-out; a dry-run delete changes nothing, the fan-out
included (it used to stop and roll back the run)."""

from __future__ import annotations

from collections.abc import AsyncIterator

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

PATH = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/notifications/snap"


class Fanout:
    """Records which Notifications' fan-outs were told that their Notification is gone."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def deleted(self, uid: str) -> None:
        self.stopped.append(uid)


@pytest.fixture
async def served(database: SqliteDatabase) -> AsyncIterator[tuple[httpx.AsyncClient, str,
                                                                  Fanout]]:
    store = SqliteObjectStore(database, NOTIFICATIONS)
    created = await store.create({
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
        "metadata": {"namespace": "ns", "name": "snap"}, "spec": {"notifier": "quiesce"},
        "status": {"phase": "Running"}})
    fanout, access = Fanout(), AllowAll()
    router = APIRouter()
    router.include_router(notifications.router(  # type: ignore[arg-type]
        store, fanout, None, access, Watches(), max_parallelism=1,
        max_timeout_seconds=1, max_hold_seconds=3600))
    app = create_app(authenticator=access, authorizer=access,  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://notifier.test") as client:
        yield client, created["metadata"]["uid"], fanout


async def test_a_dry_run_delete_leaves_the_fanout_running(served) -> None:
    client, _, fanout = served
    assert (await client.delete(f"{PATH}?dryRun=All")).status_code == 200
    assert (await client.get(PATH)).status_code == 200
    assert fanout.stopped == []


async def test_a_delete_stops_the_fanout_of_that_notification(served) -> None:
    client, uid, fanout = served
    assert (await client.delete(PATH)).status_code == 200
    assert (await client.get(PATH)).status_code == 404
    assert fanout.stopped == [uid]
