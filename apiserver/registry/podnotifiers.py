"""The PodNotifier strategy: what the registry adds to generic storage for per-pod records.

``PodNotifierStore`` wraps any backend's ``ObjectStore`` of podnotifiers and is one itself
(every generic operation passes through), adding the rules of this resource in terms of the
generic interface only:

- ``create_bounded``: at most one unfinished run per (pod, notifier) (409) and at most K
  unfinished runs per pod (429 with Retry-After). The record itself is the run's place in
  line: created Running, naming the replica that runs it (``status.replica``), it is admitted
  among the pod's records created before it (``Cohort.admit``, as an etcd lock goes to the
  lowest creation revision), so the rules hold across replicas with no write besides the
  record's own; a refused record is deleted again, and a refusal the pod's current records
  already make writes nothing. The record is created through a ``Cohort`` of the pod's records
  (``spec.podName``, an indexed field): at K, the pod's oldest finished records are deleted in
  one batch, down to half of K with the new one (``eviction_low_water``); the pod's records are
  trimmed to K again shortly after (replicas evicting at once may leave more);
- ``collect``: in one scan of every record, page by page, keeping what it decides on and not
  the records (a replica's collector, every 10 s, used to hold two copies of every record at
  once), finished records whose TTL after ``completionTime`` has passed, and the oldest finished
  records beyond K of a pod (``trim``);
- ``unfinished``: every Pending or Running record, for restart recovery;
- ``guaranteed_update``: a finished record never changes again (``Finished``, 409): its spec
  and status stay as first finished, whoever writes; labels and annotations may change.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from apiserver.api.types import FINISHED_PHASES, PHASES
from apiserver.registry.errors import (
    Conflict,
    Finished,
    NotFound,
    StoreError,
    TooManyRequests,
    required,
)
from apiserver.registry.objects import metadata
from apiserver.registry.paging import all_objects
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import Cohort, ListResult, Object, ObjectStore
from apiserver.registry.watch import Watch
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)

DEFAULT_RETRY_AFTER_SECONDS = 5
TRIM_DELAY_SECONDS = 1.0
"""After a bounded create, when the pod's records are trimmed to K again."""
_UNFINISHED = ",".join(f"status.phase!={phase}" for phase in FINISHED_PHASES)
_NEITHER_PENDING_NOR_RUNNING = ",".join(f"status.phase!={phase}" for phase in PHASES
                                        if phase not in FINISHED_PHASES)

T = TypeVar("T")


