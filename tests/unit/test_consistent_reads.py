"""Which public reads are consistent reads: the podnotifiers endpoints (the real app, allow-all
access) on the Kubernetes-API backend against the fake kube-apiserver. A get or list without a
resourceVersion asks kube-apiserver (one metadata LIST, ``KubeObjectStore.consistent_read``)
before reading the cache; ``resourceVersion=0``, a resourceVersion, a continue token and a
watch read the cache alone, as do the server's own reads of the store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter

from apiserver.handlers import podnotifiers
from apiserver.handlers.watch_response import Watches
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll
from tests.support.fake_storage_api import FakeStorageAPI

COLLECTION = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers"


def record(name: str) -> dict:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"podName": "web-0", "notifier": "quiesce"}, "status": {"phase": "Pending"}}


@pytest.fixture
def api() -> FakeStorageAPI:
    return FakeStorageAPI()


@pytest.fixture
async def store(api: FakeStorageAPI) -> AsyncIterator[KubeObjectStore]:
    kube = api.client()
    opened = KubeObjectStore(kube, PODNOTIFIERS, storage_namespace="cn-storage", instance="t")
    for name in ("a", "b"):
        await opened.create(record(name))
    yield opened
    opened.close()
    await kube.aclose()


@pytest.fixture
async def client(store: KubeObjectStore) -> AsyncIterator[httpx.AsyncClient]:
    router = APIRouter()
    router.include_router(podnotifiers.router(store, Watches()))
    app = create_app(authenticator=AllowAll(), authorizer=AllowAll(), readiness=Readiness(),
                     resource_router=router)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://notifier.test") as c:
        yield c


@pytest.mark.parametrize(("path", "params", "asks"), [
    ("/a", {}, True),
    ("/a", {"resourceVersion": "0"}, False),
    ("/a", {"resourceVersion": "1"}, False),
    ("", {}, True),
    ("", {"labelSelector": "x=y", "limit": "1"}, True),
    ("", {"resourceVersion": "0"}, False),
    ("", {"resourceVersion": "1", "resourceVersionMatch": "NotOlderThan"}, False),
])
async def test_only_reads_of_the_latest_state_ask_kube_apiserver(
        client: httpx.AsyncClient, api: FakeStorageAPI, path: str, params: dict[str, str],
        asks: bool) -> None:
    api.lists.clear()

    answer = await client.get(COLLECTION + path, params=params)

    assert answer.status_code == 200, answer.text
    assert len(api.lists) == (1 if asks else 0), api.lists


async def test_a_continued_list_and_the_servers_own_reads_read_the_cache(
        client: httpx.AsyncClient, store: KubeObjectStore, api: FakeStorageAPI) -> None:
    first = (await client.get(COLLECTION, params={"limit": "1"})).json()
    api.lists.clear()

    rest = await client.get(COLLECTION, params={"limit": "1",
                                                "continue": first["metadata"]["continue"]})
    await store.get("ns", "a")
    await store.list("ns")

    assert [r["metadata"]["name"] for r in rest.json()["items"]] == ["b"]
    assert api.lists == []
