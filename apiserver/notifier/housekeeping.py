"""Keeping the records bounded and truthful: restart recovery, the takeover of the runs of
replicas that stopped, and garbage collection."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from apiserver.notifier import records
from apiserver.notifier.exec_protocol import Stop
from apiserver.notifier.pods import PodDirectory
from apiserver.notifier.runner import CommandStopper
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)

COLLECT_INTERVAL_SECONDS = 10.0
TAKEOVER_INTERVAL_SECONDS = 5.0
"""How often every replica looks for runs of replicas that stopped."""
DEFAULT_LEASE_DURATION_SECONDS = 15.0
"""How long a replica's Lease lasts unless renewed (client-go's default lease duration)."""


class Liveness(Protocol):
    def is_alive(self, replica: str) -> bool:
        """False once the replica's Lease has expired (renewTime + duration in the past)
        or it has none."""


async def _stop_held(store: PodNotifierStore, stopper: CommandStopper | None, namespace: str,
                     name: str) -> str:
    """Stop the commands a held notifier's record left running (the PIDs its containers
    hold), as the server's identity; what happened, to append to the record's message ("" if
    there was nothing to stop)."""
    try:
        record = await store.get(namespace, name)
    except NotFound:
        return ""
    pids = records.held_pids(record)
    if not pids or records.is_finished(record):
        return ""
    if stopper is None:
        return "; its held command was not stopped (this server cannot): it may still run"
    pod = str(record["spec"].get("podName", ""))
    outcomes = []
    for container, pid in pids.items():
        stopped = await stopper.stop(namespace, pod, container, pid)
        verdict = ("stopping it failed" if stopped.stop is Stop.NOT_STOPPED else "stopped")
        outcomes.append(f"{container}: {verdict} ({stopped.how})")
        log.info("stopped a held command", extra={
            "namespace": namespace, "record": name, "container": container, "pid": pid,
            "stopped": str(stopped.stop)})
    return "; the held command was stopped by PID: " + "; ".join(outcomes)


async def _interrupt(store: PodNotifierStore, namespace: str, name: str, message: str) -> bool:
    """End the record Failed/Interrupted with ``message`` unless it is finished or gone (then
    nothing is written: two replicas ending it at once end it once); whether this ended it."""
    ended = False

    def end(record: dict[str, Any]) -> dict[str, Any]:
        nonlocal ended
        ended = not records.is_finished(record)
        if not ended:
            return record
        return records.finish(record, records.now(), records.INTERRUPTED, message)

    try:
        await store.guaranteed_update(namespace, name, end)
    except NotFound:
        return False
    return ended


async def recover_interrupted(store: PodNotifierStore, *, clock: Callable[[], float] = time.time,
                              stopper: CommandStopper | None = None) -> int:
    """At start, end as Interrupted every run this replica (``store.replica``, an earlier
    process of it) left on a ledger, and every unfinished record no ledger lists (written by a
    server before ledgers) once older than the ledgers' grace; take them off the ledgers. The
    held commands of this replica's runs are stopped first, by the PIDs the records hold
    (through ``stopper``).

    Runs before the server serves, so no run of this process can be mistaken for one."""
    ledgers = await store.ledgers.all()
    listed = {(ledger.namespace, run.record) for ledger in ledgers for run in ledger.runs}
    count = 0
    for ledger in ledgers:
        for run in ledger.runs:
            if run.replica == store.replica:
                stopped = await _stop_held(store, stopper, ledger.namespace, run.record)
                count += await _interrupt(store, ledger.namespace, run.record,
                                          records.INTERRUPTED_MESSAGE + stopped)
                await store.release(ledger.namespace, ledger.pod, run.record)
    now = clock()
    for record in await store.unfinished():
        meta = record["metadata"]
        created = parse_timestamp(meta.get("creationTimestamp"))
        if (meta["namespace"], meta["name"]) in listed or (
                created is not None and now - created <= store.grace_seconds):
            continue
        count += await _interrupt(store, meta["namespace"], meta["name"],
                                  records.INTERRUPTED_MESSAGE)
    if count:
        log.info("ended interrupted records", extra={"count": count})
    return count


class Takeover:
    """Ends the runs of replicas that stopped, on every replica.

    Every ``interval`` seconds: a ledger's run older than ``lease_duration_seconds`` whose
    replica is not alive (``liveness``) has its record ended ``Failed``/``Interrupted`` and is
    taken off the ledger. A replica that stops has its runs ended within lease duration +
    interval (plus a cache's lag) after its last Lease renewal.

    A held notifier's commands keep running when their replica dies (closing a stream stops no
    process): the takeover stops them first through ``stopper``, by the PIDs the record holds,
    and the record's message says whether that worked.
    """

    def __init__(self, store: PodNotifierStore, liveness: Liveness, *,
                 lease_duration_seconds: float = DEFAULT_LEASE_DURATION_SECONDS,
                 interval: float = TAKEOVER_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.time,
                 stopper: CommandStopper | None = None) -> None:
        self._store = store
        self._stopper = stopper
        self._liveness = liveness
        self._lease_duration = lease_duration_seconds
        self._interval = interval
        self._clock = clock

    async def once(self) -> int:
        """One look at every ledger; how many records it ended."""
        now = self._clock()
        checked = records.rfc3339(datetime.fromtimestamp(now, UTC))
        count = 0
        for ledger in await self._store.ledgers.all():
            for run in ledger.runs:
                if (run.replica == self._store.replica or run.age(now) <= self._lease_duration
                        or self._liveness.is_alive(run.replica)):
                    continue
                message = (f'the server replica "{run.replica}" that ran this notifier stopped: '
                           f'its Lease had expired when replica "{self._store.replica}" checked '
                           f"at {checked}; the notifier may or may not have completed in the "
                           "container")
                message += await _stop_held(self._store, self._stopper, ledger.namespace,
                                            run.record)
                ended = await _interrupt(self._store, ledger.namespace, run.record, message)
                await self._store.release(ledger.namespace, ledger.pod, run.record)
                count += ended
                log.info("took over a stopped replica's run", extra={
                    "namespace": ledger.namespace, "record": run.record,
                    "stopped_replica": run.replica, "ended": ended})
        return count

    async def run(self) -> None:
        while True:
            try:
                await self.once()
            except Exception:
                log.exception("taking over stopped replicas' runs failed; retrying")
            await asyncio.sleep(self._interval)


class Collected(NamedTuple):
    expired: int
    """Finished records past their TTL."""
    orphaned: int
    """Finished records of pods that no longer exist."""
    trimmed: int
    """Finished records beyond K of their pod."""
    ledgers: int
    """Empty ledgers of pods that no longer exist."""
    waiting: int = 0
    """Ledgers of pods that no longer exist still listing runs (of records not yet finished):
    the next collection scans again for them, though no pod was deleted since."""

    @property
    def deleted(self) -> bool:
        return any((self.expired, self.orphaned, self.trimmed, self.ledgers))


async def collect_once(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                       max_records_per_pod: int, scan_orphans: bool = True) -> Collected:
    """Delete expired finished records, the oldest finished records of every pod with more than
    ``max_records_per_pod``, and (if `scan_orphans`) finished records and ledgers (once no run
    on them is current) of pods that no longer exist."""
    expired = await store.delete_expired(datetime.now(UTC), default_ttl_seconds)
    trimmed = await store.trim_all(max_records_per_pod)
    orphaned = ledgers = waiting = 0
    if scan_orphans and pods.synced.is_set():
        for ledger in await store.ledgers.all():
            if not pods.gone(ledger.namespace, ledger.pod, ledger.pod_uid):
                continue
            current = await store.prune_gone(ledger) if ledger.runs else ledger
            if current is not None and not current.runs:
                ledgers += await store.ledgers.delete_empty(current)
            elif current is not None:
                waiting += 1
        token = ""
        while True:
            page = await store.list(None, field_selector="status.phase!=Pending,"
                                    "status.phase!=Running,status.phase!=Held", limit=500,
                                    continue_token=token)
            for record in page.items:
                spec, meta = record["spec"], record["metadata"]
                if pods.gone(meta["namespace"], spec["podName"], spec.get("podUID", "")):
                    try:
                        await store.delete(meta["namespace"], meta["name"])
                        orphaned += 1
                    except NotFound:
                        continue
            token = page.continue_token
            if not token:
                break
    return Collected(len(expired), orphaned, trimmed, ledgers, waiting)


async def collect_forever(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                          max_records_per_pod: int, interval: float = COLLECT_INTERVAL_SECONDS
                          ) -> None:
    """Collect every `interval` seconds; scan for orphans only after the pod index has seen a
    deletion since the last scan (and once at start), or while the last scan left ledgers of
    gone pods waiting for their runs to finish, not through every record each time."""
    scanned_at: int | None = None
    waiting = False
    while True:
        try:
            deletions = pods.deletions
            scan = pods.synced.is_set() and (deletions != scanned_at or waiting)
            collected = await collect_once(store, pods, default_ttl_seconds,
                                           max_records_per_pod, scan)
            if scan:
                scanned_at, waiting = deletions, bool(collected.waiting)
            if collected.deleted:
                log.info("collected records", extra=collected._asdict())
        except Exception:
            log.exception("garbage collection failed; retrying")
        await asyncio.sleep(interval)
