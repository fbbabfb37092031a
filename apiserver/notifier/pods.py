"""A live index of the cluster's pods, from one list and watch of all pods.

It reads metadata only (PartialObjectMetadata, a fraction of a pod's size) and keeps each pod's
UID, so that runs learn at once when their pod is deleted (one watch for the whole server
instead of one per run) and garbage collection can tell which records belong to pods that no
longer exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from apiserver.kube import (
    METADATA_ONLY,
    METADATA_ONLY_WATCH,
    KubeClient,
    KubeRejected,
    KubeUnavailable,
)

log = logging.getLogger(__name__)

PodKey = tuple[str, str]
"""(namespace, name)"""

LIST_PAGE_SIZE = "500"
WATCH_TIMEOUT_SECONDS = "300"
RETRY_SECONDS = 2.0


class PodDirectory:
    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._uids: dict[PodKey, str] = {}
        self._waiters: dict[tuple[str, str, str], set[asyncio.Event]] = {}
        self.synced = asyncio.Event()
        """Set once the first list has been read."""
        self.deletions = 0
        """How many pod deletions the index has seen; records can only become orphans when it
        grows (or when the server starts)."""

    def uid(self, namespace: str, name: str) -> str | None:
        """The UID of the pod as last seen, or None if it does not exist (or not synced)."""
        return self._uids.get((namespace, name))

    def gone(self, namespace: str, name: str, uid: str) -> bool:
        """True if the index is synced and that pod (that UID) no longer exists."""
        return self.synced.is_set() and self._uids.get((namespace, name)) != uid

    @contextlib.contextmanager
    def deletion(self, namespace: str, name: str, uid: str) -> Iterator[asyncio.Event]:
        """An event set when the pod with that UID is deleted (or already is)."""
        event = asyncio.Event()
        key = (namespace, name, uid)
        self._waiters.setdefault(key, set()).add(event)
        if self.gone(namespace, name, uid):
            event.set()
        try:
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    async def run(self) -> None:
        """List, then watch, for ever; re-list after an expired watch or an error."""
        while True:
            try:
                resource_version = await self._list()
                await self._watch(resource_version)
            except (KubeUnavailable, KubeRejected) as error:
                log.warning("pod index: list/watch failed, retrying",
                            extra={"error": str(error)})
                await asyncio.sleep(RETRY_SECONDS)
            except Exception:
                log.exception("pod index: unexpected failure, re-listing")
                await asyncio.sleep(RETRY_SECONDS)

    async def _list(self) -> str:
        seen: dict[PodKey, str] = {}
        token = ""
        while True:
            params = {"limit": LIST_PAGE_SIZE}
            if token:
                params["continue"] = token
            page = await self._kube.get("/api/v1/pods", params=params, accept=METADATA_ONLY)
            # An empty PartialObjectMetadataList has "items": null.
            for pod in page.get("items") or []:
                meta = pod["metadata"]
                seen[(meta["namespace"], meta["name"])] = meta["uid"]
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                break
        for (namespace, name), uid in list(self._uids.items()):
            if seen.get((namespace, name)) != uid:
                self._deleted(namespace, name, uid)
        self._uids = seen
        self.synced.set()
        return page["metadata"]["resourceVersion"]

    async def _watch(self, resource_version: str) -> None:
        params = {"resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        while True:
            async for event in self._kube.watch("/api/v1/pods", params,
                                                accept=METADATA_ONLY_WATCH):
                kind, obj = event.get("type"), event.get("object", {})
                if kind == "ERROR":
                    return  # usually 410 Expired: re-list
                meta: dict[str, Any] = obj.get("metadata", {})
                params["resourceVersion"] = meta.get("resourceVersion",
                                                     params["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                key = (meta["namespace"], meta["name"])
                if kind == "DELETED":
                    if self._uids.get(key) == meta["uid"]:
                        del self._uids[key]
                    self._deleted(key[0], key[1], meta["uid"])
                else:
                    old = self._uids.get(key)
                    if old is not None and old != meta["uid"]:
                        self._deleted(key[0], key[1], old)
                    self._uids[key] = meta["uid"]

    def _deleted(self, namespace: str, name: str, uid: str) -> None:
        self.deletions += 1
        for event in self._waiters.get((namespace, name, uid), ()):
            event.set()
