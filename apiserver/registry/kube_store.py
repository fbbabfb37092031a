"""``ObjectStore`` on the Kubernetes API: each object is a custom resource of a storage-only group.

A record ``podnotifiers/<ns>/<name>`` is stored as ``storedpodnotifiers/<storage ns>/<ns>.<name>``
of ``storage.notifier.x-k8s.io/v1alpha1`` (CRDs in ``apiservice/storage-crds.yaml``; the name:
``storage_name``), in the server's own namespace, where no tenant's namespace-scoped grant
reaches. The public object is the storage object's ``object`` field, its whole metadata included
(name, namespace, uid, creationTimestamp: the server sets them), with the storage object's
resourceVersion. Every storage object carries the ``INSTANCE_LABEL`` of the installation that
wrote it and the ``NAMESPACE_LABEL`` of its public namespace; a store sees only its own
instance's objects. (Layout 1, every object in its public namespace, is moved here by
``registry.layout_migration``.)

Reads (get, list, watch) are served from an informer cache of the storage collection
(``kube.informer``) with the storage objects' resourceVersions, so a list on one replica and a
watch on another agree. The store keeps a bounded window of the cache's recent changes: it
replays watches from a resourceVersion and rebuilds the snapshot a continue token names;
anything older than the window (or than the cache's last list) is ``Expired`` (410). Writes go
to kube-apiserver (optimistic concurrency on resourceVersion, DeleteOptions preconditions) and
return once the cache holds them, so a write is visible to the next read on this replica.

resourceVersions are compared as integers: kube-apiserver's are etcd revisions (the
"comparable resourceVersion" of KEP-5504). See docs/storage.md.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import hashlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from apiserver.api.json_input import as_printable
from apiserver.api.validation import dns1123_label_errors, dns1123_subdomain_errors
from apiserver.kube.client import METADATA_ONLY, KubeClient, KubeRejected, KubeUnavailable
from apiserver.kube.informer import Handlers, Informer
from apiserver.kube.paths import namespaced, segment
from apiserver.registry.decoding import (
    Decoder,
    Malformed,
    decoded,
    mapping,
    optional_integer,
    public_object,
    text,
)
from apiserver.registry.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    MalformedObject,
    NotFound,
    ResourceVersionTooLarge,
    StorageNotInstalled,
    StorageUnavailable,
    StoreError,
    TooLarge,
    check_preconditions,
    not_found,
)
from apiserver.registry.objects import (
    GENERATE_NAME_ATTEMPTS,
    already_exists,
    check_size,
    checked_new,
    generate_name,
    metadata,
    no_free_name,
)
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import (
    FieldSelector,
    field_value,
    parse_field_selector,
)
from apiserver.registry.store import (
    DEFAULT_MAX_OBJECT_BYTES,
    Cohort,
    ListResult,
    Object,
    ObjectStore,
)
from apiserver.registry.tokens import decode_continue, encode_continue, parse_resource_version
from apiserver.registry.watch import (
    DEFAULT_MAX_QUEUED_EVENTS,
    Change,
    EventType,
    Watch,
    WatchEvent,
    WatchFilter,
    WatchHub,
    selection,
)
from apiserver.timestamps import timestamp

log = logging.getLogger(__name__)

STORAGE_GROUP = "storage.notifier.x-k8s.io"
STORAGE_VERSION = "v1alpha1"
STORAGE_API = f"/apis/{STORAGE_GROUP}/{STORAGE_VERSION}"
INSTANCE_LABEL = f"{STORAGE_GROUP}/installation"
"""The installation (instance) that wrote a storage object. Not layout 1's label
(``layout_migration.LAYOUT1_INSTANCE_LABEL``), so that a replica of layout 1 still running
during an upgrade does not see this layout's objects (it would read them as objects of the
storage namespace, and its collector would delete them as records of pods that do not exist)."""
DEFAULT_INSTANCE = "container-notifier"
NAMESPACE_LABEL = f"{STORAGE_GROUP}/namespace"
"""The public object's namespace, on every storage object (to select a namespace's objects)."""
SEQUENCE_LABEL = f"{STORAGE_GROUP}/sequence"
"""The storage object's ``sequence`` (creation order), so that one DELETE of the collection can
select "no later than" a member of a cohort."""
_FIELD_LABEL_DIGITS = 32
CREATED_REVISION = "createdRevision"
"""The storage objects' field that keeps the resourceVersion of their creation (every update
writes it), by which a cohort admits a create among the members created before it."""
MAX_NAME_LENGTH = 253
"""A custom resource's name is a DNS-1123 subdomain."""
_NAME_DIGEST_LENGTH = 16
DEFAULT_HISTORY = 10_000
"""Changes kept per store for watches from a resourceVersion and continue tokens (the SQLite
backend's event retention)."""
SYNC_TIMEOUT_SECONDS = 10.0
"""How long a request waits for the cache: its first list, or a write of this replica."""
CATCH_UP_SECONDS = 3.0
"""How long a watch from a resourceVersion the cache has not reached waits for it (kube-apiserver's
watch cache waits 3 s too) before it is ``ResourceVersionTooLarge``, and a consistent read for
the cache to hold what kube-apiserver listed before it is ``StorageUnavailable``."""
_KEPT_ON_UPDATE = ("name", "namespace", "uid", "creationTimestamp", "generateName")

Key = tuple[str, str]


