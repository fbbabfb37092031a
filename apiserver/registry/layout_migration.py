"""Moving the storage objects of layout 1 into the storage namespace (docs/storage.md, *Upgrading
from layout 1*).

Layout 1 (releases before the storage namespace) kept each public object ``<ns>/<name>`` as the
storage object ``<ns>/<name>``, in the users' namespace, with the public uid and
creationTimestamp the storage object's own, labelled ``LAYOUT1_INSTANCE_LABEL``. A replica of this
layout moves every such object of its instance at start, before its caches list: it creates the
layout-2 object (``kube_objects.storage_object``: the same public object, uid, creationTimestamp
and sequence), then deletes the old one (its uid as precondition). An interrupted move is
finished by the next start, and two replicas moving at once agree: a copy an earlier move made
is kept as it is (it may have been written since). The upgrade applies the new RBAC first,
which ends the old replicas' layout-1 writes (docs/storage.md). Nothing is run again: records,
Notifications and their scopes keep their uids, so every pass and takeover reads them
as before.

The move happens once per instance: when every kind has been moved, the ConfigMap
``<instance>-storage-layout`` in the storage namespace says so (``layout: "2"``), and later
starts read nothing in the users' namespaces. Without it, an object a tenant writes into its own
namespace in the old layout (a namespace-wide ``*`` grant allows that) would be moved in at the
next start: once the move is done, nothing there is ever read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from apiserver.kube.client import KubeClient, KubeRejected
from apiserver.kube.paths import CORE, namespaced
from apiserver.registry.kube_objects import (
    INSTANCE_LABEL,
    STORAGE_API,
    STORAGE_GROUP,
    StorageKind,
    storage_kind,
    storage_object,
)
from apiserver.registry.objects import metadata
from apiserver.registry.resources import ResourceType
from apiserver.registry.store import Object

log = logging.getLogger(__name__)

PAGE_SIZE = 500
RETRY_SECONDS = 30.0
LAYOUT1_INSTANCE_LABEL = f"{STORAGE_GROUP}/instance"
"""Layout 1's label of the installation that wrote a storage object (this layout's is
``kube_objects.INSTANCE_LABEL``, another key)."""
LAYOUT = "2"
_IDENTITY = ("name", "namespace", "uid", "creationTimestamp")
"""What layout 1 kept in the storage object's metadata rather than in ``object``."""


def layout1_selector(instance: str) -> str:
    """The label selector of an instance's layout-1 storage objects."""
    return f"{LAYOUT1_INSTANCE_LABEL}={instance}"


def layout_marker(instance: str) -> str:
    """The name of the ConfigMap that says an instance's storage is in this layout."""
    return f"{instance}-storage-layout"


def layout1_public(old: Object) -> Object | None:
    """The public object a layout-1 storage object holds (without resourceVersion); None if
    its ``object`` is not an object (nothing of it can be read)."""
    inner = old.get("object")
    if not isinstance(inner, dict):
        return None
    public = dict(inner)
    meta = {k: v for k, v in metadata(inner).items() if k != "resourceVersion"}
    stored_meta = metadata(old)
    for key in _IDENTITY:
        if key in stored_meta:
            meta[key] = stored_meta[key]
    public["metadata"] = meta
    return public


