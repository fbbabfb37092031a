"""The pod set of a Notification, and how far each pod's run got, in the server's database.

Kept out of the Notification object so its size does not grow with the pod count. A pod enters
the scope once (keyed by the Notification's UID and the pod's UID) and its state only moves
forward, pending -> started -> succeeded | failed | skipped, so that after a restart no pod is
notified twice for the same Notification.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass

from apiserver.registry.sqlite_database import SqliteDatabase

PENDING, STARTED = "pending", "started"
SUCCEEDED, FAILED, SKIPPED = "succeeded", "failed", "skipped"
ROLLED_BACK, ROLLBACK_FAILED = "rolledBack", "rollbackFailed"


@dataclass(frozen=True)
class ScopedPod:
    pod: str
    pod_uid: str
    state: str
    record: str = ""
    reason: str = ""
    rollback: str = ""


class ScopeStore:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def add(self, notification_uid: str, pods: list[tuple[str, str]]) -> int:
        """Add (pod, uid) pairs not yet in the scope, as pending; returns how many were new."""

        def insert(connection: sqlite3.Connection) -> int:
            row = connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM notification_pods WHERE notification_uid = ?",
                (notification_uid,)).fetchone()
            seq, added = row[0], 0
            for pod, uid in pods:
                seq += 1
                cursor = connection.execute(
                    "INSERT OR IGNORE INTO notification_pods "
                    "(notification_uid, seq, pod, pod_uid, state) VALUES (?, ?, ?, ?, ?)",
                    (notification_uid, seq, pod, uid, PENDING))
                added += cursor.rowcount
            return added

        return await self._db.transaction(insert)

    async def pods(self, notification_uid: str) -> list[ScopedPod]:
        def select(connection: sqlite3.Connection) -> list[ScopedPod]:
            rows = connection.execute(
                "SELECT pod, pod_uid, state, record, reason, rollback FROM notification_pods "
                "WHERE notification_uid = ? ORDER BY seq", (notification_uid,)).fetchall()
            return [ScopedPod(*row) for row in rows]

        return await self._db.run(select)

    async def set_state(self, notification_uid: str, pod_uid: str, state: str,
                        record: str = "", reason: str = "") -> None:
        await self._db.transaction(lambda connection: connection.execute(
            "UPDATE notification_pods SET state = ?, record = COALESCE(NULLIF(?, ''), record), "
            "reason = ? WHERE notification_uid = ? AND pod_uid = ?",
            (state, record, reason, notification_uid, pod_uid)))

    async def set_rollback(self, notification_uid: str, pod_uid: str, rollback: str) -> None:
        await self._db.transaction(lambda connection: connection.execute(
            "UPDATE notification_pods SET rollback = ? WHERE notification_uid = ? AND "
            "pod_uid = ?", (rollback, notification_uid, pod_uid)))

    async def forget(self, notification_uid: str) -> None:
        await self._db.transaction(lambda connection: connection.execute(
            "DELETE FROM notification_pods WHERE notification_uid = ?", (notification_uid,)))


def counts(pods: list[ScopedPod]) -> dict[str, int]:
    """The Notification's status.counts from its scope."""
    states = Counter(p.state for p in pods)
    return {
        "total": len(pods),
        "pending": states[PENDING],
        "running": states[STARTED],
        "succeeded": states[SUCCEEDED],
        "failed": states[FAILED],
        "skipped": states[SKIPPED],
        "rolledBack": sum(p.rollback == ROLLED_BACK for p in pods),
    }
