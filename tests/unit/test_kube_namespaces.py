"""The cluster's namespaces for the lifecycle of stored objects (``kube.namespaces``), against a
fake kube-apiserver (httpx.MockTransport): NamespaceLifecycle's answers from the informer's
cache, a GET for a namespace the cache does not hold, and ``gone`` only once it has listed."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from apiserver import errors
from apiserver.kube import Connection, KubeClient
from apiserver.kube.client import KubeRejected
from apiserver.kube.namespaces import NamespaceDirectory

NAMESPACES = "/api/v1/namespaces"


def namespace(name: str, *, terminating: bool = False, rv: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": rv,
                            "labels": {"team": "a"}, "annotations": {"note": "x" * 100}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}


@dataclass
class FakeNamespaceAPI:
    """Lists `listed`; answers a GET of one namespace from `live`; a watch sends what is put
    on `events` (and stays open)."""

    listed: list[dict[str, Any]] = field(default_factory=list)
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    get_answer: httpx.Response | None = None
    gets: list[str] = field(default_factory=list)
    events: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    list_gate: asyncio.Event = field(default_factory=asyncio.Event)
    """The list is answered once this is set."""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == NAMESPACES:
            if request.url.params.get("watch") in ("true", "1"):
                return httpx.Response(200, content=self._stream())
            await self.list_gate.wait()
            return httpx.Response(200, json={"kind": "PartialObjectMetadataList",
                                             "metadata": {"resourceVersion": "10"},
                                             "items": self.listed})
        if request.method == "GET" and path.startswith(f"{NAMESPACES}/"):
            name = path.removeprefix(f"{NAMESPACES}/")
            self.gets.append(name)
            if self.get_answer is not None:
                return self.get_answer
            if name in self.live:
                return httpx.Response(200, json=self.live[name])
            return httpx.Response(404, json={"kind": "Status", "code": 404,
                                             "reason": "NotFound", "message": "not found"})
        return httpx.Response(405, json={"kind": "Status", "code": 405})

    async def _stream(self) -> AsyncIterator[bytes]:
        while True:
            yield (json.dumps(await self.events.get()) + "\n").encode()


@pytest.fixture
def api() -> FakeNamespaceAPI:
    api = FakeNamespaceAPI(listed=[namespace("open"), namespace("closing", terminating=True)])
    api.list_gate.set()
    return api


@pytest.fixture
async def directory(api: FakeNamespaceAPI) -> AsyncIterator[NamespaceDirectory]:
    kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(api.handle))
    opened = NamespaceDirectory(kube)
    task = asyncio.create_task(opened.run())
    yield opened
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await kube.aclose()


async def synced(directory: NamespaceDirectory) -> None:
    async with asyncio.timeout(5):
        await directory.informer.synced.wait()


async def until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not await condition():
            await asyncio.sleep(0.01)


async def test_an_open_namespace_is_answered_from_the_cache(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)

    await directory.check_open("open")

    assert api.gets == []
    assert directory.has_synced()
    assert not await directory.gone("open")


async def test_the_cache_holds_only_the_identity(
        directory: NamespaceDirectory) -> None:
    await synced(directory)

    assert directory.informer.get("", "closing") == {"metadata": {
        "name": "closing", "uid": "uid-closing", "resourceVersion": "1",
        "deletionTimestamp": "2026-01-01T00:00:00Z"}}


async def test_a_terminating_namespace_is_forbidden(directory: NamespaceDirectory) -> None:
    await synced(directory)

    with pytest.raises(errors.Forbidden) as raised:
        await directory.check_open("closing")

    assert raised.value.code == 403
    assert raised.value.message == ('unable to create new content in namespace "closing" '
                                    "because it is being terminated")
    assert not await directory.gone("closing")


async def test_a_missing_namespace_is_not_found(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)

    with pytest.raises(errors.NotFound) as raised:
        await directory.check_open("missing")

    assert raised.value.code == 404
    assert raised.value.message == 'namespaces "missing" not found'
    assert api.gets == ["missing"]  # confirmed live: it may be too new for the cache
    assert await directory.gone("missing")


async def test_a_namespace_newer_than_the_cache_is_confirmed_live(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)
    api.live["new"] = namespace("new")
    api.live["new-closing"] = namespace("new-closing", terminating=True)

    await directory.check_open("new")
    with pytest.raises(errors.Forbidden):
        await directory.check_open("new-closing")

    assert not await directory.gone("new")
    assert api.gets == ["new", "new-closing", "new"]


async def test_nothing_is_gone_before_the_cache_has_listed(
        api: FakeNamespaceAPI) -> None:
    api.list_gate.clear()
    kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(api.handle))
    directory = NamespaceDirectory(kube)
    task = asyncio.create_task(directory.run())
    try:
        await asyncio.sleep(0.05)
        assert not directory.has_synced()
        assert not await directory.gone("missing")
        with pytest.raises(errors.NotFound):  # a create is still checked, live
            await directory.check_open("missing")
        api.list_gate.set()
        await synced(directory)
        assert await directory.gone("missing")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await kube.aclose()


async def test_a_deleted_namespace_is_gone_once_its_event_arrives(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)
    assert not await directory.gone("open")

    api.events.put_nowait({"type": "DELETED", "object": namespace("open", rv="11")})

    await until(lambda: directory.gone("open"))
    with pytest.raises(errors.NotFound):
        await directory.check_open("open")


async def test_a_namespace_that_starts_terminating_is_forbidden_from_then_on(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)
    await directory.check_open("open")

    api.events.put_nowait({"type": "MODIFIED",
                           "object": namespace("open", terminating=True, rv="11")})

    async def refused() -> bool:
        try:
            await directory.check_open("open")
        except errors.Forbidden:
            return True
        return False

    await until(refused)
    assert api.gets == []


async def test_a_failed_live_read_is_not_taken_for_a_missing_namespace(
        directory: NamespaceDirectory, api: FakeNamespaceAPI) -> None:
    await synced(directory)
    api.get_answer = httpx.Response(403, json={"kind": "Status", "code": 403,
                                               "reason": "Forbidden", "message": "no RBAC"})

    with pytest.raises(KubeRejected) as raised:
        await directory.check_open("unknown")
    assert raised.value.status_code == 403
    with pytest.raises(KubeRejected):
        await directory.gone("unknown")
