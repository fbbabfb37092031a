"""The generic storage interface: one resource's objects, with Kubernetes semantics.

A backend implements ``ObjectStore`` and nothing else; what is particular to a resource lives
in its ``ResourceType`` (which fields are selectable and indexed, ``resources``) and in the
strategies layered on top of any backend (``podnotifiers``), as kube-apiserver layers
``RESTCreateStrategy`` over ``genericregistry.Store`` over ``storage.Interface``.

Objects are plain JSON-shaped dicts. The store owns ``metadata.uid``,
``metadata.resourceVersion`` and ``metadata.creationTimestamp``, and turns
``metadata.generateName`` into a name. resourceVersions come from one strictly increasing
counter shared by every resource of the backend: every create, modification and deletion takes
the next value, a write that fails takes none. Everything else is the API layer's to validate.
Errors are ``apiserver.registry.errors.StoreError`` kinds; a backend that cannot write (full
disk, I/O error, lost connection) raises ``StorageUnavailable`` (503), never its own errors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from apiserver.registry.errors import NotFound
from apiserver.registry.objects import already_exists, check_size, checked_new, generate_name
from apiserver.registry.resources import ResourceType
from apiserver.registry.watch import Watch

Object = dict[str, Any]
T = TypeVar("T")

DEFAULT_MAX_OBJECT_BYTES = 256 * 1024
"""The size cap of a stored object (its JSON encoding) unless a store is given another; the API
layer keeps what it writes below it (e.g. the output tails of a record)."""


@dataclass(frozen=True)
class ListResult:
    items: list[Object]
    resource_version: str
    """The snapshot the page was read from (``ListMeta.resourceVersion``)."""
    continue_token: str = ""
    """Empty on the last page."""


@dataclass(frozen=True)
class Cohort:
    """The objects a create makes room among, decided on atomically with the create.

    The cohort is the current objects in the new object's namespace that match
    ``field_selector`` (on the resource's ``indexed_fields``, which a backend indexes, so this is
    not a scan). When it already holds ``limit`` objects or more, its oldest (creation order)
    that match ``evictable`` (also on indexed fields) are deleted before the create until the
    cohort, the new object included, holds ``low_water`` (fewer if fewer are evictable): room
    for ``limit - low_water`` more creates without another eviction, so that evictions come in
    batches (one request on the Kubernetes backend).

    ``admit``, if given, decides whether the new object may be stored among the members created
    before it, as an etcd lock is held by the key of the lowest creation revision: it gets them
    (oldest first) as they were when the new object was created (so a member that ends a moment
    later still counts, and no moment ever holds more admitted objects than it allows), and
    raises a ``StoreError`` to
    refuse; a refused object is not stored (on SQLite it is never written; on Kubernetes, where
    the create must come first to have a place in the order, it is deleted again before the
    refusal is answered). Two creates into one cohort at once, through any replicas, are each
    decided against the other in one order: the later one sees the earlier one. It must be quick,
    with no I/O, and may run inside the storage transaction.
    """

    field_selector: str
    evictable: str
    limit: int
    low_water: int
    admit: Callable[[list[Object]], None] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.low_water <= self.limit:
            raise ValueError(f"a cohort needs 1 <= low_water <= limit, not low_water "
                             f"{self.low_water} and limit {self.limit}")

    def evicted(self, members: Sequence[T], evictable: Callable[[T], bool]) -> list[T]:
        """Of ``members`` (the cohort, oldest first), those to delete before the create."""
        if len(members) < self.limit:
            return []
        excess = len(members) + 1 - self.low_water
        return [member for member in members if evictable(member)][:excess]


class ObjectStore(ABC):
    """Storage for the objects of one namespaced resource."""

    resource: ResourceType
    max_object_bytes: int
    """The size cap of one object (``objects.check_size``), checked on every write."""

    async def check_create(self, obj: Mapping[str, Any]) -> Object:
        """Every check ``create`` makes of `obj`, storing nothing (a dry run): the same
        ``Invalid``, ``BadRequest``, ``AlreadyExists`` (the name is taken now) and ``TooLarge``,
        through the same code. Returns `obj` as create would store it before the store stamps
        its identity: with a name (one generated from generateName, not reserved)."""
        prepared = checked_new(self.resource, obj)
        meta = prepared["metadata"]
        if meta.get("name"):
            try:
                await self.get(meta["namespace"], meta["name"])
            except NotFound:
                pass
            else:
                raise already_exists(self.resource, meta["name"])
        else:
            meta["name"] = generate_name(meta["generateName"])
        check_size(self.resource, prepared, self.max_object_bytes)
        return prepared

    @abstractmethod
    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        """Store a new object (``metadata.namespace`` and a name or generateName required).

        With ``cohort``, atomically on this server: delete the members ``Cohort.evicted``
        names (each deletion takes its own resourceVersion, before the create's), then create.
        Raises ``AlreadyExists`` if the name is taken, ``TooLarge`` over the size cap,
        ``Invalid`` without namespace or name, ``BadRequest`` if a resourceVersion is set.
        """

    def check_update(self, obj: Mapping[str, Any]) -> None:
        """Every check ``guaranteed_update`` makes of the object it would store (the size
        cap: ``TooLarge``), storing nothing (a dry run)."""
        check_size(self.resource, obj, self.max_object_bytes)

    @abstractmethod
    async def get(self, namespace: str, name: str) -> Object:
        """Raises ``NotFound``."""

    @abstractmethod
    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        """Return once this store's ``get`` of ``namespace``/``name`` (with a name and a
        namespace) or ``list`` of ``namespace`` (every namespace if None) sees every write the
        storage acknowledged before the call, whichever replica made it: kube-apiserver's
        consistent read (a read without a resourceVersion). The public API's reads without a
        resourceVersion await it before reading; the server's own reads do not (they read this
        replica's cache). A store whose reads always see every write (one process) returns at
        once. Raises ``StorageUnavailable`` if the store cannot catch up."""

    async def get_current(self, namespace: str, name: str) -> Object:
        """The object as the storage holds it now, never a cache's older copy (a read: e.g. to
        confirm a decision taken on the cache). This default is for stores without a cache:
        ``get``. Raises ``NotFound``."""
        return await self.get(namespace, name)

    @abstractmethod
    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        """Apply ``mutate`` to the current object and store the result, atomically.

        ``mutate`` gets a copy it may change and return; it may run on a worker thread inside
        the storage transaction, so it must be quick and touch nothing but its argument. An
        exception it raises aborts the update. Identity fields (name, namespace, uid,
        creationTimestamp) are kept from the stored object; a result equal to the stored object
        is not written and keeps its resourceVersion. Raises ``NotFound``, ``TooLarge``.
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
        """Delete every matching object in one write, each with its own resourceVersion;
        returns them in (namespace, name) order."""

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
        left the retained history; ``InvalidSelector`` for a bad selector; ``BadRequest`` for a
        malformed continue token or a negative limit.
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
        retained history: ``Expired`` (410); newer than the store: ``ResourceVersionTooLarge``;
        not a decimal number: ``BadRequest``. A watcher that falls too far behind ends with
        ``Expired`` (see ``Watch``).
        """

    @abstractmethod
    def close(self) -> None:
        """End every open watch."""