@dataclass(frozen=True)
class StorageKind:
    """The CRD that stores one public resource."""

    plural: str
    kind: str
    indexed_fields: tuple[str, ...] = ()
    """The public resource's ``indexed_fields``, each mirrored on the storage object as a
    label (``field_label``), so that kube-apiserver selects a cohort's members itself."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{STORAGE_GROUP}"

    @property
    def collection(self) -> str:
        return f"{STORAGE_API}/{self.plural}"


def storage_kind(resource: ResourceType) -> StorageKind:
    """``podnotifiers`` (``PodNotifier``) is stored as ``storedpodnotifiers``
    (``StoredPodNotifier``)."""
    return StorageKind(f"stored{resource.plural}", f"Stored{resource.kind}",
                       resource.indexed_fields)


def field_label(field: str) -> str:
    """The storage label that mirrors the public indexed field ``field`` (``spec.podName``:
    ``storage.notifier.x-k8s.io/spec.podName``)."""
    return f"{STORAGE_GROUP}/{field}"


def field_label_value(value: str) -> str:
    """A field's value as a label value: the start of its SHA-256 (any text, any length, fits
    the 63 characters of a label value)."""
    return hashlib.sha256(value.encode()).hexdigest()[:_FIELD_LABEL_DIGITS]


def storage_labels(kind: StorageKind, instance: str, obj: Object, sequence: int
                   ) -> dict[str, str]:
    """The labels of the storage object that holds the public object ``obj``."""
    return {INSTANCE_LABEL: instance, NAMESPACE_LABEL: metadata(obj)["namespace"],
            SEQUENCE_LABEL: str(sequence),
            **{field_label(field): field_label_value(field_value(obj, field))
               for field in kind.indexed_fields}}


def storage_name(namespace: str, name: str) -> str:
    """The storage object's name of the public object ``namespace/name``: ``<namespace>.<name>``
    (a namespace is a DNS label, without a dot, so the first dot divides the two), or, when that
    is longer than a name may be, ``<namespace>.<the name's start>-<sha256 of the name>``."""
    joined = f"{namespace}.{name}"
    if len(joined) <= MAX_NAME_LENGTH:
        return joined
    digest = hashlib.sha256(name.encode()).hexdigest()[:_NAME_DIGEST_LENGTH]
    head = name[:MAX_NAME_LENGTH - len(namespace) - 2 - _NAME_DIGEST_LENGTH].rstrip(".-")
    return f"{namespace}.{head}-{digest}"


def storage_selector(instance: str) -> str:
    """The label selector of an instance's storage objects (of this layout)."""
    return f"{INSTANCE_LABEL}={instance}"


def storage_object(kind: StorageKind, storage_namespace: str, instance: str, obj: Object,
                   sequence: int, created_revision: int = 0) -> Object:
    """The storage object that holds the public object `obj` (its resourceVersion, if any,
    becomes the storage object's: a write's precondition); ``created_revision`` (0 on a create:
    kube-apiserver gives the creation its revision) is kept by every later write."""
    meta = metadata(obj)
    inner = copy.deepcopy(obj)
    inner["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    stored_meta: dict[str, Any] = {
        "name": storage_name(meta["namespace"], meta["name"]), "namespace": storage_namespace,
        "labels": storage_labels(kind, instance, obj, sequence)}
    if meta.get("resourceVersion"):
        stored_meta["resourceVersion"] = meta["resourceVersion"]
    stored: Object = {"apiVersion": f"{STORAGE_GROUP}/{STORAGE_VERSION}", "kind": kind.kind,
                      "metadata": stored_meta, "sequence": sequence, "object": inner}
    if created_revision:
        stored[CREATED_REVISION] = created_revision
    return stored


async def check_installed(kube: KubeClient, resources: Iterable[ResourceType]) -> None:
    """Raise ``StorageNotInstalled`` (one line, naming each CRD and what is wrong) unless the
    storage CRD of every resource exists and is Established."""
    problems = []
    for resource in resources:
        name = storage_kind(resource).crd_name
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{segment(name)}"
        try:
            crd = await kube.get(path)
        except KubeRejected as error:
            problems.append(f"{name} is not installed" if error.status_code == 404 else
                            f"{name} cannot be read ({error.status_code} "
                            f"{error.answer_reason or 'error'})")
            continue
        except KubeUnavailable as error:
            raise StorageNotInstalled(f"--storage=kubernetes: cannot check the storage CRDs: "
                                      f"{error}") from error
        conditions = (crd.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions):
            problems.append(f"{name} is not Established")
        elif not _declares(crd, CREATED_REVISION):
            problems.append(f"{name} is out of date (its schema has no {CREATED_REVISION}, "
                            "which kube-apiserver would drop from every write of this version)")
    if problems:
        raise StorageNotInstalled(
            f"--storage=kubernetes: {'; '.join(problems)}: apply apiservice/storage-crds.yaml "
            "and the server's RBAC in apiservice/rbac-server.yaml (kubectl apply -k "
            "apiservice/ installs both) and start again")


def _declares(crd: Mapping[str, Any], field_name: str) -> bool:
    """Whether the CRD's storage version declares the top-level field ``field_name`` (a
    structural schema prunes what it does not declare)."""
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("storage"):
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            return field_name in (schema.get("properties") or {})
    return False


def _rv(obj: Mapping[str, Any]) -> int:
    text = str(metadata(obj).get("resourceVersion") or "0")
    return int(text) if text.isdigit() else 0


def _key(obj: Mapping[str, Any]) -> Key:
    """The (namespace, name) of a public object."""
    meta = metadata(obj)
    return meta.get("namespace", ""), meta.get("name", "")


def _storage_name_of(stored: Mapping[str, Any]) -> str:
    return str(metadata(stored).get("name", ""))


_BY_NAMESPACE_LABEL = "namespace-label"
"""The informer's index of storage objects by their ``NAMESPACE_LABEL`` (a consistent read of a
namespace compares exactly what kube-apiserver lists with that label)."""


