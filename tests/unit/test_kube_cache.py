"""The Kubernetes backend's cache (``registry.kube_cache``) and its write-through, against the fake
kube-apiserver: a replica whose watch delivers nothing still reads and updates its own writes at
once; the watch's newer versions (another replica's writes, a deletion) win over them; a list
waits for the watch to bring this replica's writes; a relist keeps only writes newer than it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from apiserver.kube import Connection
from apiserver.kube.client import KubeClient
from apiserver.registry import kube_cache
from apiserver.registry.errors import NotFound, TooManyRequests
from apiserver.registry.kube_cache import StorageCache
from apiserver.registry.kube_objects import STORAGE_API, storage_kind, storage_object
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.selectors import FieldSelector
from tests.support.fake_storage_api import FakeStorageAPI

STORAGE_NAMESPACE = "cn-storage"


def record(name: str = "a", phase: str = "Pending", notifier: str = "quiesce"
           ) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"podName": "web-0", "notifier": notifier}, "status": {"phase": phase}}


def phase_to(phase: str) -> Any:
    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"]["phase"] = phase
        return obj
    return mutate


@pytest.fixture
def api() -> FakeStorageAPI:
    return FakeStorageAPI()


@pytest.fixture(autouse=True)
def no_wait_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait for the watch would last the test's whole timeout, not 10 s and a warning."""
    monkeypatch.setattr(kube_cache, "SYNC_TIMEOUT_SECONDS", 3600.0)


@pytest.fixture
async def stores(api: FakeStorageAPI) -> AsyncIterator[tuple[KubeObjectStore, KubeObjectStore,
                                                              asyncio.Event]]:
    """Store a, whose watch delivers nothing while the event is clear, and store b (another
    replica) whose watch is prompt; both synced."""
    delivery = asyncio.Event()
    delivery.set()
    clients: list[KubeClient] = [api.client(delivery=delivery), api.client()]
    a, b = (KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                            instance="test") for kube in clients)
    await a.list(None)
    await b.list(None)
    yield a, b, delivery
    delivery.set()
    a.close()
    b.close()
    for kube in clients:
        await kube.aclose()


async def test_sequential_updates_of_one_record_never_wait_for_the_watch(
        stores: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event],
        api: FakeStorageAPI) -> None:
    a, _, delivery = stores
    delivery.clear()
    async with asyncio.timeout(30):
        created = await a.create(record())
        for phase in ("Running", "Held", "Succeeded"):
            updated = await a.guaranteed_update("ns", "a", phase_to(phase))
        got = await a.get("ns", "a")

    assert got == updated
    assert got["status"]["phase"] == "Succeeded"
    # Each PUT carried the resourceVersion the previous write returned: no 409, no re-read.
    assert [method for method, _, _ in api.requests[-4:]] == ["POST", "PUT", "PUT", "PUT"]
    versions = [body["metadata"].get("resourceVersion") for _, _, body in api.requests[-3:]]
    assert versions[0] == created["metadata"]["resourceVersion"]
    assert len(set(versions)) == 3


async def test_another_replicas_later_write_wins_once_the_watch_brings_it(
        stores: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event]) -> None:
    a, b, delivery = stores
    delivery.clear()
    async with asyncio.timeout(30):
        await a.create(record())
        await a.guaranteed_update("ns", "a", phase_to("Running"))
        while True:  # b's cache holds a's create
            try:
                await b.get("ns", "a")
                break
            except NotFound:
                await asyncio.sleep(0.01)
        await b.guaranteed_update("ns", "a", phase_to("Failed"))
        assert (await a.get("ns", "a"))["status"]["phase"] == "Running"  # a's watch lags
        delivery.set()
        while (await a.get("ns", "a"))["status"]["phase"] != "Failed":
            await asyncio.sleep(0.01)


async def test_a_deletion_the_watch_brings_ends_the_own_write(
        stores: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event]) -> None:
    a, b, delivery = stores
    await a.create(record())
    async with asyncio.timeout(30):
        while not (await b.list("ns")).items:
            await asyncio.sleep(0.01)
        delivery.clear()
        await a.guaranteed_update("ns", "a", phase_to("Succeeded"))
        await b.delete("ns", "a")
        assert (await a.get("ns", "a"))["status"]["phase"] == "Succeeded"
        delivery.set()
        while True:
            try:
                await a.get("ns", "a")
            except NotFound:
                break
            await asyncio.sleep(0.01)


async def test_a_list_waits_for_the_watch_to_bring_the_replicas_own_writes(
        stores: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event]) -> None:
    a, _, delivery = stores
    delivery.clear()
    async with asyncio.timeout(30):
        await a.create(record())
        listing = asyncio.create_task(a.list("ns"))
        await asyncio.sleep(0.3)
        assert not listing.done()
        delivery.set()
        listed = await listing
    assert [item["metadata"]["name"] for item in listed.items] == ["a"]


