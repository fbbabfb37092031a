"""The informer against the real kube-apiserver: paginated lists, metadata-only watches, and a
kube-apiserver restart under running informers, after which they see every change.

The restart changes shared state (every component reconnects); it waits until the control plane
and the APIService work again before it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from apiserver.kube import KubeClient
from apiserver.kube.informer import Backoff, Handlers, Informer
from tests.support.control_plane import restart_kube_apiserver
from tests.support.kube import Cluster

pytestmark = pytest.mark.cluster


class CountingKube(KubeClient):
    """Counts the lists and watches the informers make."""

    lists = 0
    watches = 0

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]:
        self.lists += 1
        return await super().get(path, params, accept)

    def watch(self, path: str, params: Mapping[str, str], accept: str | None = None) -> Any:
        self.watches += 1
        return super().watch(path, params, accept)


def configmap(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"test": "informer"}},
            "data": {"value": value}}


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def test_informers_follow_changes_across_a_kube_apiserver_restart(
        cluster: Cluster, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    def admin(method: str, suffix: str = "", body: dict[str, Any] | None = None) -> None:
        with cluster.admin() as kube:
            response = kube.request(method, path + suffix, json=body)
            assert response.status_code < 300, response.text

    for i in range(5):
        admin("POST", body=configmap(f"before-{i}", "1"))

    kube = CountingKube.from_kubeconfig(cluster.layout.kubeconfig)
    selected = {"labelSelector": "test=informer"}  # not the namespace's kube-root-ca.crt
    full = Informer(kube, path, name="configmaps", params=selected, page_size=2,
                    backoff=Backoff(initial=0.2, maximum=2))
    metadata = Informer(kube, path, name="configmaps-metadata", params=selected,
                        metadata_only=True, backoff=Backoff(initial=0.2, maximum=2))
    seen: list[tuple[str, str]] = []
    full.add_handlers(Handlers(
        on_add=lambda o: seen.append(("add", o["metadata"]["name"])),
        on_update=lambda old, new: seen.append(("update", new["metadata"]["name"])),
        on_delete=lambda o: seen.append(("delete", o["metadata"]["name"]))))
    tasks = [asyncio.create_task(informer.run()) for informer in (full, metadata)]
    try:
        async with asyncio.timeout(30):
            await full.synced.wait()
            await metadata.synced.wait()
        assert sorted(o["metadata"]["name"] for o in full.list()) == [
            f"before-{i}" for i in range(5)]
        assert kube.lists >= 3 + 1  # three pages of two, and the metadata list
        assert full.get(namespace, "before-0")["data"] == {"value": "1"}
        assert "data" not in metadata.get(namespace, "before-0")  # PartialObjectMetadata

        await asyncio.to_thread(admin, "POST", "", configmap("during-watch", "1"))
        await eventually(lambda: metadata.get(namespace, "during-watch") is not None,
                         "the metadata informer to see a new ConfigMap")

        watches_before = kube.watches
        started = time.monotonic()
        await asyncio.to_thread(restart_kube_apiserver, cluster)
        restarted_in = time.monotonic() - started

        await asyncio.to_thread(admin, "POST", "", configmap("after-restart", "1"))
        await asyncio.to_thread(admin, "PUT", "/before-1", configmap("before-1", "2"))
        await asyncio.to_thread(admin, "DELETE", "/before-2")
        await eventually(lambda: full.get(namespace, "after-restart") is not None
                         and (full.get(namespace, "before-1") or {}).get("data")
                         == {"value": "2"}
                         and full.get(namespace, "before-2") is None,
                         "the informer to see the changes made after the restart")
        await eventually(lambda: metadata.get(namespace, "after-restart") is not None
                         and metadata.get(namespace, "before-2") is None,
                         "the metadata informer to see them too")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await kube.aclose()

    assert kube.watches > watches_before  # the watches broke and were resumed
    assert ("add", "after-restart") in seen
    assert ("update", "before-1") in seen
    assert ("delete", "before-2") in seen
    assert all(task.cancelled() for task in tasks)
    print(f"\nkube-apiserver restart took {restarted_in:.1f} s; "
          f"{kube.lists} list and {kube.watches} watch requests in all")
