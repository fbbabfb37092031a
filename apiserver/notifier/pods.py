"""A live index of the cluster's pods: a metadata-only informer on all pods.

It keeps each pod's UID (PartialObjectMetadata trimmed to namespace, name, uid and
resourceVersion, a fraction of a pod's size), so that runs learn at once when their pod is
deleted (one watch for the whole server instead of one per run) and garbage collection can tell
which records belong to pods that no longer exist.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from apiserver.kube import KubeClient
from apiserver.kube.informer import Backoff, Handlers, Informer

PODS = "/api/v1/pods"


def _identity(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"metadata": {key: meta[key] for key in ("namespace", "name", "uid", "resourceVersion")
                         if key in meta}}


class PodDirectory:
    """The pod index. Start it with ``asyncio.create_task(directory.run())``; `synced` is set
    once the first list is in."""

    def __init__(self, kube: KubeClient, *, backoff: Backoff | None = None) -> None:
        self.informer = Informer(kube, PODS, name="pod-index", metadata_only=True,
                                 transform=_identity, backoff=backoff)
        self.informer.add_handlers(Handlers(on_delete=self._deleted))
        self._waiters: dict[tuple[str, str, str], set[asyncio.Event]] = {}
        self.deletions = 0
        """How many pod deletions the index has seen (including those a relist found); records
        can only become orphans when it grows (or when the server starts)."""

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list has been read."""
        return self.informer.synced

    async def run(self) -> None:
        """List, then watch, until cancelled (see `Informer.run`)."""
        await self.informer.run()

    def gone(self, namespace: str, name: str, uid: str) -> bool:
        """True if the index is synced and that pod (that UID) no longer exists."""
        if not self.synced.is_set():
            return False
        pod = self.informer.get(namespace, name)
        return pod is None or pod["metadata"].get("uid") != uid

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

    def _deleted(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.deletions += 1
        for event in self._waiters.get((meta.get("namespace", ""), meta["name"],
                                        meta.get("uid", "")), ()):
            event.set()
