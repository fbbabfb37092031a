"""``ObjectStore`` on the Kubernetes API: each object is a custom resource of a storage-only group
(the storage objects: ``registry.kube_objects``).

Reads (get, list, watch) are served from this replica's cache of the storage collection
(``registry.kube_cache``) with the storage objects' resourceVersions, so a list on one replica
and a watch on another agree; a consistent read (``consistent_read``) first learns the current
resourceVersions from kube-apiserver. Writes go to kube-apiserver (optimistic concurrency on
resourceVersion, DeleteOptions preconditions); what a write returns is written through to the
cache, so this replica's next read or update of the object does not wait for the watch, and a
list waits until the watch has brought this replica's writes. (Layout 1, every object in its
public namespace, is moved here by ``registry.layout_migration``.)

resourceVersions are compared as integers: kube-apiserver's are etcd revisions (the
"comparable resourceVersion" of KEP-5504). See docs/storage.md.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from apiserver.api.json_input import as_printable
from apiserver.api.validation import dns1123_label_errors, dns1123_subdomain_errors
from apiserver.kube.client import METADATA_ONLY, KubeClient, KubeRejected, KubeUnavailable
from apiserver.kube.paths import namespaced
from apiserver.registry.decoding import Decoder
from apiserver.registry.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    MalformedObject,
    NotFound,
    ResourceVersionTooLarge,
    StorageUnavailable,
    StoreError,
    TooLarge,
    check_preconditions,
    not_found,
)
from apiserver.registry.kube_cache import (
    DEFAULT_HISTORY,
    SYNC_TIMEOUT_SECONDS,
    Entry,
    StorageCache,
    Versions,
)
from apiserver.registry.kube_objects import (
    DEFAULT_INSTANCE,
    NAMESPACE_LABEL,
    SEQUENCE_LABEL,
    STORAGE_API,
    Key,
    field_label,
    field_label_value,
    key_of,
    public_of,
    revision,
    storage_kind,
    storage_name,
    storage_name_of,
    storage_object,
    storage_selector,
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
from apiserver.registry.paging import PageRequest
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import FieldSelector, parse_field_selector
from apiserver.registry.store import (
    DEFAULT_MAX_OBJECT_BYTES,
    Cohort,
    ListResult,
    Object,
    ObjectStore,
)
from apiserver.registry.tokens import parse_resource_version
from apiserver.registry.watch import DEFAULT_MAX_QUEUED_EVENTS, Watch, WatchFilter, selection
from apiserver.timestamps import timestamp

log = logging.getLogger(__name__)

CATCH_UP_SECONDS = 3.0
"""How long a watch from a resourceVersion the cache has not reached waits for it (kube-apiserver's
watch cache waits 3 s too) before it is ``ResourceVersionTooLarge``, and a consistent read for
the cache to hold what kube-apiserver listed before it is ``StorageUnavailable``."""
_KEPT_ON_UPDATE = ("name", "namespace", "uid", "creationTimestamp", "generateName")


class KubeObjectStore(ObjectStore):
    """One resource's objects as storage custom resources (see the module's docstring).

    The cache starts with the first call; ``close`` stops it and ends every watch. `history`
    bounds the changes kept for watches and continue tokens. `decode` is the kind's decoder
    (``registry.decoding``): a storage object it (or the storage envelope) refuses is not
    cached, so no read sees it (``kube_cache``), and is reported to `malformed(storage
    plural)` (the metric).
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
        self._kube = kube
        self._kind = storage_kind(resource)
        self._storage_namespace = storage_namespace
        self._instance = instance
        self.max_object_bytes = max_object_bytes
        self._clock_ns = clock_ns
        self._cache = StorageCache(
            kube, self._path(), resource, self._kind, storage_namespace=storage_namespace,
            instance=instance, history=history, max_queued_events=max_queued_events,
            decode=decode, malformed=malformed)
        self._key_locks: dict[Key, _Held] = {}
        self._cohort_locks: dict[Key, _Held] = {}
        """(namespace, cohort selector): creates into one cohort take turns on this replica."""

    @property
    def synced(self) -> bool:
        """Whether the cache holds a list (readiness)."""
        return self._cache.synced

    def start(self) -> None:
        """Start the cache (the first call of any operation does too)."""
        self._cache.start()

    # Writes

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        return await _to_the_end(self._create_in(copy.deepcopy(dict(obj)), cohort))

    async def _create_in(self, obj: Object, cohort: Cohort | None) -> Object:
        await self._cache.ready()
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
            return public_of(created)

    async def _evict_for(self, namespace: str, cohort: Cohort, selector: FieldSelector,
                         evictable: FieldSelector, created: str) -> None:
        """Make room for one create into the cohort (``Cohort.evicted``); ``created`` names
        the new object if it is stored already (it is not one of the members)."""
        await self._cache.caught_up()  # this replica's creates into the cohort count
        members = sorted((e for e in self._cache.candidates(namespace, selector)
                          if selector.matches(e.object) and key_of(e.object)[1] != created),
                         key=lambda e: (e.sequence, key_of(e.object)))
        await self._evict(namespace, selector, evictable, cohort.evicted(
            members, lambda e: evictable.matches(e.object)))

    async def _admit(self, stored: Object, cohort: FieldSelector,
                     admit: Callable[[builtins.list[Object]], None]) -> None:
        """``admit`` the created storage object ``stored`` among the cohort's members created
        before it, as they were at its creation (``Cohort.admit``): once the cache has reached
        the creation, its window rebuilds the cohort as of that revision, so every replica
        that creates into the cohort decides in the same order on the same state (a member
        that ended after the creation still counts, so no revision ever holds more admitted
        members than the bound). If refused, or if the cache does not get there in time or no
        longer holds that revision, the object is deleted again."""
        public = public_of(stored)
        namespace, name = key_of(public)
        created = revision(stored)
        try:
            members = (self._cache.candidates_at(namespace, cohort, created)
                       if await self._cache.reached(created, SYNC_TIMEOUT_SECONDS) else None)
            if members is None:
                raise StorageUnavailable(
                    f"{self.resource.qualified}: the storage cache of {self._kind.crd_name} did "
                    f"not hold the state at the create of {name!r} within "
                    f"{SYNC_TIMEOUT_SECONDS:.0f} s, so the bounds could not be checked; nothing "
                    "was stored, retry later")
            before = sorted((e for e in members if e.created < created),
                            key=lambda e: (e.created, key_of(e.object)))
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
                     evicted: builtins.list[Entry]) -> None:
        """Delete a cohort's ``evicted`` members (its oldest evictable ones): the labelled in
        one DELETE of the collection, selecting by the storage labels the cohort's evictable
        members no later than the last of them (so one that finished since this replica's
        cache saw it goes too: it is older than the evicted), the others one by one. Returns
        once this replica's cache has the deletions of the evicted (at most
        ``SYNC_TIMEOUT_SECONDS``), so that its next read does not show them."""
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
        # As after one DELETE (``_gone``): this replica's next read no longer holds them.
        uids = [str(metadata(entry.object).get("uid", "")) for entry in labelled]
        await self._cache.reached(0, SYNC_TIMEOUT_SECONDS, lambda: all(
            self._cache.deletion(uid) is not None for uid in uids))

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
        await self._cache.ready()
        async with self._lock(namespace, name):
            entry = self._cache.get((namespace, name))
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
                return self._settled(stored)

    async def _live(self, namespace: str, name: str) -> Entry:
        """The object as kube-apiserver has it now (``NotFound`` if it has none;
        ``MalformedObject`` naming the public object, not its storage object, if the cache
        would skip it)."""
        stored = await self._call(name, self._kube.get(self._object_path(namespace, name)))
        try:
            return self._cache.entry_of(stored)
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
        await self._cache.ready()
        entry = self._cache.get((namespace, name))
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
        last = entry.object if answer.get("kind") == "Status" else public_of(answer)
        return await self._gone(str(metadata(entry.object).get("uid", "")), last)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        selection = self._filter(namespace, label_selector, field_selector)
        return await _to_the_end(self._delete_matching(selection))

    async def _delete_matching(self, selection: WatchFilter) -> builtins.list[Object]:
        await self._cache.ready()
        await self._cache.caught_up()  # this replica's own writes are among what it deletes
        matching = sorted((e.object for e in self._cache.entries()
                           if selection.matches(e.object)), key=key_of)
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
        await self._cache.ready()
        if not self._may_hold(namespace, name):
            return
        listed, at = await self._versions_now(namespace, name)
        if not await self._cache.reached(at, CATCH_UP_SECONDS,
                                   lambda: self._cache.current_rv() >= at
                                   or self._cache.holds(listed, namespace, name)):
            cached = self._cache.current_rv()
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
        return {storage_name_of(item): revision(item) for item in items}, revision(page)

    def _unreadable(self, error: Exception, remedy: str) -> StorageUnavailable:
        return StorageUnavailable(
            f"{self.resource.qualified}: the latest state cannot be read from kube-apiserver "
            f"({error}); {remedy}, or read with resourceVersion=0 to accept this replica's "
            "cache as it is")

    async def get(self, namespace: str, name: str) -> Object:
        await self._cache.ready()
        entry = self._cache.get((namespace, name))
        if entry is None:
            raise not_found(self.resource, name)
        return copy.deepcopy(entry.object)

    async def get_current(self, namespace: str, name: str) -> Object:
        """A ``GET`` of the storage object from kube-apiserver (a consistent read)."""
        await self._cache.ready()
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
        request = PageRequest.of(limit, continue_token)
        selection = self._filter(namespace, label_selector, field_selector)
        await self._cache.ready()
        if request.snapshot is None:
            await self._cache.caught_up()  # this replica's writes are in what it lists
        at = request.snapshot_to_read(self._cache.current_rv(), self._cache.compacted)
        objects = self._cache.snapshot(at, selection.namespace, selection.fields)
        keys = sorted(k for k in objects if request.after is None or k > request.after)
        return request.page((copy.deepcopy(objects[key]) for key in keys
                             if selection.matches(objects[key])), at)

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
        await self._cache.ready()
        after = 0
        if start is not None:
            if start > self._cache.current_rv():
                latest = await self._latest_rv()
                if start > latest:
                    raise ResourceVersionTooLarge(
                        f"resourceVersion {start} is newer than kube-apiserver's {latest}; "
                        "list again")
                if not await self._cache.reached(start, CATCH_UP_SECONDS):
                    after = start  # kube-apiserver has it, this cache not yet: skip up to it
            if start < self._cache.compacted:
                raise Expired(f"too old resource version: {start} ({self._cache.compacted})")
        return self._cache.watch(start, selection, after)

    def close(self) -> None:
        self._cache.close()

    async def _latest_rv(self) -> int:
        """kube-apiserver's current resourceVersion (a consistent list of one item)."""
        page = await self._call("", self._kube.get(self._path(), {"limit": "1"}))
        value = str((page.get("metadata") or {}).get("resourceVersion", "0"))
        return int(value) if value.isdigit() else 0

    def _settled(self, stored: Object) -> Object:
        """The public object a write returned, written through to the cache (so this
        replica's next read or update of it does not wait for the watch)."""
        return self._cache.wrote(stored)

    async def _gone(self, uid: str, last: Object) -> Object:
        """The deleted object stamped with its deletion's resourceVersion, from the cache's
        DELETED event (the DELETE answer holds the version before it, or only a Status);
        ``last`` if the cache does not get the event in time."""
        await self._cache.reached(0, SYNC_TIMEOUT_SECONDS,
                                  lambda: self._cache.deletion(uid) is not None)
        return copy.deepcopy(self._cache.deletion(uid) or last)

    # Storage objects

    def _path(self, name: str = "") -> str:
        """The storage collection in the storage namespace, or one storage object in it."""
        return namespaced(STORAGE_API, self._storage_namespace, self._kind.plural, name)

    def _object_path(self, namespace: str, name: str) -> str:
        """The storage object of the public object ``namespace/name``."""
        return self._path(storage_name(namespace, name))

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
        public object, written through to the cache, or (``settle`` False) the storage object
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
            return self._settled(stored) if settle else stored
        raise no_free_name(self.resource, meta["generateName"])

    @staticmethod
    def _identity_kept(stored: Object, desired: Object) -> Object:
        old_meta = metadata(stored)
        obj = dict(desired)  # shallow: the storage object built from it is a deep copy
        meta = obj["metadata"] = dict(obj.get("metadata") or {})
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
