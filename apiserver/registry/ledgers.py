"""Pod ledgers: per pod, the runs that may not have finished, kept where every replica decides.

One private object per pod (``PODLEDGERS``, named after the pod) lists the pod's runs: the
record's name, the notifier, the replica that runs it, since when and the pod's UID. Every
change is a ``guaranteed_update`` (a read-modify-write with the read resourceVersion as
precondition), so two replicas that decide at once on the same pod are serialized by the store:
kube-apiserver on the Kubernetes backend, the transaction on SQLite. The decisions themselves
(what refuses a new run) are the caller's (``podnotifiers``).

A run is added before its record is created, in the same write that drops the runs known to be
over: a run ending costs its ledger no write. A run is **over** when its record is known
finished (``Known``: False), and **stale** when its record is not known at all and it was added
longer ago than the grace (``grace_seconds``; before, the record may be being created, or not
yet in this replica's cache): a replica stopped between the two writes, a create failed, the
record was deleted. Both are dropped by the next change of the ledger (``add``), and by the
collector for the ledgers of pods that are gone (``prune``). A run whose record is known
unfinished is kept, however old.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from apiserver.api.resources import GROUP_VERSION
from apiserver.registry.decoding import (
    decoded,
    mapping,
    optional_listing,
    optional_text,
    text,
)
from apiserver.registry.errors import AlreadyExists, Conflict, MalformedObject, NotFound
from apiserver.registry.objects import metadata
from apiserver.registry.resources import PODLEDGERS
from apiserver.registry.store import Object, ObjectStore
from apiserver.timestamps import parse_timestamp, timestamp

GRACE_SECONDS = 15.0
"""How long a run may be listed without its record being seen unfinished before the next change
drops it: longer than a create takes to reach every replica's cache."""
_PAGE = 500


@dataclass(frozen=True)
class Run:
    """One unfinished run on a pod, as its ledger lists it."""

    record: str
    """The PodNotifier record's name (in the ledger's namespace)."""
    notifier: str
    replica: str
    """The server replica that runs it (``server.replica_name``)."""
    since: str
    """When it was added (RFC 3339, the adding replica's clock)."""

    def age(self, now: float) -> float:
        """Seconds since it was added (infinite if ``since`` is unreadable)."""
        added = parse_timestamp(self.since)
        return float("inf") if added is None else now - added

    def encoded(self) -> dict[str, str]:
        return {"record": self.record, "notifier": self.notifier, "replica": self.replica,
                "since": self.since}


@dataclass(frozen=True)
class Ledger:
    """A pod's ledger as stored."""

    namespace: str
    pod: str
    pod_uid: str
    """The UID of the pod whose run was added last."""
    runs: tuple[Run, ...]
    resource_version: str

    @classmethod
    def of(cls, obj: Object) -> Ledger:
        """The kind's decoder: ``MalformedObject`` unless ``spec`` is an object whose
        ``podUID`` (optional) is a string and whose ``runs`` (optional) is a list of objects
        of strings ``record``, ``notifier``, ``replica`` and ``since``."""
        return decoded(PODLEDGERS, obj, _ledger)


def _ledger(obj: Object) -> Ledger:
    meta = metadata(obj)
    spec = mapping(obj.get("spec"), "spec")
    runs = optional_listing(spec.get("runs"), "spec.runs")
    return Ledger(str(meta.get("namespace", "")), str(meta.get("name", "")),
                  optional_text(spec.get("podUID"), "spec.podUID"),
                  tuple(_run(run, f"spec.runs[{i}]") for i, run in enumerate(runs)),
                  str(meta.get("resourceVersion", "")))


def _run(value: object, path: str) -> Run:
    run = mapping(value, path)
    return Run(*(text(run.get(key), f"{path}.{key}")
                 for key in ("record", "notifier", "replica", "since")))


def _runs(obj: Object) -> list[Run]:
    return list(Ledger.of(obj).runs)


def _with(obj: Object, runs: Iterable[Run], pod_uid: str | None = None) -> Object:
    spec = dict(obj.get("spec") or {})
    spec["runs"] = [run.encoded() for run in runs]
    if pod_uid is not None:
        spec["podUID"] = pod_uid
    return {**obj, "spec": spec}


Known = Callable[[str], bool | None]
"""What a replica knows of a record (by name): True if it is unfinished, False if it is finished,
None if it knows no such record."""

Admit = Callable[[list[Run]], None]
"""Gets the pod's current runs (stale ones dropped); raises a ``StoreError`` to refuse a new
one. Quick, no I/O: it may run inside the storage transaction."""


