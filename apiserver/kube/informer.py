"""One list-then-watch cache of a kube-apiserver collection: every list/watch of the server.

Modelled on client-go's ``tools/cache`` (a Reflector filling an Indexer, shared by event
handlers) and kopf's watching loop, in one asyncio task and without threads:

- **list** the collection page by page (``limit`` + ``continue``), then replace the cache with
  what it holds: objects gone since the last list are deleted (handlers see ``on_delete``), new
  ones added, changed ones updated. ``items: null`` (an empty list) is an empty list.
- **watch** from the list's resourceVersion with ``allowWatchBookmarks`` and a jittered
  ``timeoutSeconds``; a watch the server ends cleanly is resumed from the last resourceVersion
  seen (bookmarks advance it without touching the cache).
- **410 Gone** (as the answer to the watch or list, or as an ``ERROR`` event): list again, at
  once if the watch had been open (or resuming) for a while since the last list (after
  kube-apiserver restarted, every watch's resourceVersion is gone: waiting would only leave the
  cache stale), after a backoff if it expired at once.
- a **dropped connection** or an unavailable kube-apiserver (``KubeUnavailable``: it is
  restarting, 502/503/504) during a watch: back off, then resume the watch from the last
  resourceVersion (a 410 then means list again). The backoff ends early once kube-apiserver
  answers another request of the same client (``KubeClient.next_answer``: the Lease renewals
  every few seconds), so the cache resyncs within seconds of kube-apiserver being back, however
  long it was gone. Until the next list succeeds, every failure ends its backoff so: a
  kube-apiserver that has just started answers 403 (its authorizer has not synced) and 429
  ("storage is (re)initializing") for some seconds, and the informer must not then sleep 30 s.
- **any other failure** (an ``ERROR`` event, an error answer, a failed list, a malformed
  event): back off, then list again.

Backoff is exponential, capped and jittered (`Backoff`), and resets once a watch has stayed
open for `healthy_seconds`. A watch that ends cleanly but at once (under a second) is backed off
too, so no answer of kube-apiserver can make the loop spin (an early end of a backoff needs an
answer to another request, so it is bounded by that request's rate).

The cache keeps each object (after the optional `transform`, which trims it to the fields a
user needs, bounding memory), keyed by (namespace, name), and named indexes
(`by_namespace`, `by_uid`, `by_controller_uid` or any function from an object to index values).
Handlers run inline in the informer's task, in event order: they must be quick and must not
block. `synced` is set once the first list is in the cache.

Start it with ``task = asyncio.create_task(informer.run())``; ``await informer.synced.wait()``
before trusting a miss; cancel the task to stop it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apiserver.kube.client import (
    METADATA_ONLY,
    METADATA_ONLY_WATCH,
    KubeClient,
    KubeRejected,
    KubeUnavailable,
)

log = logging.getLogger(__name__)

Object = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""
IndexFunc = Callable[[Object], Iterable[str]]
Transform = Callable[[Object], Object]

PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 300
"""A watch asks for between this and twice this (random), so that watches do not all end at
once, as client-go's reflector does."""
HEALTHY_SECONDS = 30.0
MIN_WATCH_SECONDS = 1.0


def strip_managed_fields(obj: Object) -> Object:
    """`obj` without ``metadata.managedFields`` (as client-go's TransformStripManagedFields):
    kube-apiserver's record of who set which field, never read from a cache, and often the
    larger half of a small object."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def by_namespace(obj: Object) -> list[str]:
    return [obj["metadata"].get("namespace", "")]


def by_uid(obj: Object) -> list[str]:
    uid = obj["metadata"].get("uid")
    return [uid] if uid else []


def by_controller_uid(obj: Object) -> list[str]:
    """The UID of the object's controlling owner (ownerReferences with controller: true)."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return [ref["uid"]]
    return []


NAMESPACE = "namespace"
UID = "uid"
CONTROLLER = "controller"
STANDARD_INDEXES: Mapping[str, IndexFunc] = {
    NAMESPACE: by_namespace, UID: by_uid, CONTROLLER: by_controller_uid}


@dataclass(frozen=True)
class Handlers:
    """What to call when the cache changes; each is optional. ``on_delete`` gets the object's
    last state (from the DELETED event, or as last cached when a relist found it gone)."""

    on_add: Callable[[Object], None] | None = None
    on_update: Callable[[Object, Object], None] | None = None
    """(old, new); only when the resourceVersion changed."""
    on_delete: Callable[[Object], None] | None = None
    on_listed: Callable[[], None] | None = None
    """After each list is in the cache (the first sync and every relist)."""


