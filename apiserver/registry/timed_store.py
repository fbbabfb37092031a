"""An ``ObjectStore`` decorator that times each operation of the store it wraps.

The composition root wraps every backend's store in one ``TimedObjectStore`` (no backend times
itself), so the histogram covers the SQLite and the Kubernetes backends alike. The time counts
whether the operation succeeds or raises.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from apiserver.registry.store import Cohort, ListResult, Object, ObjectStore
from apiserver.registry.watch import Watch

OPERATIONS = ("get", "list", "watch", "create", "update", "delete", "deletecollection",
              "consistentread")
"""The ``operation`` label values, one per ``ObjectStore`` method (``update`` is
``guaranteed_update``; ``watch`` times the opening of a watch, not its length;
``consistentread`` is ``consistent_read``, the wait before a public read)."""


class StoreObserver(Protocol):
    def store_operation_finished(self, operation: str, resource: str,
                                 duration_seconds: float) -> None:
        """An operation of `OPERATIONS` on the store of `resource` (its plural) ended."""


class TimedObjectStore(ObjectStore):
    """`inner`, with the duration of each operation reported to `observer`."""

    def __init__(self, inner: ObjectStore, observer: StoreObserver) -> None:
        self.resource = inner.resource
        self.max_object_bytes = inner.max_object_bytes
        self._inner = inner
        self._observer = observer

    @contextlib.contextmanager
    def _timer(self, operation: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self._observer.store_operation_finished(operation, self.resource.plural,
                                                    time.monotonic() - start)

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        with self._timer("create"):
            return await self._inner.create(obj, cohort=cohort)

    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        with self._timer("consistentread"):
            await self._inner.consistent_read(namespace, name)

    async def get(self, namespace: str, name: str) -> Object:
        with self._timer("get"):
            return await self._inner.get(namespace, name)

    async def get_current(self, namespace: str, name: str) -> Object:
        with self._timer("get"):
            return await self._inner.get_current(namespace, name)

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        with self._timer("update"):
            return await self._inner.guaranteed_update(namespace, name, mutate)

    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        with self._timer("delete"):
            return await self._inner.delete(namespace, name, resource_version=resource_version,
                                            uid=uid)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        with self._timer("deletecollection"):
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
        with self._timer("list"):
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
        with self._timer("watch"):
            return await self._inner.watch(namespace, resource_version=resource_version,
                                           label_selector=label_selector,
                                           field_selector=field_selector)

    def close(self) -> None:
        self._inner.close()

