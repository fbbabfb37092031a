"""The namespace lifecycle of stored objects, now that their storage objects are not in their
namespace (docs/storage.md, *Namespaces*).

- ``NamespaceGuardedStore`` refuses, as kube-apiserver's NamespaceLifecycle admission does, to
  create (or dry-run create) an object in a namespace that does not exist (404) or is being
  deleted (403).
- ``collect_deleted_namespaces`` deletes the objects of namespaces that no longer exist: the
  namespace controller deletes them through the served API (deletecollection) before the
  namespace goes; this catches what it could not reach (the API was unavailable) or what was
  created meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from apiserver.registry.errors import NotFound
from apiserver.registry.objects import metadata
from apiserver.registry.paging import all_objects
from apiserver.registry.store import Cohort, ListResult, Object, ObjectStore
from apiserver.registry.watch import Watch

log = logging.getLogger(__name__)

COLLECT_INTERVAL_SECONDS = 30.0


class Namespaces(Protocol):
    async def check_open(self, namespace: str) -> None:
        """Raise unless `namespace` exists and is not being deleted."""

    async def gone(self, namespace: str) -> bool:
        """Whether `namespace` is known not to exist."""


class NamespaceGuardedStore(ObjectStore):
    """`inner`, refusing creates in missing or terminating namespaces."""

    def __init__(self, inner: ObjectStore, namespaces: Namespaces) -> None:
        self.resource = inner.resource
        self.max_object_bytes = inner.max_object_bytes
        self._inner = inner
        self._namespaces = namespaces

    async def _check(self, obj: Mapping[str, Any]) -> None:
        namespace = metadata(obj).get("namespace")
        if isinstance(namespace, str) and namespace:
            await self._namespaces.check_open(namespace)

    async def check_create(self, obj: Mapping[str, Any]) -> Object:
        await self._check(obj)
        return await self._inner.check_create(obj)

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        await self._check(obj)
        return await self._inner.create(obj, cohort=cohort)

    def check_update(self, obj: Mapping[str, Any]) -> None:
        self._inner.check_update(obj)

    async def get(self, namespace: str, name: str) -> Object:
        return await self._inner.get(namespace, name)

    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        await self._inner.consistent_read(namespace, name)

    async def get_current(self, namespace: str, name: str) -> Object:
        return await self._inner.get_current(namespace, name)

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        return await self._inner.guaranteed_update(namespace, name, mutate)

    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        return await self._inner.delete(namespace, name, resource_version=resource_version,
                                        uid=uid)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        return await self._inner.delete_collection(
            namespace, label_selector=label_selector, field_selector=field_selector)

    async def list(
        self,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> ListResult:
        return await self._inner.list(namespace, label_selector=label_selector,
                                      field_selector=field_selector, limit=limit,
                                      continue_token=continue_token)

    async def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        return await self._inner.watch(namespace, resource_version=resource_version,
                                       label_selector=label_selector,
                                       field_selector=field_selector)

    def close(self) -> None:
        self._inner.close()


async def collect_deleted_namespaces(store: ObjectStore, namespaces: Namespaces) -> int:
    """Delete every object of `store` whose namespace is gone; how many were deleted."""
    found = {str(metadata(obj).get("namespace", "")) async for obj in all_objects(store)}
    deleted = 0
    for namespace in sorted(found):
        if namespace and await namespaces.gone(namespace):
            try:
                deleted += len(await store.delete_collection(namespace))
            except NotFound:
                continue
    return deleted


async def collect_forever(store: ObjectStore, namespaces: Namespaces, *,
                          interval: float = COLLECT_INTERVAL_SECONDS) -> None:
    """``collect_deleted_namespaces`` every `interval` seconds, until cancelled."""
    while True:
        try:
            deleted = await collect_deleted_namespaces(store, namespaces)
            if deleted:
                log.info("deleted the objects of deleted namespaces", extra={
                    "resource": store.resource.plural, "deleted": deleted})
        except Exception:
            log.exception("collecting deleted namespaces' objects failed; retrying")
        await asyncio.sleep(interval)
