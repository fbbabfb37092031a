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
from apiserver.registry.paging import all_objects
from apiserver.registry.podnotifiers import PodNotifierStore, runner
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
                              stopper: CommandStopper | None = None,
                              grace_seconds: float = DEFAULT_LEASE_DURATION_SECONDS) -> int:
    """At start, end as Interrupted every unfinished record this replica (``store.replica``, an
    earlier process of it) runs, and every unfinished record that names no replica (written by
    an earlier version) once older than ``grace_seconds``. The held commands of this replica's
    runs are stopped first, by the PIDs the records hold (through ``stopper``).

    Runs before the server serves, so no run of this process can be mistaken for one."""
    now = clock()
    count = 0
    for record in await store.unfinished():
        meta = record["metadata"]
        replica = runner(record)
        if replica == store.replica:
            stopped = await _stop_held(store, stopper, meta["namespace"], meta["name"])
        elif not replica and _age(record, now) > grace_seconds:
            stopped = ""
        else:
            continue
        count += await _interrupt(store, meta["namespace"], meta["name"],
                                  records.INTERRUPTED_MESSAGE + stopped)
    if count:
        log.info("ended interrupted records", extra={"count": count})
    return count


def _age(record: dict[str, Any], now: float) -> float:
    """Seconds since the record was created (infinite if unreadable)."""
    created = parse_timestamp(record["metadata"].get("creationTimestamp"))
    return float("inf") if created is None else now - created


class Takeover:
    """Ends the runs nobody runs any more, on every replica.

    Every ``interval`` seconds, of the unfinished records older than ``lease_duration_seconds``
    it ends ``Failed``/``Interrupted``: those whose replica (``status.replica``) is not alive
    (``liveness``): a replica that stops has its runs ended within lease duration + interval
    (plus a cache's lag) after its last Lease renewal; those of this replica that this process
    does not run (``running``: a refused create whose deletion failed, a run that ended without
    writing its result); and those that name no replica (an earlier version wrote them, which
    named the replica in its ledgers): as a stopped replica's, since a held command left behind
    by a replica an upgrade replaced must not stay held (during the upgrade this may end a run a
    replica of the earlier version still holds: its holder sees it end Interrupted).

    A held notifier's commands keep running when their replica dies (closing a stream stops no
    process): the takeover stops them first through ``stopper``, by the PIDs the record holds,
    and the record's message says whether that worked.
    """

    def __init__(self, store: PodNotifierStore, liveness: Liveness, *,
                 running: Callable[[str, str], bool],
                 lease_duration_seconds: float = DEFAULT_LEASE_DURATION_SECONDS,
                 interval: float = TAKEOVER_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.time,
                 stopper: CommandStopper | None = None) -> None:
        self._store = store
        self._stopper = stopper
        self._liveness = liveness
        self._running = running
        self._lease_duration = lease_duration_seconds
        self._interval = interval
        self._clock = clock

    def _why_over(self, record: dict[str, Any], now: float, checked: str) -> str:
        """Why nobody runs the record any more, or "" if it may still run."""
        replica, age = runner(record), _age(record, now)
        me = self._store.replica
        meta = record["metadata"]
        if age <= self._lease_duration:
            return ""
        if replica == me:
            if self._running(meta["namespace"], meta["name"]):
                return ""
            return (f'the server replica "{me}" that runs this notifier does not run it any more '
                    f"(checked at {checked}): its create was refused and could not be deleted, "
                    "or its run ended without writing its result")
        if replica:
            if self._liveness.is_alive(replica):
                return ""
            return (f'the server replica "{replica}" that ran this notifier stopped: its Lease '
                    f'had expired when replica "{me}" checked at {checked}')
        return ("the record names no server replica that runs it (an earlier version wrote it) "
                f'and was older than the lease duration when replica "{me}" checked at {checked}')

    async def once(self) -> int:
        """One look at every unfinished record; how many it ended."""
        now = self._clock()
        checked = records.rfc3339(datetime.fromtimestamp(now, UTC))
        count = 0
        for record in await self._store.unfinished():
            message = self._why_over(record, now, checked)
            if not message:
                continue
            meta = record["metadata"]
            message += "; the notifier may or may not have completed in the container"
            message += await _stop_held(self._store, self._stopper, meta["namespace"],
                                        meta["name"])
            ended = await _interrupt(self._store, meta["namespace"], meta["name"], message)
            count += ended
            log.info("took over a run nobody runs", extra={
                "namespace": meta["namespace"], "record": meta["name"],
                "replica": runner(record), "ended": ended})
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
    waiting: int = 0
    """Unfinished records of pods that no longer exist (their runs end, seeing the pod gone,
    or are taken over): the next collection scans again for them, though no pod was deleted
    since."""

    @property
    def deleted(self) -> bool:
        return any((self.expired, self.orphaned, self.trimmed))


async def collect_once(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                       max_records_per_pod: int, scan_orphans: bool = True) -> Collected:
    """Delete expired finished records, the oldest finished records of every pod with more than
    ``max_records_per_pod``, and (if `scan_orphans`) the finished records of pods that no longer
    exist, counting their unfinished ones."""
    expired, trimmed = await store.collect(datetime.now(UTC), default_ttl_seconds,
                                           max_records_per_pod)
    orphaned = waiting = 0
    if scan_orphans and pods.synced.is_set():
        async for record in all_objects(store):
            spec, meta = record["spec"], record["metadata"]
            if not pods.gone(meta["namespace"], spec["podName"], spec.get("podUID", "")):
                continue
            if not records.is_finished(record):
                waiting += 1
                continue
            try:
                await store.delete(meta["namespace"], meta["name"])
                orphaned += 1
            except NotFound:
                continue
    return Collected(len(expired), orphaned, trimmed, waiting)


async def collect_forever(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                          max_records_per_pod: int, interval: float = COLLECT_INTERVAL_SECONDS
                          ) -> None:
    """Collect every `interval` seconds; scan for orphans only after the pod index has seen a
    deletion since the last scan (and once at start), or while the last scan left unfinished
    records of gone pods, not through every record each time."""
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
