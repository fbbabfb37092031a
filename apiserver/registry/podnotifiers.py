"""The PodNotifier strategy: what the registry adds to generic storage for per-pod records.

``PodNotifierStore`` wraps any backend's ``ObjectStore`` of podnotifiers and is one itself
(every generic operation passes through), adding the rules of this resource in terms of the
generic interface only:

- ``create_bounded``: at most one unfinished record per (pod, notifier) (409) and at most K
  records per pod, made room for by deleting the pod's oldest finished records, or 429 with
  Retry-After when too many are unfinished; decided atomically with the create through a
  ``Cohort`` of the pod's records (``spec.podName``, an indexed field);
- ``delete_expired``: finished records whose TTL after ``completionTime`` has passed;
- ``unfinished``: every Pending or Running record, for restart recovery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from apiserver.api.time import parse_timestamp
from apiserver.api.types import FINISHED_PHASES
from apiserver.registry.errors import Conflict, NotFound, TooManyRequests, required
from apiserver.registry.objects import metadata
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import Cohort, ListResult, Object, ObjectStore
from apiserver.registry.watch import Watch

DEFAULT_RETRY_AFTER_SECONDS = 5
_PAGE = 500
_UNFINISHED = ",".join(f"status.phase!={phase}" for phase in FINISHED_PHASES)
_NEITHER_PENDING_NOR_RUNNING = "status.phase!=Pending,status.phase!=Running"


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` if it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


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
    def __init__(self, backend: ObjectStore) -> None:
        if backend.resource != PODNOTIFIERS:
            raise ValueError(f"a PodNotifierStore needs a podnotifiers backend, not "
                             f"{backend.resource.plural}")
        self.resource = backend.resource
        self._backend = backend

    # The strategy

    async def create_bounded(
        self, obj: Mapping[str, Any], *, max_per_pod: int,
        retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS,
    ) -> Object:
        """Create a per-pod record (``spec.podName``, ``spec.notifier``), bounding the pod's.

        Atomically: ``Conflict`` if an unfinished record of the same notifier exists for the
        pod; else delete the pod's oldest finished records to keep at most ``max_per_pod``,
        or raise ``TooManyRequests`` if too many are unfinished; then create.
        """
        if max_per_pod < 1:
            raise ValueError("max_per_pod must be at least 1")
        spec = _part(obj, "spec")
        pod, notifier = spec.get("podName"), spec.get("notifier")
        if not isinstance(pod, str) or not pod or not isinstance(notifier, str) or not notifier:
            raise required(self.resource, "spec.podName", "spec.notifier")

        def decide(records: list[Object]) -> list[Object]:
            for record in records:
                if record["spec"].get("notifier") == notifier and not is_finished(record):
                    name = metadata(record)["name"]
                    raise Conflict(
                        f'notifier "{notifier}" is already running on pod "{pod}" '
                        f'({self.resource.qualified} "{name}"); wait for it to finish',
                        resource=self.resource, name=name)
            excess = len(records) + 1 - max_per_pod
            if excess <= 0:
                return []
            oldest_finished = [record for record in records if is_finished(record)][:excess]
            if len(oldest_finished) < excess:
                raise TooManyRequests(
                    f'pod "{pod}" has {max_per_pod} or more unfinished notifier records, '
                    "the most it may keep; retry when one of them finishes",
                    resource=self.resource, retry_after_seconds=retry_after_seconds)
            return oldest_finished

        return await self._backend.create(obj, cohort=Cohort(f"spec.podName={pod}", decide))

    async def delete_expired(self, now: datetime, default_ttl_seconds: int) -> list[Object]:
        """Delete finished records whose completionTime plus TTL is not after ``now``.

        The TTL is ``spec.ttlSecondsAfterFinished``, else ``default_ttl_seconds``. Records
        without a completionTime never expire. A record changed since it was read is kept.
        """
        deadline = now.timestamp()

        def expired(record: Object) -> bool:
            moment = expires_at(record, default_ttl_seconds)
            return moment is not None and moment <= deadline

        deleted = []
        candidates = await self._all(_NEITHER_PENDING_NOR_RUNNING)
        for record in filter(expired, candidates):
            meta = metadata(record)
            try:
                deleted.append(await self._backend.delete(
                    meta["namespace"], meta["name"], resource_version=meta["resourceVersion"],
                    uid=meta["uid"]))
            except (NotFound, Conflict):
                continue
        return deleted

    async def unfinished(self) -> list[Object]:
        """Every record not Succeeded or Failed, in all namespaces (for restart recovery)."""
        return await self._all(_UNFINISHED)

    async def _all(self, field_selector: str) -> list[Object]:
        """Every record in all namespaces that matches, read page by page from one snapshot."""
        records: list[Object] = []
        token = ""
        while True:
            page = await self._backend.list(None, field_selector=field_selector, limit=_PAGE,
                                            continue_token=token)
            records += page.items
            token = page.continue_token
            if not token:
                return records

    # Generic operations, passed through

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        return await self._backend.create(obj, cohort=cohort)

    async def get(self, namespace: str, name: str) -> Object:
        return await self._backend.get(namespace, name)

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        return await self._backend.guaranteed_update(namespace, name, mutate)

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
        self._backend.close()
