"""The Kubernetes backend's cache of one storage resource, as k8s.io/apiserver's cacher keeps one
above etcd: an informer (``kube.informer``) of the storage objects, decoded into public objects,
indexed, with a bounded window of recent changes (at most ``history``; beyond the newest
``MIN_HISTORY``, none older than ``FRESH_SECONDS``).

- Reads: ``get`` and the cohort's ``candidates``; ``snapshot`` rebuilds the objects as of any
  resourceVersion in the window (lists and their continue tokens); ``watch`` replays the window
  from a resourceVersion, then follows. Anything older than the window (or than the last list)
  is the caller's ``Expired``.
- Write-through: ``wrote`` puts the object a write of this replica returned into the cache at
  once, so this replica's next ``get`` or update of it never waits for the watch. It lives in an
  overlay beside the informer's objects, used while newer than them, and goes when the watch
  brings the same or a newer resourceVersion of the object (or a relist passes it). Lists and
  watches are built from the watch's changes alone, in their order, so a snapshot is always one
  resourceVersion's; a read of this replica's own writes in a list waits (``caught_up``) for
  the watch to bring them, as before the overlay.
- A storage object that the envelope or the kind's decoder refuses is not cached (no read sees
  it); it is logged once per resourceVersion and counted (``malformed``). One that turns
  malformed is gone for readers (watchers get DELETED); one that is repaired comes back.

Informer handlers run in the informer's task, in event order; everything here is synchronous
but the waits, so a reader never sees half a change.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from apiserver.kube.client import KubeClient
from apiserver.kube.informer import Handlers, Informer, strip_managed_fields
from apiserver.registry.decoding import (
    Decoder,
    Malformed,
    decoded,
    mapping,
    optional_integer,
    public_object,
    text,
)
from apiserver.registry.errors import MalformedObject, StorageUnavailable
from apiserver.registry.kube_objects import (
    CREATED_REVISION,
    NAMESPACE_LABEL,
    Key,
    StorageKind,
    key_of,
    public_of,
    revision,
    storage_labels,
    storage_name,
    storage_name_of,
    storage_selector,
)
from apiserver.registry.objects import metadata
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import FieldSelector, field_value
from apiserver.registry.store import Object
from apiserver.registry.watch import (
    DEFAULT_MAX_QUEUED_EVENTS,
    Change,
    EventType,
    Watch,
    WatchEvent,
    WatchFilter,
    WatchHub,
)

log = logging.getLogger(__name__)

DEFAULT_HISTORY = 10_000
"""At most this many changes are kept per store for watches from a resourceVersion and continue
tokens (the SQLite backend's event retention)."""
FRESH_SECONDS = 75.0
"""Beyond the newest ``MIN_HISTORY``, a change older than this leaves the window, as
k8s.io/apiserver's watch cache keeps 75 s of events (its eventFreshDuration): the window holds
every superseded version of an object, so a busy fan-out's leader would otherwise keep
thousands of old records it will never serve."""
MIN_HISTORY = 100
"""The changes kept whatever their age (kube-apiserver's default watch cache size)."""
SYNC_TIMEOUT_SECONDS = 10.0
"""How long a request waits for the cache: its first list, or a write of this replica."""

Versions = dict[str, int]
"""Storage object name -> resourceVersion."""

_BY_NAMESPACE_LABEL = "namespace-label"
"""The informer's index of storage objects by their ``NAMESPACE_LABEL`` (a consistent read of a
namespace compares exactly what kube-apiserver lists with that label)."""


def _at_revision(obj: Object, rv: int) -> Object:
    """`obj` as of resourceVersion `rv` (its deletion): a new metadata, the rest shared with
    `obj` (cached objects are never changed in place: readers get copies)."""
    return {**obj, "metadata": {**metadata(obj), "resourceVersion": str(rv)}}


def _labelled_namespace(stored: Object) -> list[str]:
    value = (metadata(stored).get("labels") or {}).get(NAMESPACE_LABEL)
    return [value] if isinstance(value, str) else []


@dataclass(frozen=True)
class Entry:
    """A cached public object and what the store needs of its storage object."""

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

    @property
    def rv(self) -> int:
        return revision(self.object)


@dataclass(frozen=True)
class _Event:
    rv: int
    key: Key
    change: Change
    before: Entry | None
    """The entry the change replaced (None for a creation), to rebuild older snapshots."""
    at: float
    """When the cache got it (the cache's monotonic clock)."""


@dataclass(frozen=True)
class _After(WatchFilter):
    """A filter that also drops changes at or before ``after`` (a watch that starts from a
    resourceVersion this replica's cache had not reached)."""

    after: int = 0

    def event_for(self, change: Change) -> WatchEvent | None:
        if revision(change.object) <= self.after:
            return None
        return super().event_for(change)


class StorageCache:
    """The cache of one resource's storage objects (see the module's docstring): those of
    ``instance`` in ``storage_namespace`` at ``path``. It starts with ``start`` (or the first
    ``ready``); ``close`` stops it and ends every watch."""

    def __init__(
        self,
        kube: KubeClient,
        path: str,
        resource: ResourceType,
        kind: StorageKind,
        *,
        storage_namespace: str,
        instance: str,
        history: int = DEFAULT_HISTORY,
        max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS,
        decode: Decoder | None = None,
        malformed: Callable[[str], None] | None = None,
        fresh_seconds: float = FRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = resource
        self._kind = kind
        self._storage_namespace = storage_namespace
        self._instance = instance
        self._decode = decode
        self._count_malformed = malformed
        self._max_queued_events = max_queued_events
        self._informer = Informer(kube, path, name=kind.crd_name,
                                  params={"labelSelector": storage_selector(instance)},
                                  transform=strip_managed_fields,
                                  indexes={_BY_NAMESPACE_LABEL: _labelled_namespace})
        self._informer.add_handlers(Handlers(on_add=self._added, on_update=self._updated,
                                             on_delete=self._deleted, on_listed=self._listed))
        self._task: asyncio.Task[None] | None = None
        self._entries: dict[Key, Entry] = {}
        self._written: dict[Key, Entry] = {}
        """This replica's writes the watch has not brought yet (the write-through overlay)."""
        self._index: dict[tuple[str, str, str], set[Key]] = {}
        """(indexed field, namespace, value) -> keys: cohorts select on them without a scan."""
        self._window: deque[_Event] = deque(maxlen=history)
        self._fresh_seconds = fresh_seconds
        self._monotonic = monotonic
        self._compacted = 0
        self._listed_once = False
        self._changed = asyncio.Event()
        self._hub = WatchHub()
        self._names: dict[str, Key] = {}
        """Storage name -> public key of each cached entry."""
        self._malformed: dict[str, int] = {}
        """The storage objects (by name) skipped as malformed, with the resourceVersion logged."""

    # Lifecycle

    @property
    def synced(self) -> bool:
        """Whether the cache holds a list (readiness)."""
        return self._informer.has_synced()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._informer.run(), name=self._kind.crd_name)

    def close(self) -> None:
        self._hub.close_all()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def ready(self) -> None:
        """Start the cache and wait for its first list (``StorageUnavailable`` after
        ``SYNC_TIMEOUT_SECONDS``)."""
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
            await self.reached(0, SYNC_TIMEOUT_SECONDS, lambda: self._listed_once)

    async def reached(self, rv: int, timeout: float,
                      condition: Callable[[], bool] | None = None) -> bool:
        """Wait until the cache is at ``rv`` (or ``condition`` holds); False at the timeout.
        Polls too: bookmarks move the cache's version without a handler call."""
        check = condition or (lambda: self.current_rv() >= rv)
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
        return True

    async def caught_up(self) -> None:
        """Wait until the watch has brought every write of this replica that the overlay
        holds (for a list, which reads the watch's changes alone); at most
        ``SYNC_TIMEOUT_SECONDS``, then the list reads the cache as it is (logged)."""
        if self._written:
            target = max(entry.rv for entry in self._written.values())
            if not await self.reached(target, SYNC_TIMEOUT_SECONDS):
                log.warning("storage cache lags a write", extra={
                    "resource": self._kind.crd_name, "resource_version": target})

    def current_rv(self) -> int:
        """The resourceVersion the watch has brought the cache to."""
        value = self._informer.resource_version
        return int(value) if value.isdigit() else 0

    @property
    def compacted(self) -> int:
        """Changes at or before this resourceVersion are not in the window."""
        return self._compacted

    # Reads

    def get(self, key: Key) -> Entry | None:
        """The object of ``key`` as this replica last knew it: its own write if the watch has
        not brought it yet, else the watch's."""
        written, cached = self._written.get(key), self._entries.get(key)
        if written is not None and (cached is None or written.rv > cached.rv):
            return written
        return cached

    def entries(self) -> builtins.list[Entry]:
        """Every cached entry (the watch's)."""
        return list(self._entries.values())

    def candidates(self, namespace: str, selector: FieldSelector) -> Iterable[Entry]:
        """The entries of ``namespace`` (the watch's) that may match ``selector``: through an
        index when it requires an indexed field to equal a value."""
        for requirement in selector.requirements:
            if requirement.field in self.resource.indexed_fields and not requirement.negated:
                keys = self._index.get((requirement.field, namespace, requirement.value), set())
                return [self._entries[key] for key in keys]
        return [e for k, e in self._entries.items() if k[0] == namespace]

    def candidates_at(self, namespace: str, selector: FieldSelector, at: int
                      ) -> builtins.list[Entry] | None:
        """The entries of ``namespace`` that match ``selector``, as they were at resourceVersion
        ``at`` (the current ones, with the window's later changes undone); None if the window
        no longer reaches back to ``at``. The cache must have reached ``at``."""
        if at < self._compacted:
            return None
        found = {key_of(entry.object): entry for entry in self.candidates(namespace, selector)
                 if selector.matches(entry.object)}
        for event in reversed(self._window):
            if event.rv <= at:
                break
            if event.key[0] != namespace:
                continue
            if event.before is not None and selector.matches(event.before.object):
                found[event.key] = event.before
            else:
                found.pop(event.key, None)
        return list(found.values())

    def snapshot(self, at: int, namespace: str | None = None,
                 fields: FieldSelector | None = None) -> dict[Key, Object]:
        """The objects as of resourceVersion ``at`` (at least the window's oldest); with a
        ``namespace``, only those of it that may match ``fields`` then (a superset, from the
        index when ``fields`` requires an indexed field to equal a value: not a scan)."""
        if namespace is None:
            objects = {key: entry.object for key, entry in self._entries.items()}
        else:
            objects = {key_of(entry.object): entry.object
                       for entry in self.candidates(namespace, fields or FieldSelector())}
        for event in reversed(self._window):
            if event.rv <= at:
                break
            if namespace is not None and event.key[0] != namespace:
                continue
            if event.before is None:
                objects.pop(event.key, None)
            else:
                objects[event.key] = event.before.object
        return objects

    def holds(self, listed: Versions, namespace: str | None, name: str) -> bool:
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
        return {storage_name_of(stored): revision(stored) for stored in scope} == listed

    def deletion(self, uid: str) -> Object | None:
        """The DELETED change of the public object with ``uid``, if the window holds it."""
        for event in reversed(self._window):
            if (event.change.type is EventType.DELETED
                    and metadata(event.change.object).get("uid") == uid):
                return event.change.object
        return None

    def watch(self, start: int | None, selection: WatchFilter, after: int = 0) -> Watch:
        """A watch of the changes after ``start`` (the window must reach back to it), or with
        None of the current objects as ADDED, then of what follows; with ``after``, changes at
        or before it are dropped."""
        if start is None:
            initial = [Change(EventType.ADDED, e.object) for _, e in sorted(self._entries.items())]
        else:
            initial = [event.change for event in self._window if event.rv > start]
        watch = Watch(initial, _After(selection.namespace, selection.labels, selection.fields,
                                      after=after),
                      max_queued=self._max_queued_events, on_close=self._hub.remove)
        self._hub.add(watch)
        return watch

    # Writes of this replica

    def wrote(self, stored: Object) -> Object:
        """Put the storage object a write of this replica returned into the cache (the
        overlay) unless the watch has brought it or a newer one already; the public object."""
        entry = self.entry_of(stored)
        key = key_of(entry.object)
        current = self.get(key)
        if current is None or entry.rv > current.rv:
            self._written[key] = entry
        return public_of(stored)

    def entry_of(self, stored: Object) -> Entry:
        """The entry of a storage object; ``MalformedObject`` unless the envelope (its public
        metadata included, whose name must be the storage object's) and the kind's decoder
        accept it."""

        def envelope(obj: Object) -> Entry:
            inner = mapping(obj.get("object"), "object")
            sequence = optional_integer(obj.get("sequence"), "sequence")
            created = optional_integer(obj.get(CREATED_REVISION), CREATED_REVISION)
            meta = mapping(inner.get("metadata"), "object.metadata")
            namespace = text(meta.get("namespace"), "object.metadata.namespace")
            name = text(meta.get("name"), "object.metadata.name")
            text(meta.get("uid"), "object.metadata.uid")
            text(meta.get("creationTimestamp"), "object.metadata.creationTimestamp")
            expected = storage_name(namespace, name)
            if expected != storage_name_of(obj):
                raise Malformed(
                    f"object.metadata names {namespace}/{name}, whose storage object is "
                    f"{expected!r}, not {storage_name_of(obj)!r}")
            public = public_object(public_of(obj))
            labels = metadata(obj).get("labels") or {}
            wanted = storage_labels(self._kind, self._instance, public, sequence)
            return Entry(public, sequence, str(metadata(obj).get("uid", "")),
                         all(labels.get(key) == value for key, value in wanted.items()),
                         created or revision(obj))

        entry = decoded(self.resource, stored, envelope)
        if self._decode is not None:
            self._decode(entry.object)
        return entry

    # The informer's handlers

    def _is_watch_event(self, obj: Object) -> bool:
        """A change the informer got from its watch (it sets its resourceVersion to the
        event's before calling handlers), not a difference it found by listing."""
        return self._listed_once and str(revision(obj)) == self._informer.resource_version

    def _index_keys(self, obj: Object) -> builtins.list[tuple[str, str, str]]:
        namespace = metadata(obj).get("namespace", "")
        return [(field, namespace, field_value(obj, field))
                for field in self.resource.indexed_fields]

    def _put(self, key: Key, entry: Entry | None) -> Entry | None:
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

    def _brought(self, key: Key, rv: int) -> None:
        """The watch brought ``key`` at ``rv``: a write of this replica up to it is in."""
        written = self._written.get(key)
        if written is not None and written.rv <= rv:
            del self._written[key]

    def _added(self, stored: Object) -> None:
        self._changed_to(stored)

    def _updated(self, old: Object, stored: Object) -> None:
        self._changed_to(stored)

    def _changed_to(self, stored: Object) -> None:
        """The cache after an object's new state: a malformed one is skipped (and the valid
        state it replaced, if any, is deleted for readers)."""
        entry = self._accepted(stored)
        key = key_of(entry.object) if entry is not None else self._names.get(
            storage_name_of(stored))
        if key is None:  # malformed and never cached: nobody saw it
            self._notify()
            return
        self._brought(key, revision(stored))
        before = self._put(key, entry)
        if entry is not None:
            change = (Change(EventType.ADDED, entry.object) if before is None else
                      Change(EventType.MODIFIED, entry.object, before.object))
        elif before is not None:
            change = Change(EventType.DELETED, _at_revision(before.object, revision(stored)))
        else:
            self._notify()
            return
        self._record(change, before, stored)

    def _deleted(self, stored: Object) -> None:
        name = storage_name_of(stored)
        key = self._names.get(name)
        if self._malformed.pop(name, None) is not None and key is None:
            self._notify()  # never cached: nobody saw it
            return
        before = self._entries.get(key) if key is not None else None
        if key is not None and before is not None:
            self._brought(key, revision(stored))
            if before.storage_uid == metadata(stored).get("uid"):
                self._put(key, None)
            gone = _at_revision(before.object, revision(stored))
        else:
            gone = public_of(stored)
            self._brought(key_of(gone), revision(stored))
        self._record(Change(EventType.DELETED, gone), before, stored)

    def _accepted(self, stored: Object) -> Entry | None:
        """The cache entry of a storage object; None (logged once, counted) if malformed."""
        name = storage_name_of(stored)
        try:
            entry = self.entry_of(stored)
        except MalformedObject as error:
            if self._malformed.get(name) != revision(stored):
                self._malformed[name] = revision(stored)
                log.warning("malformed storage object ignored", extra={
                    "resource": self._kind.crd_name, "namespace": self._storage_namespace,
                    "object": name, "resource_version": revision(stored), "reason": error.why})
                if self._count_malformed is not None:
                    self._count_malformed(self._kind.plural)
            return None
        self._malformed.pop(name, None)
        return entry

    def _record(self, change: Change, before: Entry | None, stored: Object) -> None:
        if self._is_watch_event(stored):
            now = self._monotonic()
            if len(self._window) == self._window.maxlen:
                self._compacted = self._window[0].rv
            self._window.append(_Event(revision(stored), key_of(change.object), change, before,
                                       now))
            while len(self._window) > MIN_HISTORY and (
                    self._window[0].at < now - self._fresh_seconds):
                self._compacted = self._window.popleft().rv
            self._hub.publish(change)
        self._notify()

    def _listed(self) -> None:
        """After a list: the window no longer describes how the cache got here (a relist
        after a 410 or a failure skipped changes), so it restarts at the list's version and
        open watches end (their clients watch again, get 410 and list). The overlay keeps only
        writes newer than the list."""
        if self._listed_once:
            log.warning("storage cache relisted; open watches end", extra={
                "resource": self._kind.crd_name, "resource_version":
                    self._informer.resource_version})
            self._hub.close_all()
        self._listed_once = True
        self._window.clear()
        self._compacted = self.current_rv()
        self._written = {key: entry for key, entry in self._written.items()
                         if entry.rv > self._compacted}
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