@dataclass
class Backoff:
    """Capped exponential backoff with jitter: the n-th delay is drawn from
    [(1 - jitter) * d, d] where d = min(initial * factor ** n, maximum)."""

    initial: float = 0.8
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5
    random: Callable[[], float] = random.random
    _next: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"backoff: need 0 < initial ({self.initial}) <= maximum "
                             f"({self.maximum}), factor ({self.factor}) >= 1 and "
                             f"0 <= jitter ({self.jitter}) < 1")
        self._next = self.initial

    def delay(self) -> float:
        base = self._next
        self._next = min(base * self.factor, self.maximum)
        return base * (1 - self.jitter * self.random())

    def reset(self) -> None:
        self._next = self.initial


class _Expired(Exception):
    """The resourceVersion (or continue token) is older than kube-apiserver keeps: list."""


def _key(obj: Object) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _uid(obj: Object) -> str:
    return str(obj["metadata"].get("uid", ""))


def _resource_version(obj: Object) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


class Informer:
    """A list-then-watch cache of the collection at `path` (see the module's docstring).

    `params` narrow the collection (``labelSelector``, ``fieldSelector``); `metadata_only`
    asks for PartialObjectMetadata; `transform` trims each object before it is cached (and
    must keep ``metadata.name``, ``namespace``, ``uid`` and ``resourceVersion``); `indexes`
    names the index functions `by_index` can use. `clock`, `sleep` and `rand` are for tests.
    """

    def __init__(self, kube: KubeClient, path: str, *, name: str = "",
                 params: Mapping[str, str] | None = None, metadata_only: bool = False,
                 transform: Transform | None = None,
                 indexes: Mapping[str, IndexFunc] | None = None,
                 page_size: int = PAGE_SIZE, watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
                 backoff: Backoff | None = None, healthy_seconds: float = HEALTHY_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rand: Callable[[], float] = random.random) -> None:
        self.name = name or path
        self._kube = kube
        self._path = path
        self._params = dict(params or {})
        self._list_accept = METADATA_ONLY if metadata_only else None
        self._watch_accept = METADATA_ONLY_WATCH if metadata_only else None
        self._transform = transform
        self._index_funcs = dict(indexes or {})
        self._page_size = page_size
        self._watch_timeout_seconds = watch_timeout_seconds
        self._backoff = backoff or Backoff(random=rand)
        self._healthy_seconds = healthy_seconds
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._objects: dict[Key, Object] = {}
        self._indexes: dict[str, dict[str, set[Key]]] = {name: {} for name in self._index_funcs}
        self._handlers: list[Handlers] = []
        self.synced = asyncio.Event()
        """Set once the first list is in the cache (and stays set)."""
        self.resource_version = ""
        """The last resourceVersion seen (list, event or bookmark)."""
        self._recovering = False
        """kube-apiserver was unavailable since the last list: back off only until it
        answers another request."""

    # reading the cache

    def has_synced(self) -> bool:
        return self.synced.is_set()

    def get(self, namespace: str, name: str) -> Object | None:
        return self._objects.get((namespace, name))

    def list(self) -> list[Object]:
        return list(self._objects.values())

    def by_index(self, index: str, value: str) -> builtins.list[Object]:
        """The objects whose index function `index` gives `value`."""
        try:
            keys = self._indexes[index].get(value, ())
        except KeyError:
            raise KeyError(f"informer {self.name}: no index named {index!r} (it has "
                           f"{', '.join(sorted(self._indexes)) or 'none'})") from None
        return [self._objects[key] for key in keys]

    def add_handlers(self, handlers: Handlers) -> None:
        """Call `handlers` from now on; objects already cached are replayed as adds."""
        self._handlers.append(handlers)
        if handlers.on_add is not None:
            for obj in list(self._objects.values()):
                self._call(handlers.on_add, obj)

    # the loop

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            listed_at: float | None = None
            try:
                resource_version = await self._list()
                listed_at = self._clock()
                await self._watch_from(resource_version)
            except _Expired:
                log.info("informer: resourceVersion expired; listing again",
                         extra={"informer": self.name})
                if listed_at is not None and self._clock() - listed_at >= MIN_WATCH_SECONDS:
                    continue
            except KubeUnavailable as error:
                log.warning("informer: list failed, kube-apiserver unavailable; listing again",
                            extra={"informer": self.name, "error": str(error)})
                self._recovering = True
            except KubeRejected as error:
                log.warning("informer: list/watch failed; listing again",
                            extra={"informer": self.name, "error": str(error)})
            except Exception as error:  # a malformed answer must not end the loop
                log.exception("informer: unexpected failure; listing again",
                              extra={"informer": self.name, "error": str(error)})
            await self._back_off(until_answered=self._recovering)

    async def _back_off(self, *, until_answered: bool = False) -> None:
        """Sleep the next backoff delay; with `until_answered`, less if kube-apiserver answers
        another request of the client meanwhile."""
        delay = self._backoff.delay()
        log.debug("informer: backing off", extra={"informer": self.name,
                                                  "retry_seconds": round(delay, 3)})
        if not until_answered:
            await self._sleep(delay)
            return
        waits = [asyncio.ensure_future(self._sleep(delay)),
                 asyncio.ensure_future(self._kube.next_answer())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _list(self) -> str:
        listed: dict[Key, Object] = {}
        token = ""
        while True:
            params = {**self._params, "limit": str(self._page_size)}
            if token:
                params["continue"] = token
            try:
                page = await self._kube.get(self._path, params=params, accept=self._list_accept)
            except KubeRejected as error:
                if error.status_code == 410:  # the continue token expired
                    raise _Expired() from None
                raise
            for item in page.get("items") or []:
                obj = self._trimmed(item)
                listed[_key(obj)] = obj
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                break
        self._replace(listed)
        self.resource_version = str(meta.get("resourceVersion", ""))
        log.info("informer: listed", extra={"informer": self.name, "objects": len(listed),
                                            "resource_version": self.resource_version})
        self.synced.set()
        self._recovering = False
        for handlers in list(self._handlers):
            if handlers.on_listed is not None:
                self._call(handlers.on_listed)
        return self.resource_version

    async def _watch_from(self, resource_version: str) -> None:
        """Watch, resuming after clean ends and dropped connections; raises _Expired on 410."""
        while True:
            started, events = self._clock(), 0
            params = {**self._params, "resourceVersion": resource_version,
                      "allowWatchBookmarks": "true",
                      "timeoutSeconds": str(int(self._watch_timeout_seconds
                                                * (1 + self._rand())))}
            try:
                async for event in self._kube.watch(self._path, params,
                                                    accept=self._watch_accept):
                    events += 1
                    resource_version = self._apply(event, resource_version)
            except _Expired:
                self._note_watch_lasted(started)
                raise
            except KubeRejected as error:
                self._note_watch_lasted(started)
                if error.status_code == 410:
                    raise _Expired() from None
                raise
            except KubeUnavailable as error:
                self._note_watch_lasted(started)
                log.warning("informer: watch interrupted; resuming", extra={
                    "informer": self.name, "error": str(error),
                    "resource_version": resource_version})
                self._recovering = True
                await self._back_off(until_answered=True)
                continue
            if self._note_watch_lasted(started) < MIN_WATCH_SECONDS:
                # kube-apiserver ends a watch at its timeout; one that ends at once, whatever
                # it sent, must not be reopened at once, or the loop could spin.
                log.warning("informer: watch ended at once; backing off",
                            extra={"informer": self.name, "events": events})
                await self._back_off()

    def _note_watch_lasted(self, started: float) -> float:
        lasted = self._clock() - started
        if lasted >= self._healthy_seconds:
            self._backoff.reset()
        return lasted

    def _apply(self, event: Mapping[str, Any], resource_version: str) -> str:
        """Apply one watch event to the cache; return the resourceVersion to resume from."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 500)
            if code == 410:
                raise _Expired()
            raise KubeRejected(code, obj)
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise ValueError(f"informer {self.name}: unknown watch event type {kind!r}")
        resource_version = _resource_version(obj) or resource_version
        self.resource_version = resource_version
        if kind == "BOOKMARK":
            return resource_version
        obj = self._trimmed(obj)
        if kind == "DELETED":
            key = _key(obj)
            cached = self._objects.get(key)
            if cached is not None and _uid(cached) == _uid(obj):
                self._remove(key)
            self._emit_delete(obj)
        else:
            self._put(obj)
        return resource_version

    # the cache

    def _trimmed(self, obj: Object) -> Object:
        return self._transform(obj) if self._transform is not None else obj

    def _replace(self, listed: Mapping[Key, Object]) -> None:
        for key, cached in list(self._objects.items()):
            new = listed.get(key)
            if new is None or _uid(new) != _uid(cached):
                self._remove(key)
                self._emit_delete(cached)
        for obj in listed.values():
            self._put(obj)

    def _put(self, obj: Object) -> None:
        """Cache `obj`; another UID under its name is a deletion of the old object."""
        key = _key(obj)
        old = self._objects.get(key)
        if old is not None and _uid(old) != _uid(obj):
            self._remove(key)
            self._emit_delete(old)
            old = None
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        for name, func in self._index_funcs.items():
            for value in func(obj):
                self._indexes[name].setdefault(value, set()).add(key)
        if old is None:
            for handlers in list(self._handlers):
                if handlers.on_add is not None:
                    self._call(handlers.on_add, obj)
        elif _resource_version(old) != _resource_version(obj):
            for handlers in list(self._handlers):
                if handlers.on_update is not None:
                    self._call(handlers.on_update, old, obj)

    def _remove(self, key: Key) -> None:
        old = self._objects.pop(key)
        self._unindex(key, old)

    def _unindex(self, key: Key, obj: Object) -> None:
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _emit_delete(self, obj: Object) -> None:
        for handlers in list(self._handlers):
            if handlers.on_delete is not None:
                self._call(handlers.on_delete, obj)

    def _call(self, handler: Callable[..., None], *args: Object) -> None:
        try:
            handler(*args)
        except Exception:
            log.exception("informer: event handler failed", extra={"informer": self.name})
