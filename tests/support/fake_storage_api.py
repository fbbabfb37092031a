"""A fake kube-apiserver for the storage custom resources (httpx.MockTransport): create, get,
replace with resourceVersion checks, delete with preconditions, list (in a namespace or
cluster-wide) and watch, both narrowed by a ``labelSelector`` of equality and existence
requirements (a list also by a ``fieldSelector`` of ``metadata.name=``, and of metadata only
when asked for PartialObjectMetadataList), one global resourceVersion counter, switches that
make requests fail as kube-apiserver can, and clients whose watches can be held (a replica
whose caches lag)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import ssl
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from apiserver.kube import Connection, KubeClient
from apiserver.timestamps import timestamp

_PATH = re.compile(r"/apis/storage\.notifier\.x-k8s\.io/v1alpha1/"
                   r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?")
_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
_CONFIGMAPS = re.compile(r"/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?")


Selector = Callable[[Mapping[str, Any]], bool]
"""Whether a stored object's labels match a label selector."""
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def label_selector(text: str) -> Selector:
    """The matcher of a label selector of comma-separated requirements ``key=value`` (or
    ``key==value``), ``key!=value``, ``key<integer``, ``key>integer``, ``key`` (exists) and
    ``!key`` (does not exist), as kube-apiserver reads them; ``ValueError`` for anything else
    (set-based requirements are not needed here)."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for raw in text.split(",") if text.strip() else []:
        requirement = raw.strip()
        key, value, test = requirement, "", ""
        for operator in ("!=", "==", "=", "<", ">"):
            if operator in requirement:
                key, _, value = (part.strip() for part in requirement.partition(operator))
                test = operator
                break
        else:
            if requirement.startswith("!"):
                key, test = requirement[1:].strip(), "!"
        if not _LABEL_KEY.fullmatch(key) or any(c in value for c in "=!() ") or (
                test in ("<", ">") and not value.isdigit()):
            raise ValueError(f"unable to parse requirement: {requirement!r}")
        if test in ("=", "=="):
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif test == "!=":
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif test in ("<", ">"):
            tests.append(lambda labels, k=key, v=int(value), less=test == "<":
                         labels.get(k, "").isdigit() and (int(labels[k]) < v) == less
                         and int(labels[k]) != v)
        elif test == "!":
            tests.append(lambda labels, k=key: k not in labels)
        else:
            tests.append(lambda labels, k=key: k in labels)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


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
    outdated_crds: set[str] = field(default_factory=set)
    """CRDs whose schema lacks createdRevision (of a version before it)."""
    crd_answer: httpx.Response | None = None
    """The answer to every CRD read while set."""
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    lists: list[tuple[str, dict[str, str], str]] = field(default_factory=list)
    """(path, query, Accept) of each list (not watch) of storage objects."""
    configmaps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(namespace, name) -> ConfigMap: get and create only (the layout marker)."""
    _watchers: list[tuple[str, str | None, Selector, asyncio.Queue[dict[str, Any] | None]]] = (
        field(default_factory=list))
    """(plural, namespace or None for all, selector, events): a watch gets the events of its
    collection, namespace and label selector only."""

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
        configmap = _CONFIGMAPS.fullmatch(request.url.path)
        if configmap is not None:
            return self._configmap(request.method, configmap["ns"], configmap["name"], body)
        match = _PATH.fullmatch(request.url.path)
        if match is None:
            return status(404, "NotFound", "no such path")
        ns, plural, name = match["ns"], match["plural"], match["name"]
        if request.method != "GET" and self.fail_writes is not None:
            return self.fail_writes
        if request.method == "GET" and name is None:
            try:
                selected = label_selector(request.url.params.get("labelSelector", ""))
            except ValueError as error:
                return status(400, "BadRequest", str(error))
            if request.url.params.get("watch") == "true":
                return self._watch(plural, ns, selected, delivery)
            return self._list(request, plural, ns, selected)
        if ns is None:
            return status(404, "NotFound", "the storage resources are namespaced")
        if request.method == "DELETE" and name is None:
            return self._delete_collection(plural, ns, request)
        key = (plural, ns, name or "")
        if request.method == "POST":
            assert body is not None
            if body["metadata"].get("namespace", ns) != ns:
                return status(400, "BadRequest", "the namespace of the provided object does "
                              "not match the namespace sent on the request")
            key = (plural, ns, body["metadata"]["name"])
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
            return self._store(key, obj, "MODIFIED", 200, current)
        if request.method == "DELETE":
            wanted = (body or {}).get("preconditions") or {}
            meta = current["metadata"]
            if any(meta.get(k) != v for k, v in wanted.items()):
                return status(409, "Conflict", "Precondition failed", name=key[2])
            del self.objects[key]
            self.rv += 1
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._publish(key, "DELETED", gone)
            return httpx.Response(200, json={"kind": "Status", "status": "Success",
                                             "details": {"name": key[2], "uid": meta["uid"]}})
        return status(405, "MethodNotAllowed", request.method)

    def _delete_collection(self, plural: str, namespace: str, request: httpx.Request
                           ) -> httpx.Response:
        try:
            selected = label_selector(request.url.params.get("labelSelector", ""))
        except ValueError as error:
            return status(400, "BadRequest", str(error))
        gone = []
        for key, obj in sorted(self.objects.items()):
            if key[:2] == (plural, namespace) and selected(obj):
                del self.objects[key]
                self.rv += 1
                deleted = copy.deepcopy(obj)
                deleted["metadata"]["resourceVersion"] = str(self.rv)
                self._publish(key, "DELETED", deleted)
                gone.append(obj)
        return httpx.Response(200, json={"kind": "List", "items": gone,
                                         "metadata": {"resourceVersion": str(self.rv)}})

    def _list(self, request: httpx.Request, plural: str, namespace: str | None,
              selected: Selector) -> httpx.Response:
        accept = request.headers.get("accept", "")
        self.lists.append((request.url.path, dict(request.url.params), accept))
        fields = request.url.params.get("fieldSelector", "")
        if fields and not fields.startswith("metadata.name="):
            return status(400, "BadRequest", f"field selector not supported here: {fields}")
        named = fields.removeprefix("metadata.name=")
        items = [o for (p, n, name), o in sorted(self.objects.items())
                 if p == plural and (namespace is None or n == namespace) and selected(o)
                 and (not named or name == named)]
        meta = {"resourceVersion": str(self.rv)}
        if "as=PartialObjectMetadataList" in accept:
            return httpx.Response(200, json={
                "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": meta, "items": [{"kind": "PartialObjectMetadata",
                                             "apiVersion": "meta.k8s.io/v1",
                                             "metadata": o["metadata"]} for o in items]})
        return httpx.Response(200, json={"items": items, "metadata": meta})

    def _configmap(self, method: str, namespace: str, name: str | None,
                   body: dict[str, Any] | None) -> httpx.Response:
        if method == "POST" and name is None and body is not None:
            key = (namespace, body["metadata"]["name"])
            if key in self.configmaps:
                return status(409, "AlreadyExists", "already exists", name=key[1])
            self.configmaps[key] = copy.deepcopy(body)
            return httpx.Response(201, json=body)
        if method == "GET" and name is not None:
            found = self.configmaps.get((namespace, name))
            if found is None:
                return status(404, "NotFound", f'configmaps "{name}" not found', name=name)
            return httpx.Response(200, json=found)
        return status(405, "MethodNotAllowed", method)

    def _crd(self, name: str) -> httpx.Response:
        if name not in self.crds:
            return status(404, "NotFound", f'"{name}" not found')
        established = "True" if self.crds[name] else "False"
        properties = {"object": {}, "sequence": {}}
        if name not in self.outdated_crds:
            properties["createdRevision"] = {}
        return httpx.Response(200, json={
            "metadata": {"name": name},
            "spec": {"versions": [{"name": "v1alpha1", "storage": True, "schema": {
                "openAPIV3Schema": {"properties": properties}}}]},
            "status": {"conditions": [{"type": "Established", "status": established}]}})

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any], kind: str, code: int,
               old: dict[str, Any] | None = None) -> httpx.Response:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        self._publish(key, kind, obj, old)
        return httpx.Response(code, json=obj)

    def _publish(self, key: tuple[str, str, str], kind: str, obj: dict[str, Any],
                 old: dict[str, Any] | None = None) -> None:
        """As kube-apiserver's watch with a selector: a change that makes an object match is
        ADDED, one that makes it stop matching DELETED."""
        plural, namespace, _ = key
        for watched, watched_ns, selected, queue in self._watchers:
            if watched != plural or watched_ns not in (None, namespace):
                continue
            now, before = selected(obj), old is not None and selected(old)
            if kind == "MODIFIED" and now != before:
                kind_seen = "ADDED" if now else "DELETED"
            elif now:
                kind_seen = kind
            else:
                continue
            queue.put_nowait({"type": kind_seen, "object": copy.deepcopy(obj)})

    def _watch(self, plural: str, namespace: str | None, selected: Selector,
               delivery: asyncio.Event | None) -> httpx.Response:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        watcher = (plural, namespace, selected, queue)
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