def _labelled_namespace(stored: Object) -> list[str]:
    value = (metadata(stored).get("labels") or {}).get(NAMESPACE_LABEL)
    return [value] if isinstance(value, str) else []


Versions = dict[str, int]
"""Storage object name -> resourceVersion."""


@dataclass(frozen=True)
class _Entry:
    object: Object
    """The public object."""
    sequence: int
    """Creation order (the writing replica's clock in ns, then the name)."""
    storage_uid: str = ""
    """The storage object's own uid (a DELETE's precondition), not the public object's."""
    labelled: bool = False
    """Whether the storage object carries the labels of its public object (``storage_labels``;
    objects written before the field labels existed lack them until their next write)."""
    created: int = 0
    """The resourceVersion of its creation: the storage object's ``createdRevision``, which
    every update writes, or, on an object never updated, its resourceVersion."""


@dataclass(frozen=True)
class _Event:
    rv: int
    key: Key
    change: Change
    before: _Entry | None
    """The entry the change replaced (None for a creation), to rebuild older snapshots."""


@dataclass(frozen=True)
class _After(WatchFilter):
    """A filter that also drops changes at or before ``after`` (a watch that starts from a
    resourceVersion this replica's cache had not reached)."""

    after: int = 0

    def event_for(self, change: Change) -> WatchEvent | None:
        if _rv(change.object) <= self.after:
            return None
        return super().event_for(change)


