"""PodDirectory: the pod index behind PodDeleted detection and orphan collection, on the pod
cache's informer, against a fake kube-apiserver (MockTransport) speaking lists and watches."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import httpx

from apiserver.kube import Connection, KubeClient
from apiserver.kube.informer import Backoff
from apiserver.notifier.podcache import PodCache
from apiserver.notifier.pods import PodDirectory


def pod(name: str, uid: str, rv: str = "1") -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": rv},
            "spec": {"containers": [{"name": "app"}]}}


async def hold_open() -> Any:
    """A watch body that sends nothing and stays open, as a quiet kube-apiserver watch does."""
    await asyncio.sleep(3600)
    yield b""


class FakeKube:
    """Answers the list with `items`, then one watch that sends `events` and ends; later
    watches stay open without events."""

    def __init__(self, items: list[dict[str, Any]] | None, events: list[dict[str, Any]]):
        self.items, self.events = items, events
        self.watches = 0
        self.lists_and_watches = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.lists_and_watches += 1
        if request.url.params.get("watch") == "true":
            self.watches += 1
            if self.watches > 1:
                return httpx.Response(200, content=hold_open())
            body = "".join(json.dumps(e) + "\n" for e in self.events)
            return httpx.Response(200, content=body.encode())
        return httpx.Response(200, json={"kind": "PodList",
                                         "metadata": {"resourceVersion": "10"},
                                         "items": self.items})

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


def directory_on(cache: PodCache) -> PodDirectory:
    return PodDirectory(cache.informer)


async def run_until(cache: PodCache, condition: Any) -> None:
    """Run the pod cache (whose informer the directory reads) until `condition` holds."""
    task = asyncio.create_task(cache.run())
    try:
        async with asyncio.timeout(5):
            while not condition():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_empty_cluster_lists_as_null_items_and_still_syncs() -> None:
    fake = FakeKube(None, [{"type": "ADDED", "object": pod("p", "u1", "11")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    await run_until(cache, lambda: directory.synced.is_set()
                    and not directory.gone("ns", "p", "u1"))


async def test_the_directory_and_the_cache_share_one_list_and_watch() -> None:
    fake = FakeKube([pod("p", "u1")], [{"type": "DELETED", "object": pod("p", "u1", "12")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    await run_until(cache, lambda: directory.gone("ns", "p", "u1") and fake.watches >= 2)
    assert fake.lists_and_watches == 1 + fake.watches  # one list: no informer of its own


async def test_deleted_pod_sets_its_deletion_event() -> None:
    fake = FakeKube([pod("p", "u1")], [{"type": "DELETED", "object": pod("p", "u1", "12")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(cache, deleted.is_set)
    assert directory.gone("ns", "p", "u1")


async def test_a_pod_replaced_by_another_uid_counts_as_deleted() -> None:
    fake = FakeKube([pod("p", "u1")], [{"type": "ADDED", "object": pod("p", "u2", "12")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(cache, deleted.is_set)
    assert directory.gone("ns", "p", "u1")
    assert not directory.gone("ns", "p", "u2")


async def test_bookmarks_and_unrelated_pods_do_not_fire() -> None:
    fake = FakeKube([pod("p", "u1"), pod("q", "u9")], [
        {"type": "BOOKMARK", "object": {"kind": "PartialObjectMetadata",
                                        "metadata": {"resourceVersion": "11"}}},
        {"type": "DELETED", "object": pod("q", "u9", "12")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(cache, lambda: directory.synced.is_set()
                        and directory.gone("ns", "q", "u9"))
        assert not deleted.is_set()


async def test_deletions_are_counted_for_the_orphan_scan() -> None:
    fake = FakeKube([pod("p", "u1"), pod("q", "u2")],
                    [{"type": "DELETED", "object": pod("p", "u1", "12")},
                     {"type": "MODIFIED", "object": pod("q", "u2", "13")}])
    cache = PodCache(fake.client())
    directory = directory_on(cache)
    assert directory.deletions == 0
    await run_until(cache, lambda: directory.synced.is_set()
                    and directory.gone("ns", "p", "u1"))
    assert directory.deletions == 1
    assert not directory.gone("ns", "q", "u2")


async def test_not_gone_before_the_first_list() -> None:
    cache = PodCache(FakeKube([], []).client())
    directory = directory_on(cache)
    assert not directory.synced.is_set()
    assert not directory.gone("ns", "p", "u1")


async def test_a_deletion_found_by_a_relist_fires_and_counts() -> None:
    """The watch expires (410) while p is deleted: the next list no longer has it."""

    class Relisting(FakeKube):
        lists = 0

        def handle(self, request: httpx.Request) -> httpx.Response:
            if request.url.params.get("watch") != "true":
                self.lists += 1
                if self.lists == 2:
                    self.items = [pod("q", "u2")]
            return super().handle(request)

    fake = Relisting([pod("p", "u1"), pod("q", "u2")],
                     [{"type": "ERROR", "object": {"kind": "Status", "code": 410}}])
    cache = PodCache(fake.client(), backoff=Backoff(initial=0.01, maximum=0.01))
    directory = directory_on(cache)
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(cache, deleted.is_set)
    assert fake.lists == 2
    assert directory.deletions == 1
    assert not directory.gone("ns", "q", "u2")