class LayoutMigration:
    """Moves one instance's layout-1 objects into `storage_namespace` (see the module)."""

    def __init__(self, kube: KubeClient, *, storage_namespace: str, instance: str,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._kube = kube
        self._clock, self._sleep = clock, sleep
        self._storage_namespace = storage_namespace
        self._instance = instance

    async def run(self, resources: Iterable[ResourceType]) -> dict[str, int]:
        """Move every layout-1 object of `resources`, unless the marker says it was done; the
        number moved per storage plural. kube-apiserver unavailable propagates (the start fails
        and is retried); a listing this replica may not make (403) is logged and skipped, and
        then the move is not marked done."""
        if await self._marked():
            return {}
        moved: dict[str, int] = {}
        complete = True
        for resource in resources:
            kind = storage_kind(resource)
            try:
                olds = await self._layout1_objects(kind)
            except KubeRejected as error:
                if error.status_code != 403:
                    raise
                log.warning("cannot list layout-1 storage objects; none moved", extra={
                    "resource": kind.crd_name, "reason": "the server may not list them in "
                    "every namespace: grant the ClusterRole container-notifier:storage-migration "
                    "(apiservice/rbac-server.yaml)"})
                complete = False
                continue
            count = 0
            for old in olds:
                count += await self._move(kind, old)
            if count:
                log.info("moved layout-1 storage objects", extra={
                    "resource": kind.crd_name, "moved": count,
                    "storage_namespace": self._storage_namespace})
            moved[kind.plural] = count
        if complete:
            await self._mark()
        return moved

    async def _list(self, path: str, params: dict[str, str]) -> Object:
        """A list; while kube-apiserver answers 429 (its storage of a CRD established a moment
        ago is still initializing), again after a second, for up to ``RETRY_SECONDS``."""
        deadline = self._clock() + RETRY_SECONDS
        while True:
            try:
                return await self._kube.get(path, params)
            except KubeRejected as error:
                if error.status_code != 429 or self._clock() >= deadline:
                    raise
            await self._sleep(1.0)

    def _marker_path(self, name: str = "") -> str:
        return namespaced(CORE, self._storage_namespace, "configmaps", name)

    async def _marked(self) -> bool:
        try:
            marker = await self._kube.get(self._marker_path(layout_marker(self._instance)))
        except KubeRejected as error:
            if error.status_code == 404:
                return False
            raise
        data = marker.get("data")
        return isinstance(data, dict) and data.get("layout") == LAYOUT

    async def _mark(self) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": layout_marker(self._instance),
                             "labels": {INSTANCE_LABEL: self._instance}},
                "data": {"layout": LAYOUT}}
        try:
            await self._kube.post(self._marker_path(), body)
        except KubeRejected as error:
            if error.status_code != 409:  # another replica marked it
                raise

    async def _layout1_objects(self, kind: StorageKind) -> list[Object]:
        found: list[Object] = []
        token = ""
        while True:
            params = {"labelSelector": layout1_selector(self._instance),
                      "limit": str(PAGE_SIZE)}
            if token:
                params["continue"] = token
            page = await self._list(kind.collection, params)
            found.extend(item for item in page.get("items") or [] if isinstance(item, dict))
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return found

    async def _move(self, kind: StorageKind, old: Object) -> int:
        """Copy `old` into the storage namespace, unless an earlier move did, and delete it; 1
        if this call moved it."""
        old_meta = metadata(old)
        public = layout1_public(old)
        if public is None:
            log.warning("layout-1 storage object unreadable; left in place", extra={
                "resource": kind.crd_name, "namespace": old_meta.get("namespace"),
                "object": old_meta.get("name"),
                "reason": "its object field is not an object: delete it"})
            return 0
        sequence = old.get("sequence")
        body = storage_object(kind, self._storage_namespace, self._instance, public,
                              sequence if isinstance(sequence, int) else 0)
        if not await self._copied(kind, body):
            return 0
        old_path = namespaced(STORAGE_API, str(old_meta.get("namespace", "")), kind.plural,
                              str(old_meta.get("name", "")))
        try:
            await self._kube.delete(old_path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                               "preconditions": {"uid": old_meta.get("uid")}})
        except KubeRejected as error:
            if error.status_code in (404, 409):  # moved by another replica meanwhile
                return 0
            raise
        return 1

    async def _copied(self, kind: StorageKind, body: Object) -> bool:
        """Create the layout-2 object; True too if an earlier move made it (the same public
        uid: that copy may have been written since, so it stays as it is); False (logged) if
        another object holds its name."""
        try:
            await self._kube.post(namespaced(STORAGE_API, self._storage_namespace, kind.plural),
                                  body)
            return True
        except KubeRejected as error:
            if error.status_code != 409:
                raise
        name = metadata(body)["name"]
        existing = await self._kube.get(namespaced(STORAGE_API, self._storage_namespace,
                                                   kind.plural, name))
        inner = existing.get("object")
        public = metadata(body["object"])
        if isinstance(inner, dict) and metadata(inner).get("uid") == public.get("uid"):
            return True
        log.error("layout-1 storage object not moved: its new name is taken", extra={
            "resource": kind.crd_name, "namespace": public.get("namespace"),
            "object": public.get("name"), "storage_namespace": self._storage_namespace,
            "storage_name": name,
            "reason": "another object is stored under that name; delete one of them"})
        return False