class KubeObjectStore(ObjectStore):
    """One resource's objects as storage custom resources (see the module's docstring).

    The cache starts with the first call; ``close`` stops it and ends every watch. `history`
    bounds the changes kept for watches and continue tokens. `decode` is the kind's decoder
    (``registry.decoding``): a storage object it (or the storage envelope: ``object`` an
    object, ``sequence`` an integer, string labels) refuses is not cached, so no read sees it;
    it is logged once per resourceVersion with its name and reported to
    `malformed(storage plural)` (the metric). An object that turns malformed is gone for
    readers (watchers get DELETED); one that is repaired comes back (ADDED).
    """

    def __init__(
        self,
        kube: KubeClient,
        resource: ResourceType,
        *,
        storage_namespace: str,
        instance: str = DEFAULT_INSTANCE,
        history: int = DEFAULT_HISTORY,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS,
        clock_ns: Callable[[], int] = time.time_ns,
        decode: Decoder | None = None,
        malformed: Callable[[str], None] | None = None,
    ) -> None:
        self.resource = resource
        self._decode = decode
        self._count_malformed = malformed
        self._kube = kube
        self._kind = storage_kind(resource)
        self._storage_namespace = storage_namespace
        self._instance = instance
        self.max_object_bytes = max_object_bytes
        self._max_queued_events = max_queued_events
        self._clock_ns = clock_ns
        self._informer = Informer(kube, self._path(), name=self._kind.crd_name,
                                  params={"labelSelector": storage_selector(instance)},
                                  indexes={_BY_NAMESPACE_LABEL: _labelled_namespace})
        self._informer.add_handlers(Handlers(on_add=self._added, on_update=self._updated,
                                             on_delete=self._deleted, on_listed=self._listed))
        self._task: asyncio.Task[None] | None = None
        self._entries: dict[Key, _Entry] = {}
        self._index: dict[tuple[str, str, str], set[Key]] = {}
        """(indexed field, namespace, value) -> keys: cohorts select on them without a scan."""
        self._window: deque[_Event] = deque(maxlen=history)
        self._compacted = 0
        """Changes at or before this resourceVersion are not in the window."""
        self._listed_once = False
        self._changed = asyncio.Event()
        self._hub = WatchHub()
        self._key_locks: dict[Key, _Held] = {}
        self._cohort_locks: dict[Key, _Held] = {}
        """(namespace, cohort selector): creates into one cohort take turns on this replica."""
        self._names: dict[str, Key] = {}
        """Storage name -> public key of each cached entry."""
        self._malformed: dict[str, int] = {}
        """The storage objects (by name) skipped as malformed, with the resourceVersion logged."""

    @property
    def synced(self) -> bool:
        """Whether the cache holds a list (readiness)."""
        return self._informer.has_synced()

    def start(self) -> None:
        """Start the cache (the first call of any operation does too)."""
        if self._task is None:
            self._task = asyncio.create_task(self._informer.run(), name=self._kind.crd_name)

    # Writes

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        return await _to_the_end(self._create_in(copy.deepcopy(dict(obj)), cohort))

    async def _create_in(self, obj: Object, cohort: Cohort | None) -> Object:
        await self._ready()
        prepared = self._new_object(obj)
        if cohort is None:
            return await self._create(prepared)
        namespace = metadata(prepared)["namespace"]
        selector = parse_field_selector(cohort.field_selector, self.resource.selectable_fields)
        evictable = parse_field_selector(cohort.evictable, self.resource.selectable_fields)
        async with _KeyLock(self._cohort_locks, (namespace, cohort.field_selector)):
            if cohort.admit is None:
                await self._evict_for(namespace, cohort, selector, evictable, "")
                return await self._create(prepared)
            created = await self._create(prepared, settle=False)
            await self._admit(created, selector, cohort.admit)
            # Evicted once admitted, so that a refused create deletes nothing but itself.
            await self._evict_for(namespace, cohort, selector, evictable,
                                  metadata(created["object"])["name"])
            return self._public(created)

    async def _evict_for(self, namespace: str, cohort: Cohort, selector: FieldSelector,
                         evictable: FieldSelector, created: str) -> None:
        """Make room for one create into the cohort (``Cohort.evicted``); ``created`` names
        the new object if it is stored already (it is not one of the members)."""
        members = sorted((e for e in self._candidates(namespace, selector)
                          if selector.matches(e.object) and _key(e.object)[1] != created),
                         key=lambda e: (e.sequence, _key(e.object)))
        await self._evict(namespace, selector, evictable, cohort.evicted(
            members, lambda e: evictable.matches(e.object)))

    async def _admit(self, stored: Object, cohort: FieldSelector,
                     admit: Callable[[builtins.list[Object]], None]) -> None:
        """``admit`` the created storage object ``stored`` among the cohort's members created
        before it (``Cohort.admit``): once the cache has reached its creation, the cache holds
        every member created before it (and whatever each became since), so every replica
        that creates into the cohort decides in the same order. If refused, or if the cache
        does not get there in time, the object is deleted again."""
        public = self._public(stored)
        namespace, name = _key(public)
        try:
            if not await self._reached(_rv(stored), SYNC_TIMEOUT_SECONDS):
                raise StorageUnavailable(
                    f"{self.resource.qualified}: the storage cache of {self._kind.crd_name} did "
                    f"not reach the create of {name!r} within {SYNC_TIMEOUT_SECONDS:.0f} s, so "
                    "the bounds could not be checked; nothing was stored, retry later")
            before = sorted((e for e in self._candidates(namespace, cohort)
                             if cohort.matches(e.object) and e.created < _rv(stored)),
                            key=lambda e: (e.created, _key(e.object)))
            admit(copy.deepcopy([e.object for e in before]))
        except StoreError as refusal:
            try:
                await self._delete(namespace, name, "", str(metadata(public).get("uid", "")))
            except StoreError as error:
                log.warning("deleting a refused object failed; it counts until the takeover "
                            "ends it", extra={
                    "resource": self.resource.plural, "namespace": namespace, "object": name,
                    "refusal": str(refusal), "error": str(error)})
            raise

    async def _evict(self, namespace: str, cohort: FieldSelector, evictable: FieldSelector,
                     evicted: builtins.list[_Entry]) -> None:
        """Delete a cohort's ``evicted`` members (its oldest evictable ones): the labelled in
        one DELETE of the collection, selecting by the storage labels the cohort's evictable
        members no later than the last of them (so one that finished since this replica's
        cache saw it goes too: it is older than the evicted), the others one by one."""
        labelled = [entry for entry in evicted if entry.labelled]
        for entry in evicted:
            if not entry.labelled:
                meta = metadata(entry.object)
                with contextlib.suppress(NotFound, Conflict):
                    await self._delete(namespace, meta["name"], "", meta.get("uid", ""))
        if not labelled:
            return
        last = max(entry.sequence for entry in labelled)
        requirements = [storage_selector(self._instance), f"{NAMESPACE_LABEL}={namespace}",
                        *self._label_requirements(cohort), *self._label_requirements(evictable),
                        f"{SEQUENCE_LABEL}<{last + 1}"]
        await self._call("", self._kube.delete(self._path(), params={
            "labelSelector": ",".join(requirements)}))

    def _label_requirements(self, selector: FieldSelector) -> builtins.list[str]:
        """A field selector on indexed fields as requirements on their storage labels."""
        requirements = []
        for requirement in selector.requirements:
            if requirement.field not in self.resource.indexed_fields:
                raise ValueError(f"{self.resource.plural}: a cohort selects on "
                                 f"{requirement.field!r}, which is not an indexed field")
            operator = "!=" if requirement.negated else "="
            requirements.append(f"{field_label(requirement.field)}{operator}"
                                f"{field_label_value(requirement.value)}")
        return requirements

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        return await _to_the_end(self._update(namespace, name, mutate))

    async def _update(self, namespace: str, name: str, mutate: Callable[[Object], Object]
                      ) -> Object:
        """As kube-apiserver's GuaranteedUpdate with a cached object: the cache may lag other
        replicas' writes, so a decision taken on it is only final once confirmed on the live
        object: a miss, a refusal (``mutate`` raises) and a no-op on the cached object each
        read the live one (``GET``) and decide again; a ``PUT`` on a stale read gets 409 and
        does the same."""
        await self._ready()
        async with self._lock(namespace, name):
            entry = self._entries.get((namespace, name))
            live = entry is None
            if entry is None:
                entry = await self._live(namespace, name)
            current = entry.object
            while True:
                try:
                    desired = self._identity_kept(current, mutate(copy.deepcopy(current)))
                except Exception:
                    if live:
                        raise
                    entry, live = await self._live(namespace, name), True
                    current = entry.object
                    continue
                if desired == current:
                    if live:
                        return copy.deepcopy(current)
                    entry, live = await self._live(namespace, name), True
                    current = entry.object
                    continue
                check_size(self.resource, desired, self.max_object_bytes)
                body = self._storage_object(desired, entry.sequence, entry.created)
                try:
                    stored = await self._call(
                        name, self._kube.put(self._object_path(namespace, name), body))
                except Conflict:
                    entry, live = await self._live(namespace, name), True
                    current = entry.object
                    continue
                return await self._settled(stored)

    async def _live(self, namespace: str, name: str) -> _Entry:
        """The object as kube-apiserver has it now (``NotFound`` if it has none;
        ``MalformedObject`` naming the public object, not its storage object, if the cache
        would skip it)."""
        stored = await self._call(name, self._kube.get(self._object_path(namespace, name)))
        try:
            return self._entry(stored)
        except MalformedObject as error:
            if (error.namespace, error.object_name) == (namespace, name):
                raise
            raise MalformedObject(self.resource, namespace, name, error.why) from error

    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        return await _to_the_end(self._delete(namespace, name, resource_version, uid))

    async def _delete(self, namespace: str, name: str, resource_version: str, uid: str
                      ) -> Object:
        """A public uid precondition is checked here (the storage object has a uid of its own)
        on the cached object, confirmed on the live one if it fails; the DELETE carries the
        storage object's uid and the resourceVersion (the storage object's) as preconditions.
        If the storage uid alone fails (the cache lags a delete and create of the object on
        another replica) while the caller's preconditions hold on the live object, that object
        is the one deleted, as kube-apiserver deletes what it has."""
        await self._ready()
        entry = self._entries.get((namespace, name))
        if entry is None or (uid and metadata(entry.object).get("uid") != uid):
            entry = await self._live(namespace, name)
        check_preconditions(self.resource, entry.object, "", uid)
        while True:
            preconditions = {"uid": entry.storage_uid}
            if resource_version:
                preconditions["resourceVersion"] = resource_version
            options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions",
                                       "preconditions": preconditions}
            try:
                answer = await self._call(name, self._kube.delete(
                    self._object_path(namespace, name), options))
            except Conflict:  # worded by the object's current state, as SQLite words it
                fresh = await self._live(namespace, name)
                check_preconditions(self.resource, fresh.object, resource_version, uid)
                if fresh.storage_uid == entry.storage_uid:
                    raise
                entry = fresh
                continue
            break
        # kube-apiserver may answer a Status for a custom resource deleted at once
        last = entry.object if answer.get("kind") == "Status" else self._public(answer)
        return await self._gone(str(metadata(entry.object).get("uid", "")), last)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        selection = self._filter(namespace, label_selector, field_selector)
        return await _to_the_end(self._delete_matching(selection))

    async def _delete_matching(self, selection: WatchFilter) -> builtins.list[Object]:
        await self._ready()
        matching = sorted((e.object for e in self._entries.values()
                           if selection.matches(e.object)), key=_key)
        deleted = []
        for obj in matching:
            meta = metadata(obj)
            with contextlib.suppress(NotFound, Conflict):
                deleted.append(await self._delete(meta["namespace"], meta["name"], "",
                                                  meta.get("uid", "")))
        return deleted

    # Reads

    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        """As kube-apiserver's consistent reads from its watch cache (KEP-2340), but without
        etcd's progress notifications, which move a watch cache's resourceVersion on a quiet
        resource: this cache's resourceVersion only moves with its own resource's events, so
        waiting for it to reach kube-apiserver's current one could last until the next write.
        Instead one consistent LIST of the metadata of the storage objects the read covers
        (the namespace's label, or the one storage name) gives their current
        resourceVersions, and the read waits (up to ``CATCH_UP_SECONDS``, then
        ``StorageUnavailable``) until the cache has reached the list's resourceVersion or holds
        exactly those objects at those resourceVersions (``_holds``): at once when the cache
        is already current, however long the resource has been quiet."""
        await self._ready()
        if not self._may_hold(namespace, name):
            return
        listed, at = await self._versions_now(namespace, name)
        if not await self._reached(at, CATCH_UP_SECONDS,
                                   lambda: self._current_rv() >= at
                                   or self._holds(listed, namespace, name)):
            cached = self._current_rv()
            log.warning("storage cache behind kube-apiserver; consistent read refused", extra={
                "resource": self._kind.crd_name, "resource_version": at,
                "cache_resource_version": cached})
            raise StorageUnavailable(
                f"{self.resource.qualified}: the storage cache of {self._kind.crd_name} has not "
                f"caught up with kube-apiserver (at resourceVersion {at}, the cache at {cached})"
                f" within {CATCH_UP_SECONDS:.0f} s; retry, or read with resourceVersion=0 to "
                "accept this replica's cache as it is")

    @staticmethod
    def _may_hold(namespace: str | None, name: str) -> bool:
        """Whether kube-apiserver may hold storage objects of the read: a namespace that is
        not a DNS label, or a name whose storage name is not a DNS subdomain, holds none (so no
        such selector is sent)."""
        if namespace is None:
            return True
        if dns1123_label_errors(namespace):
            return False
        return not name or not dns1123_subdomain_errors(storage_name(namespace, name))

    async def _versions_now(self, namespace: str | None, name: str) -> tuple[Versions, int]:
        """The current resourceVersions of the storage objects a read of `namespace` (every
        namespace if None, whatever `name`) or of its object `name` covers, and
        kube-apiserver's current resourceVersion: one consistent LIST of their metadata."""
        selector = storage_selector(self._instance)
        if namespace is not None:
            selector += f",{NAMESPACE_LABEL}={namespace}"
        params = {"labelSelector": selector}
        if namespace is not None and name:
            params["fieldSelector"] = f"metadata.name={storage_name(namespace, name)}"
        try:
            page = await self._kube.get(self._path(), params, accept=METADATA_ONLY)
        except KubeUnavailable as error:
            raise self._unreadable(error, "retry later") from error
        except KubeRejected as error:
            raise self._unreadable(error, "check the server's RBAC (list of the storage "
                                   "resources: apiservice/rbac-server.yaml) and the storage "
                                   "CRDs") from error
        items = page.get("items") or []
        return {_storage_name_of(item): _rv(item) for item in items}, _rv(page)

    def _unreadable(self, error: Exception, remedy: str) -> StorageUnavailable:
        return StorageUnavailable(
            f"{self.resource.qualified}: the latest state cannot be read from kube-apiserver "
            f"({error}); {remedy}, or read with resourceVersion=0 to accept this replica's "
            "cache as it is")

    def _holds(self, listed: Versions, namespace: str | None, name: str) -> bool:
        """Whether the cache holds exactly the storage objects `listed` (malformed ones
        included) in the read's scope. Below the list's resourceVersion, that means the cache
        is current for the read: any create, change or delete since the cache's
        resourceVersion would show as an object, a resourceVersion or a name it lacks."""
        if namespace is not None and name:
            held = self._informer.get(self._storage_namespace, storage_name(namespace, name))
            scope = [] if held is None else [held]
        elif namespace is not None:
            scope = self._informer.by_index(_BY_NAMESPACE_LABEL, namespace)
        else:
            scope = self._informer.list()
        return {_storage_name_of(stored): _rv(stored) for stored in scope} == listed

    async def get(self, namespace: str, name: str) -> Object:
        await self._ready()
        entry = self._entries.get((namespace, name))
        if entry is None:
            raise not_found(self.resource, name)
        return copy.deepcopy(entry.object)

    async def get_current(self, namespace: str, name: str) -> Object:
        """A ``GET`` of the storage object from kube-apiserver (a consistent read)."""
        await self._ready()
        return copy.deepcopy((await self._live(namespace, name)).object)

    async def list(
        self,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> ListResult:
        if limit < 0:
            raise BadRequest(f"limit must not be negative, got {limit}")
        selection = self._filter(namespace, label_selector, field_selector)
        snapshot, after = decode_continue(continue_token) if continue_token else (None, None)
        await self._ready()
        current = self._current_rv()
        at = current if snapshot is None else snapshot
        if at < self._compacted:
            raise Expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.")
        if at > current:
            raise BadRequest("the continue token names a resourceVersion this server has not had")
        objects = self._snapshot(at)
        keys = sorted(k for k in objects if after is None or k > after)
        items: builtins.list[Object] = []
        token = ""
        for key in keys:
            obj = objects[key]
            if not selection.matches(obj):
                continue
            if limit and len(items) == limit:
                last = metadata(items[-1])
                token = encode_continue(at, (last["namespace"], last["name"]))
                break
            items.append(copy.deepcopy(obj))
        return ListResult(items, str(at), token)

    async def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        selection = self._filter(namespace, label_selector, field_selector)
        start = parse_resource_version(resource_version)
        await self._ready()
        after = 0
        if start is None:
            initial = [Change(EventType.ADDED, e.object) for _, e in sorted(self._entries.items())]
        else:
            if start > self._current_rv():
                latest = await self._latest_rv()
                if start > latest:
                    raise ResourceVersionTooLarge(
                        f"resourceVersion {start} is newer than kube-apiserver's {latest}; "
                        "list again")
                if not await self._reached(start, CATCH_UP_SECONDS):
                    after = start  # kube-apiserver has it, this cache not yet: skip up to it
            if start < self._compacted:
                raise Expired(f"too old resource version: {start} ({self._compacted})")
            initial = [event.change for event in self._window if event.rv > start]
        watch = Watch(initial, _After(selection.namespace, selection.labels, selection.fields,
                                      after=after),
                      max_queued=self._max_queued_events, on_close=self._hub.remove)
        self._hub.add(watch)
        return watch

    def close(self) -> None:
        self._hub.close_all()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # The cache (informer handlers: they run in the informer's task, in event order)

    def _is_watch_event(self, obj: Object) -> bool:
        """A change the informer got from its watch (it sets its resourceVersion to the
        event's before calling handlers), not a difference it found by listing."""
        return self._listed_once and str(_rv(obj)) == self._informer.resource_version

    def _index_keys(self, obj: Object) -> builtins.list[tuple[str, str, str]]:
        namespace = metadata(obj).get("namespace", "")
        return [(field, namespace, field_value(obj, field))
                for field in self.resource.indexed_fields]

    def _put(self, key: Key, entry: _Entry | None) -> _Entry | None:
        """Set (or with None remove) the entry of ``key``, indexes included; the old entry."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._names.pop(storage_name(*key), None)
            for index_key in self._index_keys(old.object):
                keys = self._index.get(index_key)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._index[index_key]
        if entry is not None:
            self._entries[key] = entry
            self._names[storage_name(*key)] = key
            for index_key in self._index_keys(entry.object):
                self._index.setdefault(index_key, set()).add(key)
        return old

    def _candidates(self, namespace: str, selector: FieldSelector) -> Iterable[_Entry]:
        """The entries of ``namespace`` that may match ``selector``: through an index when it
        requires an indexed field to equal a value."""
        for requirement in selector.requirements:
            if requirement.field in self.resource.indexed_fields and not requirement.negated:
                keys = self._index.get((requirement.field, namespace, requirement.value), set())
                return [self._entries[key] for key in keys]
        return [e for k, e in self._entries.items() if k[0] == namespace]

    def _added(self, stored: Object) -> None:
        self._changed_to(stored)

    def _updated(self, old: Object, stored: Object) -> None:
        self._changed_to(stored)

    def _changed_to(self, stored: Object) -> None:
        """The cache after an object's new state: a malformed one is skipped (and the valid
        state it replaced, if any, is deleted for readers)."""
        entry = self._accepted(stored)
        key = _key(entry.object) if entry is not None else self._names.get(
            _storage_name_of(stored))
        if key is None:  # malformed and never cached: nobody saw it
            self._notify()
            return
        before = self._put(key, entry)
        if entry is not None:
            change = (Change(EventType.ADDED, entry.object) if before is None else
                      Change(EventType.MODIFIED, entry.object, before.object))
        elif before is not None:
            gone = copy.deepcopy(before.object)
            metadata(gone)["resourceVersion"] = str(_rv(stored))
            change = Change(EventType.DELETED, gone)
        else:
            self._notify()
            return
        self._record(change, before, stored)

    def _deleted(self, stored: Object) -> None:
        name = _storage_name_of(stored)
        key = self._names.get(name)
        if self._malformed.pop(name, None) is not None and key is None:
            self._notify()  # never cached: nobody saw it
            return
        before = self._entries.get(key) if key is not None else None
        if key is not None and before is not None:
            if before.storage_uid == metadata(stored).get("uid"):
                self._put(key, None)
            gone = copy.deepcopy(before.object)
            metadata(gone)["resourceVersion"] = str(_rv(stored))
        else:
            gone = self._public(stored)
        self._record(Change(EventType.DELETED, gone), before, stored)

    def _accepted(self, stored: Object) -> _Entry | None:
        """The cache entry of a storage object; None (logged once, counted) if malformed."""
        name = _storage_name_of(stored)
        try:
            entry = self._entry(stored)
        except MalformedObject as error:
            if self._malformed.get(name) != _rv(stored):
                self._malformed[name] = _rv(stored)
                log.warning("malformed storage object ignored", extra={
                    "resource": self._kind.crd_name, "namespace": self._storage_namespace,
                    "object": name, "resource_version": _rv(stored), "reason": error.why})
                if self._count_malformed is not None:
                    self._count_malformed(self._kind.plural)
            return None
        self._malformed.pop(name, None)
        return entry

    def _record(self, change: Change, before: _Entry | None, stored: Object) -> None:
        if self._is_watch_event(stored):
            if len(self._window) == self._window.maxlen:
                self._compacted = self._window[0].rv
            self._window.append(_Event(_rv(stored), _key(change.object), change, before))
            self._hub.publish(change)
        self._notify()

    def _listed(self) -> None:
        """After a list: the window no longer describes how the cache got here (a relist
        after a 410 or a failure skipped changes), so it restarts at the list's version and
        open watches end (their clients watch again, get 410 and list)."""
        if self._listed_once:
            log.warning("storage cache relisted; open watches end", extra={
                "resource": self._kind.crd_name, "resource_version":
                    self._informer.resource_version})
            self._hub.close_all()
        self._listed_once = True
        self._window.clear()
        self._compacted = self._current_rv()
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _current_rv(self) -> int:
        text = self._informer.resource_version
        return int(text) if text.isdigit() else 0

    def _snapshot(self, at: int) -> dict[Key, Object]:
        """The objects as of resourceVersion ``at`` (at least the window's oldest)."""
        objects = {key: entry.object for key, entry in self._entries.items()}
        for event in reversed(self._window):
            if event.rv <= at:
                break
            if event.before is None:
                objects.pop(event.key, None)
            else:
                objects[event.key] = event.before.object
        return objects

    async def _ready(self) -> None:
        self.start()
        if not self.synced:
            try:
                async with asyncio.timeout(SYNC_TIMEOUT_SECONDS):
                    await self._informer.synced.wait()
            except TimeoutError:
                raise StorageUnavailable(
                    f"{self.resource.qualified}: the storage cache of {self._kind.crd_name} has "
                    f"not listed within {SYNC_TIMEOUT_SECONDS:.0f} s; is kube-apiserver "
                    "reachable?") from None
        if not self._listed_once:  # synced, but the handler of the first list runs after
            await self._reached(0, SYNC_TIMEOUT_SECONDS, lambda: self._listed_once)

    async def _reached(self, rv: int, timeout: float,
                       condition: Callable[[], bool] | None = None) -> bool:
        """Wait until the cache is at ``rv`` (or ``condition`` holds); False at the timeout.
        Polls too: bookmarks move the cache's version without a handler call."""
        check = condition or (lambda: self._current_rv() >= rv)
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
        return True

    async def _latest_rv(self) -> int:
        """kube-apiserver's current resourceVersion (a consistent list of one item)."""
        page = await self._call("", self._kube.get(self._path(), {"limit": "1"}))
        text = str((page.get("metadata") or {}).get("resourceVersion", "0"))
        return int(text) if text.isdigit() else 0

    async def _settled(self, stored: Object) -> Object:
        """The object a write returned, once the cache has it (so this replica's next read
        sees it)."""
        if not await self._reached(_rv(stored), SYNC_TIMEOUT_SECONDS):
            log.warning("storage cache lags a write", extra={
                "resource": self._kind.crd_name, "resource_version": _rv(stored)})
        return self._public(stored)

    async def _gone(self, uid: str, last: Object) -> Object:
        """The deleted object stamped with its deletion's resourceVersion, from the cache's
        DELETED event (the DELETE answer holds the version before it, or only a Status);
        ``last`` if the cache does not get the event in time."""

        def deletion() -> Object | None:
            for event in reversed(self._window):
                if (event.change.type is EventType.DELETED
                        and metadata(event.change.object).get("uid") == uid):
                    return event.change.object
            return None

        await self._reached(0, SYNC_TIMEOUT_SECONDS, lambda: deletion() is not None)
        return copy.deepcopy(deletion() or last)

    # Storage objects

    def _path(self, name: str = "") -> str:
        """The storage collection in the storage namespace, or one storage object in it."""
        return namespaced(STORAGE_API, self._storage_namespace, self._kind.plural, name)

    def _object_path(self, namespace: str, name: str) -> str:
        """The storage object of the public object ``namespace/name``."""
        return self._path(storage_name(namespace, name))

    def _entry(self, stored: Object) -> _Entry:
        """The public object and sequence of a storage object; ``MalformedObject`` unless the
        envelope (its public metadata included, whose name must be the storage object's) and
        the kind's decoder accept it."""

        def envelope(obj: Object) -> _Entry:
            inner = mapping(obj.get("object"), "object")
            sequence = optional_integer(obj.get("sequence"), "sequence")
            created = optional_integer(obj.get(CREATED_REVISION), CREATED_REVISION)
            meta = mapping(inner.get("metadata"), "object.metadata")
            namespace = text(meta.get("namespace"), "object.metadata.namespace")
            name = text(meta.get("name"), "object.metadata.name")
            text(meta.get("uid"), "object.metadata.uid")
            text(meta.get("creationTimestamp"), "object.metadata.creationTimestamp")
            expected = storage_name(namespace, name)
            if expected != _storage_name_of(obj):
                raise Malformed(
                    f"object.metadata names {namespace}/{name}, whose storage object is "
                    f"{expected!r}, not {_storage_name_of(obj)!r}")
            public = public_object(self._public(obj))
            labels = metadata(obj).get("labels") or {}
            wanted = storage_labels(self._kind, self._instance, public, sequence)
            return _Entry(public, sequence, str(metadata(obj).get("uid", "")),
                          all(labels.get(key) == value for key, value in wanted.items()),
                          created or _rv(obj))

        entry = decoded(self.resource, stored, envelope)
        if self._decode is not None:
            self._decode(entry.object)
        return entry

    @staticmethod
    def _public(stored: Mapping[str, Any]) -> Object:
        """The public object a storage object holds, with the storage object's
        resourceVersion."""
        inner = stored.get("object")
        obj: Object = dict(inner) if isinstance(inner, dict) else {}
        meta = dict(metadata(obj))
        if "resourceVersion" in metadata(stored):
            meta["resourceVersion"] = metadata(stored)["resourceVersion"]
        obj["metadata"] = meta
        return obj

    def _storage_object(self, obj: Object, sequence: int, created_revision: int = 0
                        ) -> Object:
        return storage_object(self._kind, self._storage_namespace, self._instance, obj,
                              sequence, created_revision)

    def _new_object(self, obj: Mapping[str, Any]) -> Object:
        """A new public object with the identity the server gives it (as kube-apiserver gives
        its objects): a uid and the creation time."""
        prepared = checked_new(self.resource, obj)
        prepared["metadata"]["uid"] = str(uuid.uuid4())
        prepared["metadata"]["creationTimestamp"] = timestamp()
        return prepared

    async def _create(self, prepared: Object, settle: bool = True) -> Object:
        """POST the object (a name drawn for a generateName, retried on a taken one); the
        public object once the cache has it, or (``settle`` False) the storage object
        kube-apiserver answered."""
        meta = metadata(prepared)
        fixed = meta.get("name")
        for _ in range(1 if fixed else GENERATE_NAME_ATTEMPTS):
            obj = copy.deepcopy(prepared)
            name = fixed or generate_name(meta["generateName"])
            obj["metadata"]["name"] = name
            check_size(self.resource, obj, self.max_object_bytes)
            body = self._storage_object(obj, self._clock_ns())
            try:
                stored = await self._call(name, self._kube.post(self._path(), body))
            except AlreadyExists:
                if fixed:
                    raise
                continue
            return await self._settled(stored) if settle else stored
        raise no_free_name(self.resource, meta["generateName"])

    @staticmethod
    def _identity_kept(stored: Object, desired: Object) -> Object:
        old_meta = metadata(stored)
        obj = copy.deepcopy(desired)
        meta = obj.setdefault("metadata", {})
        for key in _KEPT_ON_UPDATE:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        return obj

    def _filter(self, namespace: str | None, labels: str, fields: str) -> WatchFilter:
        return selection(self.resource, namespace, labels, fields)

    def _lock(self, namespace: str, name: str) -> _KeyLock:
        return _KeyLock(self._key_locks, (namespace, name))

    async def _call(self, name: str, request: Any) -> Object:
        """Await a kube-apiserver request; its errors as the registry's kinds."""
        try:
            answer: Object = await request
        except KubeUnavailable as error:
            raise StorageUnavailable(
                f"{self.resource.qualified}: kube-apiserver, where records are stored, is "
                f"unavailable ({error}); nothing was stored, retry later") from error
        except KubeRejected as error:
            raise self._rejected(error, name) from error
        return answer

    def _rejected(self, error: KubeRejected, name: str) -> StoreError:
        code, reason = error.status_code, error.answer_reason
        message = as_printable(str(error.answer.get("message", "")))
        if code == 404:
            return not_found(self.resource, name) if name else NotFound(message)
        if code == 409 and reason == "AlreadyExists":
            return already_exists(self.resource, name)
        if code == 409:
            return Conflict(
                f'Operation cannot be fulfilled on {self.resource.qualified} "{name}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again", resource=self.resource, name=name)
        if code == 410:
            return Expired(message)
        if code == 413 or reason == "RequestEntityTooLarge":
            return TooLarge(f'{self.resource.qualified} "{name}" is too large for '
                            f"kube-apiserver: {message}", resource=self.resource, name=name)
        return StorageUnavailable(
            f"{self.resource.qualified}: kube-apiserver refused a write of {self._kind.crd_name}"
            f" {as_printable(name)!r} ({code} {reason}: {message}); check the server's RBAC "
            "(apiservice/rbac-server.yaml) and the storage CRDs")


T = TypeVar("T")


async def _to_the_end(write: Coroutine[Any, Any, T]) -> T:
    """Run a write as its own task, so that it completes even if the caller is cancelled (as
    the SQLite backend's commit does): what kube-apiserver stored reaches the cache, and a
    write is never left half done (a cohort's evictions without its create)."""
    task = asyncio.ensure_future(write)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return await asyncio.shield(task)


class _KeyLock:
    """One asyncio.Lock per key while anyone holds or waits for it: updates of one object (or
    creates into one cohort) on this replica take turns instead of conflicting in
    kube-apiserver."""

    def __init__(self, locks: dict[Key, _Held], key: Key) -> None:
        self._locks, self._key = locks, key

    async def __aenter__(self) -> None:
        held = self._locks.setdefault(self._key, _Held())
        held.users += 1
        await held.lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        held = self._locks[self._key]
        held.lock.release()
        held.users -= 1
        if not held.users:
            del self._locks[self._key]


@dataclass
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
