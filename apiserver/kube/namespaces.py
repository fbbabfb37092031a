"""The cluster's namespaces, for the lifecycle of what the server stores in them.

kube-apiserver's NamespaceLifecycle admission refuses to create an object in a namespace that
does not exist or is being deleted; the storage objects no longer live in the users' namespaces
(docs/storage.md), so the server applies the same rule itself (``registry.namespace_guard``),
and its collector deletes what a deleted namespace left behind. A metadata-only informer on all
namespaces answers from memory; a namespace it does not hold is confirmed with a ``GET`` (one
created a moment ago may not have reached the cache yet).
"""

from __future__ import annotations

from typing import Any

from apiserver import errors
from apiserver.kube.client import KubeClient, KubeRejected
from apiserver.kube.informer import Informer
from apiserver.kube.paths import CORE, segment

NAMESPACES = f"{CORE}/namespaces"


def _identity(namespace: dict[str, Any]) -> dict[str, Any]:
    meta = namespace["metadata"]
    return {"metadata": {key: meta[key] for key in ("name", "uid", "resourceVersion",
                                                    "deletionTimestamp") if key in meta}}


class NamespaceDirectory:
    """Start it with ``asyncio.create_task(directory.run())``."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self.informer = Informer(kube, NAMESPACES, name="namespaces", metadata_only=True,
                                 transform=_identity)

    def has_synced(self) -> bool:
        return self.informer.has_synced()

    async def run(self) -> None:
        await self.informer.run()

    async def check_open(self, namespace: str) -> None:
        """As NamespaceLifecycle: ``NotFound`` (404) if `namespace` does not exist, ``Forbidden``
        (403) if it is being deleted."""
        meta = await self._metadata(namespace)
        if meta is None:
            raise errors.not_found("namespaces", "", namespace)
        if meta.get("deletionTimestamp"):
            raise errors.Forbidden(
                f"unable to create new content in namespace {errors.quoted(namespace)} because "
                "it is being terminated")

    async def gone(self, namespace: str) -> bool:
        """Whether `namespace` no longer exists (False until the cache has listed)."""
        return self.has_synced() and await self._metadata(namespace) is None

    async def _metadata(self, namespace: str) -> dict[str, Any] | None:
        cached = self.informer.get("", namespace)
        if cached is not None:
            return dict(cached["metadata"])
        try:
            found = await self._kube.get(f"{NAMESPACES}/{segment(namespace)}")
        except KubeRejected as error:
            if error.status_code == 404:
                return None
            raise
        meta = found.get("metadata")
        return dict(meta) if isinstance(meta, dict) else {}
