"""PodCache and OwnerTemplates: trimmed objects from their informers, one GET for an object the
cache has not seen, against a fake kube-apiserver (MockTransport)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from apiserver.kube import Connection, KubeClient, KubeRejected, KubeUnavailable
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.podcache import OWNER_KINDS, OwnerTemplates, PodCache, trim_pod


def full_pod(name: str, namespace: str = "prod") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}",
                     "resourceVersion": "5", "labels": {"app": "db"},
                     "annotations": {ANNOTATION: "{}"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "rs", "uid": "rs-uid", "controller": True}],
                     "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:x": {}}}]},
        "spec": {"containers": [{"name": "db", "image": "postgres", "env": [{"name": "A"}],
                                 "ports": [{"name": "pg", "containerPort": 5432,
                                            "protocol": "TCP"}, {"containerPort": 9}]},
                                {"name": "side", "image": "x"}],
                 "hostNetwork": False, "volumes": [{"name": "data"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "conditions": [{"type": "Ready"}],
                   "containerStatuses": [{"name": "db", "containerID": "containerd://1",
                                          "state": {"running": {}}, "image": "postgres",
                                          "restartCount": 3}]},
    }


def test_trim_pod_keeps_what_notify_reads() -> None:
    trimmed = trim_pod(full_pod("db-0"))
    meta = full_pod("db-0")["metadata"]
    del meta["managedFields"]
    assert trimmed == {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "db", "ports": [{"name": "pg", "containerPort": 5432}]},
                                {"name": "side"}], "hostNetwork": False},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
            {"name": "db", "containerID": "containerd://1", "state": {"running": {}}}]}}


def test_trim_pod_of_a_pending_pod() -> None:
    assert trim_pod({"metadata": {"name": "p", "namespace": "n"}, "spec": {}}) == {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
        "spec": {"containers": []}, "status": {}}


async def hold_open() -> AsyncIterator[bytes]:
    await asyncio.sleep(3600)
    yield b""


class FakeKube:
    """Lists `pods` (watches stay open); GETs of single pods answer from `extra` (or 404, or
    `error_code`)."""

    def __init__(self, pods: list[dict[str, Any]], extra: dict[str, dict[str, Any]] | None = None,
                 error_code: int | None = None) -> None:
        self.pods, self.extra, self.error_code = pods, extra or {}, error_code
        self.gets: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/pods":
            if request.url.params.get("watch") == "true":
                return httpx.Response(200, content=hold_open())
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"},
                                             "items": self.pods})
        self.gets.append(path)
        if self.error_code is not None:
            return httpx.Response(self.error_code, json={"kind": "Status",
                                                         "code": self.error_code})
        name = path.rsplit("/", 1)[1]
        if name in self.extra:
            return httpx.Response(200, json=self.extra[name])
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


async def synced(cache: PodCache) -> asyncio.Task[None]:
    task = asyncio.create_task(cache.run())
    async with asyncio.timeout(5):
        await cache.wait_synced()
    return task


async def test_cached_pods_cost_no_get() -> None:
    fake = FakeKube([full_pod("db-0"), full_pod("db-1"), full_pod("web", namespace="other")])
    cache = PodCache(fake.client())
    assert not cache.has_synced()
    task = await synced(cache)
    try:
        pod = await cache.pod("prod", "db-0")
        in_prod = sorted(p["metadata"]["name"] for p in cache.in_namespace("prod"))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert pod == trim_pod(full_pod("db-0"))
    assert in_prod == ["db-0", "db-1"]
    assert fake.gets == [] and cache.gets == 0


async def test_a_pod_the_cache_has_not_seen_is_one_get() -> None:
    fake = FakeKube([], extra={"new": full_pod("new")})
    cache = PodCache(fake.client())
    task = await synced(cache)
    try:
        pod = await cache.pod("prod", "new")
        missing = await cache.pod("prod", "nope")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert pod == trim_pod(full_pod("new"))
    assert missing is None
    assert fake.gets == ["/api/v1/namespaces/prod/pods/new", "/api/v1/namespaces/prod/pods/nope"]
    assert cache.gets == 2


@pytest.mark.parametrize(("code", "error"), [(403, KubeRejected), (503, KubeUnavailable)])
async def test_a_failed_get_raises(code: int, error: type[Exception]) -> None:
    cache = PodCache(FakeKube([], error_code=code).client())
    with pytest.raises(error):
        await cache.pod("prod", "x")


async def test_owners_fall_back_to_one_get_and_refuse_other_kinds() -> None:
    selector = {"matchLabels": {"app": "db"}}
    replicaset = {"metadata": {"namespace": "prod", "name": "rs", "uid": "u"},
                  "spec": {"replicas": 2, "selector": selector,
                           "template": {"metadata": {"annotations": {ANNOTATION: "{}",
                                                                     "other": "y"}}}}}
    fake = FakeKube([], extra={"rs": replicaset})
    owners = OwnerTemplates(fake.client())
    assert set(owners.informers) == set(OWNER_KINDS)
    assert await owners.owner("apps", "ReplicaSet", "prod", "rs") == {
        "metadata": {"namespace": "prod", "name": "rs", "uid": "u"},
        "spec": {"selector": selector,
                 "template": {"metadata": {"annotations": {ANNOTATION: "{}"}}}}}
    assert await owners.owner("batch", "Job", "prod", "none") is None
    assert fake.gets == ["/apis/apps/v1/namespaces/prod/replicasets/rs",
                         "/apis/batch/v1/namespaces/prod/jobs/none"]
    with pytest.raises(KeyError, match="Deployment"):
        await owners.owner("apps", "Deployment", "prod", "d")
