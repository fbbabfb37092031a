"""A fake kube-apiserver for the storage custom resources (httpx.MockTransport): create, get,
replace with resourceVersion checks, delete with preconditions, list and watch, one global
resourceVersion counter, switches that make requests fail as kube-apiserver can, and clients
whose watches can be held (a replica whose caches lag)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from apiserver.kube import Connection, KubeClient
from apiserver.timestamps import timestamp

_PATH = re.compile(r"/apis/storage\.notifier\.x-k8s\.io/v1alpha1/"
                   r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?")
_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"


def status(code: int, reason: str, message: str, **details: Any) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": message,
                                      "details": details})


@dataclass
class FakeStorageAPI:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    rv: int = 100
    down: bool = False
    """Every request fails to connect."""
    fail_writes: httpx.Response | None = None
    """The answer to every write (POST, PUT, DELETE) while set."""
    conflicts: int = 0
    """PUTs still to answer 409 Conflict even with the current resourceVersion."""
    crds: dict[str, bool] = field(default_factory=dict)
    """CRD name -> Established; a missing name is 404."""
    crd_answer: httpx.Response | None = None
    """The answer to every CRD read while set."""
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    _watchers: list[tuple[str, asyncio.Queue[dict[str, Any] | None]]] = field(
        default_factory=list)
    """(plural, events): a watch gets the events of its collection only."""

    def client(self, *, delivery: asyncio.Event | None = None) -> KubeClient:
        """A client of this API. With `delivery`, the events of its watches wait while it is
        clear (then come in order): the caches of stores on this client lag."""

        async def handle(request: httpx.Request) -> httpx.Response:
            return await self.handle(request, delivery)

        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(handle))

    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]

    async def handle(self, request: httpx.Request, delivery: asyncio.Event | None = None
                     ) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        if request.url.path.startswith(_CRD):
            if self.crd_answer is not None:
                return self.crd_answer
            return self._crd(request.url.path.removeprefix(_CRD))
        match = _PATH.fullmatch(request.url.path)
        if match is None:
            return status(404, "NotFound", "no such path")
        ns, plural, name = match["ns"], match["plural"], match["name"]
        if request.method != "GET" and self.fail_writes is not None:
            return self.fail_writes
        if request.method == "GET" and name is None:
            if request.url.params.get("watch") == "true":
                return self._watch(plural, delivery)
            items = [o for (p, n, _), o in sorted(self.objects.items())
                     if p == plural and (ns is None or n == ns)]
            return httpx.Response(200, json={"items": items,
                                             "metadata": {"resourceVersion": str(self.rv)}})
        key = (plural, ns or "", name or "")
        if request.method == "POST":
            assert body is not None
            key = (plural, ns or "", body["metadata"]["name"])
            if key in self.objects:
                return status(409, "AlreadyExists", "already exists", name=key[2])
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=str(uuid.uuid4()),
                                   creationTimestamp=timestamp())
            return self._store(key, obj, "ADDED", 201)
        current = self.objects.get(key)
        if current is None:
            return status(404, "NotFound", f'"{key[2]}" not found', name=key[2])
        if request.method == "GET":
            return httpx.Response(200, json=current)
        if request.method == "PUT":
            assert body is not None
            if self.conflicts or body["metadata"].get("resourceVersion") != \
                    current["metadata"]["resourceVersion"]:
                self.conflicts = max(0, self.conflicts - 1)
                return status(409, "Conflict", "the object has been modified", name=key[2])
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=current["metadata"]["uid"],
                                   creationTimestamp=current["metadata"]["creationTimestamp"])
            return self._store(key, obj, "MODIFIED", 200)
        if request.method == "DELETE":
            wanted = (body or {}).get("preconditions") or {}
            meta = current["metadata"]
            if any(meta.get(k) != v for k, v in wanted.items()):
                return status(409, "Conflict", "Precondition failed", name=key[2])
            del self.objects[key]
            self.rv += 1
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._publish(plural, "DELETED", gone)
            return httpx.Response(200, json={"kind": "Status", "status": "Success",
                                             "details": {"name": key[2], "uid": meta["uid"]}})
        return status(405, "MethodNotAllowed", request.method)

    def _crd(self, name: str) -> httpx.Response:
        if name not in self.crds:
            return status(404, "NotFound", f'"{name}" not found')
        established = "True" if self.crds[name] else "False"
        return httpx.Response(200, json={"metadata": {"name": name}, "status": {
            "conditions": [{"type": "Established", "status": established}]}})

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any], kind: str, code: int
               ) -> httpx.Response:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        self._publish(key[0], kind, obj)
        return httpx.Response(code, json=obj)

    def _publish(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        for watched, queue in self._watchers:
            if watched == plural:
                queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    def _watch(self, plural: str, delivery: asyncio.Event | None) -> httpx.Response:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        watcher = (plural, queue)
        self._watchers.append(watcher)

        async def lines() -> AsyncIterator[bytes]:
            try:
                while (event := await queue.get()) is not None:
                    if delivery is not None:
                        await delivery.wait()
                    yield json.dumps(event).encode() + b"\n"
            finally:
                self._watchers.remove(watcher)

        return httpx.Response(200, content=lines())
