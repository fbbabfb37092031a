"""The storage interface for notifier objects, with Kubernetes semantics.

Objects are plain JSON-shaped dicts. The store owns ``metadata.uid``,
``metadata.resourceVersion`` (one global, strictly increasing counter; every create, update
and delete takes the next value) and ``metadata.creationTimestamp``, and turns
``metadata.generateName`` into a name. Everything else is the API layer's to validate.
Errors are ``apiserver.registry.errors.StoreError`` subclasses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apiserver.registry.resources import ResourceType
from apiserver.registry.watch import Watch

Object = dict[str, Any]


@dataclass(frozen=True)
class ListResult:
    items: list[Object]
    resource_version: str
    """The snapshot the page was read from (``ListMeta.resourceVersion``)."""
    continue_token: str = ""
    """Empty on the last page."""


@dataclass(frozen=True)
class BoundedCreate:
    object: Object
    evicted: list[Object]
    """Finished records of the same pod deleted to make room, oldest first."""


class ObjectStore(ABC):
    """Storage for the objects of one namespaced resource."""

    resource: ResourceType

    @abstractmethod
    async def create(self, obj: Mapping[str, Any]) -> Object:
        """Store a new object (``metadata.namespace`` and a name or generateName required).

        Raises ``AlreadyExists`` if the name is taken, ``TooLarge`` over the size cap.
        """

    @abstractmethod
    async def get(self, namespace: str, name: str) -> Object:
        """Raises ``NotFound``."""

    @abstractmethod
    async def update(self, obj: Mapping[str, Any]) -> Object:
        """Replace an object; its ``metadata.resourceVersion``, if set, must be current.

        Identity fields (uid, creationTimestamp) are kept from the stored object. An update
        that changes nothing is not written. Raises ``NotFound``, ``Conflict``, ``TooLarge``.
        """

    @abstractmethod
    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        """Apply ``mutate`` to the current object and store the result, atomically.

        ``mutate`` gets a copy it may change and return; it may run on a worker thread inside
        the storage transaction, so it must be quick and touch nothing but its argument. An
        exception it raises aborts the update.
        """

    @abstractmethod
    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        """Delete and return the object as it was, stamped with the deletion's version.

        Non-empty ``resource_version`` or ``uid`` are preconditions (``Conflict``).
        """

    @abstractmethod
    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        """Delete every matching object, each with its own resourceVersion."""

    @abstractmethod
    async def list(
        self,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> ListResult:
        """Objects in (namespace, name) order; all namespaces if ``namespace`` is None.

        With ``limit``, pages come from one snapshot: the continue token carries its
        resourceVersion, so writes between pages do not show. ``Expired`` if the snapshot has
        left the retained history; ``InvalidSelector`` for a bad selector.
        """

    @abstractmethod
    async def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        """Changes after ``resource_version``, in order.

        Empty or ``"0"``: the current objects as ADDED events, then changes. Older than the
        retained history: ``Expired`` (410); newer than the store: ``ResourceVersionTooLarge``.
        """

    @abstractmethod
    async def create_bounded(
        self, obj: Mapping[str, Any], *, max_per_pod: int, retry_after_seconds: int = 5
    ) -> BoundedCreate:
        """Create a per-pod record (``spec.podName``, ``spec.notifier``), bounding the pod's.

        Atomically: ``Conflict`` if an unfinished record of the same notifier exists for the
        pod; else delete the pod's oldest finished records to keep at most ``max_per_pod``,
        or raise ``TooManyRequests`` if too many are unfinished; then create.
        """

    @abstractmethod
    async def delete_expired(self, now: datetime, default_ttl_seconds: int) -> list[Object]:
        """Delete finished records whose completionTime plus TTL is not after ``now``.

        The TTL is ``spec.ttlSecondsAfterFinished``, else ``default_ttl_seconds``. Records
        without a completionTime never expire.
        """

    @abstractmethod
    async def unfinished(self) -> list[Object]:
        """Every record not Succeeded or Failed, in all namespaces (for restart recovery)."""

    @abstractmethod
    def close(self) -> None:
        """End every open watch."""
