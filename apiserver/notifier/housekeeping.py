"""Keeping the records bounded and truthful: restart recovery and garbage collection."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from apiserver.notifier import records
from apiserver.notifier.pods import PodDirectory
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore

log = logging.getLogger(__name__)

COLLECT_INTERVAL_SECONDS = 10.0


async def recover_interrupted(store: PodNotifierStore) -> int:
    """End every record left Pending or Running by a previous server process as Interrupted.

    Runs before the server serves, so no run of this process can be mistaken for one."""
    count = 0
    for record in await store.unfinished():
        meta = record["metadata"]
        try:
            await store.guaranteed_update(meta["namespace"], meta["name"], lambda r: records.finish(
                r, records.now(), records.INTERRUPTED, records.INTERRUPTED_MESSAGE))
        except NotFound:
            continue
        count += 1
    if count:
        log.info("ended interrupted records", extra={"count": count})
    return count


async def collect_once(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                       scan_orphans: bool = True) -> tuple[int, int]:
    """Delete expired finished records, and (if `scan_orphans`) finished records of pods that
    no longer exist.

    Returns (expired, orphaned) counts."""
    expired = await store.delete_expired(datetime.now(UTC), default_ttl_seconds)
    orphaned = 0
    if scan_orphans and pods.synced.is_set():
        token = ""
        while True:
            page = await store.list(None, field_selector="status.phase!=Pending,"
                                    "status.phase!=Running", limit=500, continue_token=token)
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
    return len(expired), orphaned


async def collect_forever(store: PodNotifierStore, pods: PodDirectory, default_ttl_seconds: int,
                          interval: float = COLLECT_INTERVAL_SECONDS) -> None:
    """Collect every `interval` seconds; scan for orphans only after the pod index has seen a
    deletion since the last scan (and once at start), not through every record each time."""
    scanned_at: int | None = None
    while True:
        try:
            deletions = pods.deletions
            scan = pods.synced.is_set() and deletions != scanned_at
            expired, orphaned = await collect_once(store, pods, default_ttl_seconds, scan)
            if scan:
                scanned_at = deletions
            if expired or orphaned:
                log.info("collected records", extra={"expired": expired, "orphaned": orphaned})
        except Exception:
            log.exception("garbage collection failed; retrying")
        await asyncio.sleep(interval)
