"""PodDirectory: the pod index behind PodDeleted detection and orphan collection, against a
fake kube-apiserver (MockTransport) speaking metadata-only lists and watches."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import httpx

from apiserver.kube import Connection, KubeClient
from apiserver.kube.informer import Backoff
from apiserver.notifier.pods import PodDirectory


def pod(name: str, uid: str, rv: str = "1") -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": rv}}


async def hold_open() -> Any:
    """A watch body that sends nothing and stays open, as a quiet kube-apiserver watch does."""
    await asyncio.sleep(3600)
    yield b""


class FakeKube:
    """Answers the list with `items`, then one watch that sends `events` and ends; later
    watches stay open without events."""

    def __init__(self, items: list[dict[str, Any]] | None, events: list[dict[str, Any]]):
        self.items, self.events = items, events
        self.accepts: list[str] = []
        self.watches = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.accepts.append(request.headers["accept"])
        if request.url.params.get("watch") == "true":
            self.watches += 1
            if self.watches > 1:
                return httpx.Response(200, content=hold_open())
            body = "".join(json.dumps(e) + "\n" for e in self.events)
            return httpx.Response(200, content=body.encode())
        return httpx.Response(200, json={"kind": "PartialObjectMetadataList",
                                         "metadata": {"resourceVersion": "10"},
                                         "items": self.items})

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


async def run_until(directory: PodDirectory, condition: Any, fake: FakeKube) -> None:
    task = asyncio.create_task(directory.run())
    try:
        async with asyncio.timeout(5):
            while not condition():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_empty_cluster_lists_as_null_items_and_still_syncs() -> None:
    fake = FakeKube(None, [{"type": "ADDED", "object": pod("p", "u1", "11")}])
    directory = PodDirectory(fake.client())
    await run_until(directory, lambda: directory.synced.is_set()
                    and not directory.gone("ns", "p", "u1"), fake)
    assert all("as=PartialObjectMetadata" in accept for accept in fake.accepts)


async def test_deleted_pod_sets_its_deletion_event() -> None:
    fake = FakeKube([pod("p", "u1")], [{"type": "DELETED", "object": pod("p", "u1", "12")}])
    directory = PodDirectory(fake.client())
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(directory, deleted.is_set, fake)
    assert directory.gone("ns", "p", "u1")


async def test_a_pod_replaced_by_another_uid_counts_as_deleted() -> None:
    fake = FakeKube([pod("p", "u1")], [{"type": "ADDED", "object": pod("p", "u2", "12")}])
    directory = PodDirectory(fake.client())
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(directory, deleted.is_set, fake)
    assert directory.gone("ns", "p", "u1")
    assert not directory.gone("ns", "p", "u2")


async def test_bookmarks_and_unrelated_pods_do_not_fire() -> None:
    fake = FakeKube([pod("p", "u1"), pod("q", "u9")], [
        {"type": "BOOKMARK", "object": {"kind": "PartialObjectMetadata",
                                        "metadata": {"resourceVersion": "11"}}},
        {"type": "DELETED", "object": pod("q", "u9", "12")}])
    directory = PodDirectory(fake.client())
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(directory, lambda: directory.synced.is_set()
                        and directory.gone("ns", "q", "u9"), fake)
        assert not deleted.is_set()


async def test_deletions_are_counted_for_the_orphan_scan() -> None:
    fake = FakeKube([pod("p", "u1"), pod("q", "u2")],
                    [{"type": "DELETED", "object": pod("p", "u1", "12")},
                     {"type": "MODIFIED", "object": pod("q", "u2", "13")}])
    directory = PodDirectory(fake.client())
    assert directory.deletions == 0
    await run_until(directory, lambda: directory.synced.is_set()
                    and directory.gone("ns", "p", "u1"), fake)
    assert directory.deletions == 1
    assert not directory.gone("ns", "q", "u2")


async def test_not_gone_before_the_first_list() -> None:
    directory = PodDirectory(FakeKube([], []).client())
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
    directory = PodDirectory(fake.client(), backoff=Backoff(initial=0.01, maximum=0.01))
    with directory.deletion("ns", "p", "u1") as deleted:
        await run_until(directory, deleted.is_set, fake)
    assert fake.lists == 2
    assert directory.deletions == 1
    assert not directory.gone("ns", "q", "u2")