async def test_a_relist_keeps_only_the_writes_newer_than_the_list(api: FakeStorageAPI) -> None:
    kind = storage_kind(PODNOTIFIERS)
    path = f"{STORAGE_API}/namespaces/{STORAGE_NAMESPACE}/{kind.plural}"
    kube = api.client()
    cache = StorageCache(kube, path, PODNOTIFIERS, kind, storage_namespace=STORAGE_NAMESPACE,
                         instance="test")
    try:
        await cache.ready()
        older, newer = (storage_object(kind, STORAGE_NAMESPACE, "test", {
            **record(name), "metadata": {**record(name)["metadata"], "uid": name,
                                         "creationTimestamp": "2026-12-01T00:00:00Z",
                                         "resourceVersion": str(rv)}}, 1)
            for name, rv in (("old", cache.current_rv()), ("new", cache.current_rv() + 50)))
        cache.wrote(older)
        cache.wrote(newer)
        cache._listed()
        assert cache.get(("ns", "old")) is None
        assert cache.get(("ns", "new")) is not None
    finally:
        cache.close()
        await kube.aclose()


async def test_admission_decides_on_the_state_at_the_create(api: FakeStorageAPI) -> None:
    """b's create of R comes after a's create of M (which b's check before the create did not
    see) and M finishes only after R's create: at R's revision M was unfinished, so with one
    run allowed R is refused, though M has finished by the time b's cache gets there (deciding
    on that later state would leave a moment with two unfinished admitted records)."""
    delivery = asyncio.Event()
    delivery.set()
    a_kube = api.client()
    a = PodNotifierStore(KubeObjectStore(a_kube, PODNOTIFIERS,
                                         storage_namespace=STORAGE_NAMESPACE, instance="test"),
                         "replica-a")

    async def handle(request: httpx.Request) -> httpx.Response:
        posting_r = request.method == "POST" and b'"r-' in request.content
        if posting_r:  # b has checked the pod's records: now a's M comes first
            delivery.clear()
            await a.create_bounded(record("m", notifier="flush"), max_per_pod=1)
        answer = await api.handle(request, delivery)
        if posting_r:  # R is created; M finishes after it, then b's watch goes on
            await a.guaranteed_update("ns", "m", phase_to("Succeeded"))
            delivery.set()
        return answer

    b_kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                        transport=httpx.MockTransport(handle))
    b = PodNotifierStore(KubeObjectStore(b_kube, PODNOTIFIERS,
                                         storage_namespace=STORAGE_NAMESPACE, instance="test"),
                         "replica-b")
    try:
        async with asyncio.timeout(30):
            with pytest.raises(TooManyRequests):
                await b.create_bounded(record("r-1"), max_per_pod=1)
            names = [obj["metadata"]["name"] for obj in (await b.list("ns")).items]
    finally:
        a.close()
        b.close()
        await a_kube.aclose()
        await b_kube.aclose()
    assert names == ["m"]


async def test_the_window_drops_changes_older_than_its_fresh_time_beyond_the_newest_hundred(
        api: FakeStorageAPI) -> None:
    """As kube-apiserver's watch cache: a change stays at least FRESH_SECONDS, and the newest
    MIN_HISTORY stay whatever their age; older ones leave (a snapshot or watch from before them
    is Expired), so a busy cache does not keep thousands of superseded versions."""
    kind = storage_kind(PODNOTIFIERS)
    path = f"{STORAGE_API}/namespaces/{STORAGE_NAMESPACE}/{kind.plural}"
    now = [1000.0]
    writer_kube, kube = api.client(), api.client()
    writer = KubeObjectStore(writer_kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                             instance="test")
    cache = StorageCache(kube, path, PODNOTIFIERS, kind, storage_namespace=STORAGE_NAMESPACE,
                         instance="test", monotonic=lambda: now[0])
    try:
        await cache.ready()
        start = cache.current_rv()
        for i in range(kube_cache.MIN_HISTORY + 50):
            await writer.create(record(f"r{i}"))
        await cache.reached(start + kube_cache.MIN_HISTORY + 50, 10)
        assert cache.compacted <= start  # all fresh: all kept
        assert cache.candidates_at("ns", FieldSelector(), start) == []

        now[0] += kube_cache.FRESH_SECONDS - 1
        last = (await writer.create(record("late")))["metadata"]["resourceVersion"]
        await cache.reached(int(last), 10)
        assert cache.compacted <= start  # not yet old enough

        now[0] += 2
        last = (await writer.create(record("later")))["metadata"]["resourceVersion"]
        await cache.reached(int(last), 10)
        assert len(cache._window) == kube_cache.MIN_HISTORY
        assert cache.compacted > start
        assert cache.candidates_at("ns", FieldSelector(), start) is None  # Expired
        kept = cache.candidates_at("ns", FieldSelector(), cache.compacted)
        assert kept is not None and len(kept) == kube_cache.MIN_HISTORY + 50 + 2 - len(
            cache._window)
    finally:
        writer.close()
        cache.close()
        await writer_kube.aclose()
        await kube.aclose()