@dataclass(frozen=True)
class _Bounds:
    """What a bounded create is decided on: the pod's records and the rule that admits a run."""

    namespace: str
    pod: str
    admit: Callable[[list[Object]], None]
    """Gets records of the pod; raises ``Conflict`` or ``TooManyRequests`` to refuse."""


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` if it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


_FINAL_PARTS = ("spec", "status")
"""What of a finished record never changes again."""


def is_finished(record: Mapping[str, Any]) -> bool:
    return _part(record, "status").get("phase") in FINISHED_PHASES


def expires_at(record: Mapping[str, Any], default_ttl_seconds: int) -> float | None:
    """When a finished record may be deleted (seconds since the epoch): its completionTime plus
    ``spec.ttlSecondsAfterFinished``, else plus the default; None if not finished or without a
    completionTime."""
    if not is_finished(record):
        return None
    completed = parse_timestamp(record["status"].get("completionTime"))
    if completed is None:
        return None
    ttl = _part(record, "spec").get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        ttl = default_ttl_seconds
    return completed + ttl


class PodNotifierStore(ObjectStore):
    """PodNotifier records on ``backend``; ``replica`` names this server in the records it
    runs (``status.replica``)."""

    def __init__(self, backend: ObjectStore, replica: str, *,
                 trim_delay_seconds: float = TRIM_DELAY_SECONDS,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if backend.resource != PODNOTIFIERS:
            raise ValueError(f"a PodNotifierStore needs a podnotifiers backend, not "
                             f"{backend.resource.plural}")
        self.resource = backend.resource
        self.max_object_bytes = backend.max_object_bytes
        self.replica = replica
        self._backend = backend
        self._trim_delay = trim_delay_seconds
        self._sleep = sleep
        self._trims: set[asyncio.Task[None]] = set()
        self._pending_trims: set[tuple[str, str]] = set()
        """Pods with a trim not started yet."""

    # The strategy

    async def create_bounded(
        self, obj: Mapping[str, Any], *, max_per_pod: int,
        retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS,
    ) -> Object:
        """Create a per-pod record (``spec.podName``, ``spec.notifier``) run by this replica,
        bounding the pod's.

        ``Conflict`` if an unfinished record of the same notifier is on the pod, among those
        created before this one; ``TooManyRequests`` if ``max_per_pod`` unfinished ones are.
        Decided first on the pod's current records, so that a refusal writes nothing, then by
        the store among the records created before this one (``Cohort.admit``: exact across
        replicas). The pod's oldest finished records are evicted in a batch when it holds
        ``max_per_pod``. The whole runs to its end even if the caller is cancelled.
        """
        bounds = self._bounds(obj, max_per_pod, retry_after_seconds)
        await self._decide_on_current(bounds)
        created = await _whole(self._backend.create(_run_by(obj, self.replica), cohort=Cohort(
            f"spec.podName={bounds.pod}", _NEITHER_PENDING_NOR_RUNNING, max_per_pod,
            eviction_low_water(max_per_pod), admit=bounds.admit)))
        self._trim_later(bounds.namespace, bounds.pod, max_per_pod)
        return created

    async def check_bounded(
        self, obj: Mapping[str, Any], *, max_per_pod: int,
        retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS,
    ) -> Object:
        """Every check ``create_bounded`` makes, storing nothing (a dry run): the pod's current
        records decide as they would (``Conflict``, ``TooManyRequests``), then the backend
        checks the create (``ObjectStore.check_create``: the name, the size cap). Returns the
        record as it would be created."""
        bounds = self._bounds(obj, max_per_pod, retry_after_seconds)
        await self._decide_on_current(bounds)
        return await self._backend.check_create(_run_by(obj, self.replica))

    def _bounds(self, obj: Mapping[str, Any], max_per_pod: int, retry_after_seconds: int
                ) -> _Bounds:
        """What a bounded create of `obj` is decided on, or ``Invalid`` naming what is
        missing."""
        if max_per_pod < 1:
            raise ValueError("max_per_pod must be at least 1")
        spec, meta = _part(obj, "spec"), _part(obj, "metadata")
        pod, notifier = spec.get("podName"), spec.get("notifier")
        if not isinstance(pod, str) or not pod or not isinstance(notifier, str) or not notifier:
            raise required(self.resource, "spec.podName", "spec.notifier")
        namespace = meta.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise required(self.resource, "metadata.namespace")
        if not meta.get("name") and not meta.get("generateName"):
            raise required(self.resource, "metadata.name", detail="name or generateName")

        def admit(records: list[Object]) -> None:
            unfinished = [record for record in records if not is_finished(record)]
            for record in unfinished:
                if _part(record, "spec").get("notifier") == notifier:
                    name = str(metadata(record).get("name", ""))
                    raise Conflict(
                        f'notifier "{notifier}" is already running on pod "{pod}" '
                        f'({self.resource.qualified} "{name}"); wait for it to finish',
                        resource=self.resource, name=name)
            if len(unfinished) >= max_per_pod:
                raise TooManyRequests(
                    f'pod "{pod}" has {max_per_pod} or more unfinished notifier records, '
                    "the most it may keep; retry when one of them finishes",
                    resource=self.resource, retry_after_seconds=retry_after_seconds)

        return _Bounds(namespace, pod, admit)

    async def _decide_on_current(self, bounds: _Bounds) -> None:
        """Refuse, writing nothing, what the pod's records refuse now: those this replica's
        store holds, and if they refuse, the unfinished ones read again from the storage
        itself (this replica's cache may not hold another replica's final write yet, e.g. of
        the run a client waited for before it asked again through this replica)."""
        records = await self._pod_records(bounds.namespace, bounds.pod)
        try:
            bounds.admit(records)
        except (Conflict, TooManyRequests):
            current = []
            for record in records:
                if not is_finished(record):
                    try:
                        record = await self._backend.get_current(
                            bounds.namespace, str(metadata(record).get("name", "")))
                    except NotFound:
                        continue
                current.append(record)
            bounds.admit(current)

    async def trim(self, namespace: str, pod: str, max_per_pod: int) -> int:
        """Delete the pod's oldest finished records beyond ``max_per_pod``; how many."""
        return await self._trim(await self._pod_records(namespace, pod), max_per_pod)

    async def _trim(self, records: Sequence[Object], max_per_pod: int) -> int:
        excess = len(records) - max_per_pod
        if excess <= 0:
            return 0
        deleted = 0
        for record in sorted(filter(is_finished, records), key=_creation_order)[:excess]:
            meta = metadata(record)
            try:
                await self._backend.delete(meta["namespace"], meta["name"], uid=meta["uid"])
            except (NotFound, Conflict):
                continue
            deleted += 1
        return deleted

    def _trim_later(self, namespace: str, pod: str, max_per_pod: int) -> None:
        """Trim the pod in ``TRIM_DELAY_SECONDS`` (once for creates meanwhile): by then the
        creates of other replicas that evicted against the same records are in the cache."""
        key = (namespace, pod)
        if key in self._pending_trims:
            return
        self._pending_trims.add(key)

        async def trim_soon() -> None:
            try:
                await self._sleep(self._trim_delay)
            finally:  # creates from now on schedule a trim of their own
                self._pending_trims.discard(key)
            try:
                trimmed = await self.trim(namespace, pod, max_per_pod)
            except StoreError as error:
                log.warning("trimming records failed; the collector trims them", extra={
                    "namespace": namespace, "pod": pod, "error": str(error)})
                return
            if trimmed:
                log.info("trimmed records beyond the bound", extra={
                    "namespace": namespace, "pod": pod, "deleted": trimmed})

        task = asyncio.create_task(trim_soon(), name=f"trim {namespace}/{pod}")
        self._trims.add(task)
        task.add_done_callback(self._trims.discard)

    async def _pod_records(self, namespace: str, pod: str) -> list[Object]:
        return (await self._backend.list(namespace, field_selector=f"spec.podName={pod}")).items

    async def collect(self, now: datetime, default_ttl_seconds: int, max_per_pod: int
                      ) -> tuple[list[Object], int]:
        """One scan of every record, page by page: delete each finished record whose
        completionTime plus TTL is not after ``now`` (the TTL is ``spec.ttlSecondsAfterFinished``,
        else ``default_ttl_seconds``; a record without a completionTime never expires, one
        changed since it was read is kept), then ``trim`` every pod left with more than
        ``max_per_pod`` records. Returns the expired records deleted and how many were
        trimmed."""
        deadline = now.timestamp()
        expired: list[Object] = []
        pods: dict[tuple[str, str], list[Object]] = {}
        async for record in all_objects(self._backend):
            meta = metadata(record)
            moment = expires_at(record, default_ttl_seconds)
            if moment is not None and moment <= deadline:
                try:
                    expired.append(await self._backend.delete(
                        meta["namespace"], meta["name"],
                        resource_version=meta["resourceVersion"], uid=meta["uid"]))
                    continue
                except NotFound:
                    continue
                except Conflict:
                    pass  # changed since it was read: kept, and counted for its pod
            key = (str(meta.get("namespace", "")), str(_part(record, "spec").get("podName", "")))
            pods.setdefault(key, []).append(_trim_key(record))
        trimmed = 0
        for records in pods.values():
            if len(records) > max_per_pod:
                trimmed += await self._trim(records, max_per_pod)
        return expired, trimmed

    async def unfinished(self) -> list[Object]:
        """Every record not Succeeded or Failed, in all namespaces (for restart recovery)."""
        return await self._all(_UNFINISHED)

    async def _all(self, field_selector: str) -> list[Object]:
        """Every record in all namespaces that matches, read page by page from one snapshot."""
        return [record async for record in all_objects(self._backend,
                                                        field_selector=field_selector)]

    # Generic operations, passed through

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        return await self._backend.create(obj, cohort=cohort)

    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        await self._backend.consistent_read(namespace, name)

    async def get(self, namespace: str, name: str) -> Object:
        return await self._backend.get(namespace, name)

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        """``mutate`` the current record; raises ``Finished`` if the record is finished and
        the mutation would change its spec or status (checked on the version it is applied
        to, so a record another writer finished meanwhile is refused as well)."""

        def unless_finished(current: Object) -> Object:
            if not is_finished(current):
                return mutate(current)
            phase = str(_part(current, "status").get("phase"))
            before = copy.deepcopy({part: current.get(part) for part in _FINAL_PARTS})
            updated = mutate(current)  # which may change `current` in place
            if any(updated.get(part) != before[part] for part in _FINAL_PARTS):
                raise Finished(PODNOTIFIERS, name, phase)
            return updated

        return await _whole(self._backend.guaranteed_update(namespace, name, unless_finished))

    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        return await self._backend.delete(namespace, name, resource_version=resource_version,
                                          uid=uid)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        return await self._backend.delete_collection(
            namespace, label_selector=label_selector, field_selector=field_selector)

    async def list(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = "",
        limit: int = 0, continue_token: str = "",
    ) -> ListResult:
        return await self._backend.list(namespace, label_selector=label_selector,
                                        field_selector=field_selector, limit=limit,
                                        continue_token=continue_token)

    async def watch(
        self, namespace: str | None, *, resource_version: str = "", label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        return await self._backend.watch(namespace, resource_version=resource_version,
                                         label_selector=label_selector,
                                         field_selector=field_selector)

    def close(self) -> None:
        for task in self._trims:
            task.cancel()
        self._backend.close()


def runner(record: Mapping[str, Any]) -> str:
    """The server replica that runs the record (``status.replica``; "" if none is named: a
    record of an earlier version)."""
    replica = _part(record, "status").get("replica")
    return replica if isinstance(replica, str) else ""


def _run_by(obj: Mapping[str, Any], replica: str) -> Object:
    """``obj`` naming ``replica`` as the one that runs it."""
    record = copy.deepcopy(dict(obj))
    record["status"] = {**_part(record, "status"), "replica": replica}
    return record


def eviction_low_water(max_per_pod: int) -> int:
    """How many records a pod keeps, the new one included, when a create evicts: half of K
    (rounded up), so that K // 2 more creates evict nothing and evictions come in batches."""
    return max(1, max_per_pod - max_per_pod // 2)


def _trim_key(record: Object) -> Object:
    """Of a record, what trimming reads (``is_finished``, ``_creation_order``, the delete's
    name and uid): a scan of every record keeps this, not the records."""
    meta, state = metadata(record), _part(record, "status")
    return {"metadata": {key: meta[key] for key in
                         ("namespace", "name", "uid", "creationTimestamp") if key in meta},
            "status": {key: state[key] for key in ("phase", "completionTime") if key in state}}


def _creation_order(record: Object) -> tuple[float, float, str]:
    """Oldest first: creationTimestamp (seconds), then completionTime, then name."""
    meta = metadata(record)
    return (parse_timestamp(meta.get("creationTimestamp")) or 0.0,
            parse_timestamp(_part(record, "status").get("completionTime")) or 0.0,
            str(meta.get("name", "")))


async def _whole(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` as its own task, so that a cancelled caller does not stop it halfway (a
    record created and not yet decided on, left unfinished)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return await asyncio.shield(task)