class PodLedgers:
    """The ledgers of one installation, on any backend's ``ObjectStore`` of ``PODLEDGERS``."""

    def __init__(self, store: ObjectStore, *, grace_seconds: float = GRACE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        if store.resource != PODLEDGERS:
            raise ValueError(f"PodLedgers needs a {PODLEDGERS.plural} store, not "
                             f"{store.resource.plural}")
        self._store = store
        self._grace = grace_seconds
        self._clock = clock

    async def add(self, namespace: str, pod: str, pod_uid: str, run: Run, *, admit: Admit,
                  known: Known) -> None:
        """Add ``run`` to the pod's ledger (created if absent) unless ``admit`` refuses, dropping
        the runs that are over or stale by ``known`` in the same write."""
        now = self._clock()

        def added(obj: Object) -> Object:
            runs = self._current(_runs(obj), now, known)
            admit(runs)
            return _with(obj, [*runs, run], pod_uid)

        while True:
            try:
                await self._store.guaranteed_update(namespace, pod, added)
                return
            except NotFound:
                pass
            try:
                await self._store.create(added({
                    "apiVersion": GROUP_VERSION, "kind": PODLEDGERS.kind,
                    "metadata": {"namespace": namespace, "name": pod}, "spec": {}}))
                return
            except AlreadyExists:
                continue  # created meanwhile by another replica: update that one

    async def check(self, namespace: str, pod: str, *, admit: Admit, known: Known) -> None:
        """What ``add`` decides, changing nothing (a dry run): ``admit`` gets the pod's current
        runs (none without a ledger), the stale ones left out as ``add`` drops them."""
        try:
            runs = _runs(await self._store.get(namespace, pod))
        except NotFound:
            runs = []
        admit(self._current(runs, self._clock(), known))

    async def runs(self, namespace: str, pod: str) -> list[Run]:
        """The runs the pod's ledger lists (none without a ledger, or with a malformed one)."""
        try:
            return _runs(await self._store.get(namespace, pod))
        except (NotFound, MalformedObject):
            return []

    async def remove(self, namespace: str, pod: str, record: str) -> None:
        """Remove the run of ``record`` from the pod's ledger (nothing if it is not listed)."""

        def removed(obj: Object) -> Object:
            runs = _runs(obj)
            left = [run for run in runs if run.record != record]
            return obj if len(left) == len(runs) else _with(obj, left)

        try:
            await self._store.guaranteed_update(namespace, pod, removed)
        except (NotFound, MalformedObject):  # a malformed ledger lists no run of ours
            return

    async def prune(self, ledger: Ledger, known: Known) -> Ledger | None:
        """Drop the ledger's runs that are over or stale (``known`` as for ``add``); the ledger
        after, None if it is gone."""
        now = self._clock()

        def pruned(obj: Object) -> Object:
            runs = _runs(obj)
            current = self._current(runs, now, known)
            return obj if len(current) == len(runs) else _with(obj, current)

        try:
            return Ledger.of(await self._store.guaranteed_update(ledger.namespace, ledger.pod,
                                                                 pruned))
        except (NotFound, MalformedObject):  # gone, or turned malformed: the cache skips it
            return None

    def _current(self, runs: list[Run], now: float, known: Known) -> list[Run]:
        """The runs neither over nor stale: of a record known unfinished, or of a record not
        known and added within the grace."""
        kept = []
        for run in runs:
            state = known(run.record)
            if state or (state is None and run.age(now) <= self._grace):
                kept.append(run)
        return kept

    async def all(self) -> list[Ledger]:
        """Every ledger of every namespace."""
        ledgers: list[Ledger] = []
        token = ""
        while True:
            page = await self._store.list(None, limit=_PAGE, continue_token=token)
            ledgers += [Ledger.of(obj) for obj in page.items]
            token = page.continue_token
            if not token:
                return ledgers

    async def delete_empty(self, ledger: Ledger) -> bool:
        """Delete an empty ledger unless it changed since it was read; whether it was."""
        if ledger.runs:
            return False
        try:
            await self._store.delete(ledger.namespace, ledger.pod,
                                     resource_version=ledger.resource_version)
        except (NotFound, Conflict):
            return False
        return True

    def new_run(self, record: str, notifier: str, replica: str) -> Run:
        """A run added now, by this clock."""
        return Run(record, notifier, replica, timestamp(datetime.fromtimestamp(self._clock(),
                                                                                UTC)))

    def close(self) -> None:
        self._store.close()

