"""A Notification's fan-out state in the server's database: its pod set and the decisions taken.

Kept out of the Notification object so its size does not grow with the pod count, and written
so that a crash at any point leaves a state the next server process can continue from:

- ``notification_runs``: one row per Notification (its *run*), written in the same transaction
  as its initial pod set, so a Notification without one never had its scope recorded. It holds
  the spec (a rollback after the object was deleted still knows what to run, for whom), why no
  pod may start any more (``stopped``: FailFast, DeadlineExceeded, Deleted), the outcome once
  decided (Succeeded, or Failed: rollback is due), and whether the final status was stored.
- ``notification_pods``: one row per pod (keyed by the Notification's UID and the pod's UID), in
  the order pods joined. The pod's fan-out ``state`` only moves forward, pending -> started ->
  succeeded | failed | skipped, and a pod is started only while the run is not stopped, checked
  in the same transaction. Rollback has its own state (pending -> started -> done | failed)
  and record, never touching the pod's.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

from apiserver.registry.sqlite_database import SqliteDatabase

PENDING, STARTED = "pending", "started"
SUCCEEDED, FAILED, SKIPPED = "succeeded", "failed", "skipped"
FINAL_STATES = (SUCCEEDED, FAILED, SKIPPED)

ROLLBACK_PENDING, ROLLBACK_STARTED = "pending", "started"
ROLLBACK_DONE, ROLLBACK_FAILED = "done", "failed"

OUTCOME_SUCCEEDED, OUTCOME_FAILED = "Succeeded", "Failed"

_POD_COLUMNS = ("pod, pod_uid, state, record, reason, rollback, rollback_record, "
                "rollback_attempts")
_RUN_COLUMNS = "notification_uid, namespace, name, spec, stopped, outcome, outcome_reason, finished"


@dataclass(frozen=True)
class ScopedPod:
    pod: str
    pod_uid: str
    state: str
    record: str = ""
    """The PodNotifier of the pod's run (named before it is created)."""
    reason: str = ""
    rollback: str = ""
    rollback_record: str = ""
    rollback_attempts: int = 0


@dataclass(frozen=True)
class ScopeRun:
    """The run-level row of one Notification."""

    notification_uid: str
    namespace: str
    name: str
    spec: dict[str, Any]
    stopped: str = ""
    """Why no pod may start any more, or empty."""
    outcome: str = ""
    """OUTCOME_SUCCEEDED or OUTCOME_FAILED once decided (Failed: rollback is due)."""
    outcome_reason: str = ""
    finished: bool = False
    """The final status was stored."""

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> ScopeRun:
        uid, namespace, name, spec, stopped, outcome, reason, finished = row
        return cls(uid, namespace, name, json.loads(spec), stopped, outcome, reason,
                   bool(finished))


class ScopeStore:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def create(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        """Record a new Notification's run and initial pod set, in one transaction."""
        meta = notification["metadata"]

        def insert(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO notification_runs (notification_uid, namespace, name, spec) "
                "VALUES (?, ?, ?, ?)", (meta["uid"], meta["namespace"], meta["name"],
                                        json.dumps(notification["spec"])))
            _insert_pods(connection, meta["uid"], pods)

        await self._db.transaction(insert)

    async def adopt(self, notification: dict[str, Any]) -> None:
        """Give pods recorded by an older server (no run row) their run row."""
        meta = notification["metadata"]
        await self._db.transaction(lambda connection: connection.execute(
            "INSERT OR IGNORE INTO notification_runs (notification_uid, namespace, name, spec) "
            "VALUES (?, ?, ?, ?)", (meta["uid"], meta["namespace"], meta["name"],
                                    json.dumps(notification["spec"]))))

    async def run(self, notification_uid: str) -> ScopeRun | None:
        def select(connection: sqlite3.Connection) -> ScopeRun | None:
            row = connection.execute(f"SELECT {_RUN_COLUMNS} FROM notification_runs "
                                     "WHERE notification_uid = ?", (notification_uid,)).fetchone()
            return None if row is None else ScopeRun.of(row)

        return await self._db.run(select)

    async def runs(self) -> list[ScopeRun]:
        def select(connection: sqlite3.Connection) -> list[ScopeRun]:
            return [ScopeRun.of(row) for row in connection.execute(
                f"SELECT {_RUN_COLUMNS} FROM notification_runs ORDER BY rowid")]

        return await self._db.run(select)

    async def orphan_uids(self) -> list[str]:
        """Notification UIDs with pod rows but no run row (an older server's, or leftovers)."""
        return await self._db.run(lambda connection: [row[0] for row in connection.execute(
            "SELECT DISTINCT notification_uid FROM notification_pods WHERE notification_uid "
            "NOT IN (SELECT notification_uid FROM notification_runs)")])

    async def add(self, notification_uid: str, pods: list[tuple[str, str]]) -> list[ScopedPod]:
        """Add (pod, uid) pairs not yet in the scope, as pending; returns the new ones."""
        return await self._db.transaction(
            lambda connection: _insert_pods(connection, notification_uid, pods))

    async def pods(self, notification_uid: str) -> list[ScopedPod]:
        def select(connection: sqlite3.Connection) -> list[ScopedPod]:
            rows = connection.execute(
                f"SELECT {_POD_COLUMNS} FROM notification_pods WHERE notification_uid = ? "
                "ORDER BY seq", (notification_uid,)).fetchall()
            return [ScopedPod(*row) for row in rows]

        return await self._db.run(select)

    async def start_pod(self, notification_uid: str, pod_uid: str, record: str) -> bool:
        """pending -> started with the record's name, unless the run is stopped (or the pod is
        no longer pending): True if the pod may run."""

        def start(connection: sqlite3.Connection) -> bool:
            stopped = connection.execute(
                "SELECT stopped FROM notification_runs WHERE notification_uid = ?",
                (notification_uid,)).fetchone()
            if stopped is None or stopped[0]:
                return False
            return connection.execute(
                "UPDATE notification_pods SET state = ?, record = ? WHERE notification_uid = ? "
                "AND pod_uid = ? AND state = ?",
                (STARTED, record, notification_uid, pod_uid, PENDING)).rowcount == 1

        return await self._db.transaction(start)

    async def finish_pod(self, notification_uid: str, pod_uid: str, state: str, reason: str,
                         *, record: str | None = None, stop: str = "") -> bool:
        """pending | started -> a final `state`; with `stop`, also stop the run (if it is not
        already) in the same transaction. False if the pod was already final."""
        if state not in FINAL_STATES:
            raise ValueError(f"{state!r} is not a final pod state")

        def finish(connection: sqlite3.Connection) -> bool:
            changed = connection.execute(
                "UPDATE notification_pods SET state = ?, reason = ?, "
                "record = COALESCE(?, record) WHERE notification_uid = ? AND pod_uid = ? "
                "AND state IN (?, ?)",
                (state, reason, record, notification_uid, pod_uid, PENDING, STARTED)).rowcount
            if stop:
                _stop(connection, notification_uid, stop)
            return changed == 1

        return await self._db.transaction(finish)

    async def stop(self, notification_uid: str, reason: str) -> str:
        """Start no more pods; returns the reason that stands (the first one given)."""

        def stop(connection: sqlite3.Connection) -> str:
            _stop(connection, notification_uid, reason)
            row = connection.execute(
                "SELECT stopped FROM notification_runs WHERE notification_uid = ?",
                (notification_uid,)).fetchone()
            return row[0] if row else reason

        return await self._db.transaction(stop)

    async def decide(self, notification_uid: str, outcome: str, reason: str) -> ScopeRun | None:
        """Record the outcome (the first one decided stands). A Failed outcome makes rollback
        due (if the spec has a rollback notifier): every succeeded pod not yet rolled back
        becomes rollback-pending, in the same transaction. Returns the run as it now stands."""

        def decide(connection: sqlite3.Connection) -> ScopeRun | None:
            connection.execute(
                "UPDATE notification_runs SET outcome = ?, outcome_reason = ?, "
                "stopped = CASE stopped WHEN '' THEN ? ELSE stopped END "
                "WHERE notification_uid = ? AND outcome = ''",
                (outcome, reason, reason, notification_uid))
            row = connection.execute(f"SELECT {_RUN_COLUMNS} FROM notification_runs "
                                     "WHERE notification_uid = ?", (notification_uid,)).fetchone()
            if row is None:
                return None
            run = ScopeRun.of(row)
            if run.outcome == OUTCOME_FAILED and run.spec.get("rollback", {}).get("notifier"):
                connection.execute(
                    "UPDATE notification_pods SET rollback = ? WHERE notification_uid = ? AND "
                    "state = ? AND rollback = ''",
                    (ROLLBACK_PENDING, notification_uid, SUCCEEDED))
            return run

        return await self._db.transaction(decide)

    async def start_rollback(self, notification_uid: str, pod_uid: str, record: str) -> bool:
        """Rollback pending (or started by a run that was interrupted) -> started with a new
        record and attempt; False if the pod's rollback is not due."""
        return await self._db.transaction(lambda connection: connection.execute(
            "UPDATE notification_pods SET rollback = ?, rollback_record = ?, "
            "rollback_attempts = rollback_attempts + 1 WHERE notification_uid = ? AND "
            "pod_uid = ? AND rollback IN (?, ?)",
            (ROLLBACK_STARTED, record, notification_uid, pod_uid, ROLLBACK_PENDING,
             ROLLBACK_STARTED)).rowcount == 1)

    async def finish_rollback(self, notification_uid: str, pod_uid: str, outcome: str) -> None:
        """Rollback started -> done | failed."""
        if outcome not in (ROLLBACK_DONE, ROLLBACK_FAILED):
            raise ValueError(f"{outcome!r} is not a final rollback state")
        await self._db.transaction(lambda connection: connection.execute(
            "UPDATE notification_pods SET rollback = ? WHERE notification_uid = ? AND "
            "pod_uid = ? AND rollback = ?",
            (outcome, notification_uid, pod_uid, ROLLBACK_STARTED)))

    async def mark_finished(self, notification_uid: str) -> None:
        """The final status is stored: nothing of this run remains to do."""
        await self._db.transaction(lambda connection: connection.execute(
            "UPDATE notification_runs SET finished = 1 WHERE notification_uid = ?",
            (notification_uid,)))

    async def forget(self, notification_uid: str) -> None:
        """Delete the run and its pod set."""

        def delete(connection: sqlite3.Connection) -> None:
            connection.execute("DELETE FROM notification_pods WHERE notification_uid = ?",
                               (notification_uid,))
            connection.execute("DELETE FROM notification_runs WHERE notification_uid = ?",
                               (notification_uid,))

        await self._db.transaction(delete)


def _insert_pods(connection: sqlite3.Connection, notification_uid: str,
                 pods: list[tuple[str, str]]) -> list[ScopedPod]:
    row = connection.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM notification_pods WHERE notification_uid = ?",
        (notification_uid,)).fetchone()
    seq, added = row[0], []
    for pod, uid in pods:
        seq += 1
        cursor = connection.execute(
            "INSERT OR IGNORE INTO notification_pods "
            "(notification_uid, seq, pod, pod_uid, state) VALUES (?, ?, ?, ?, ?)",
            (notification_uid, seq, pod, uid, PENDING))
        if cursor.rowcount:
            added.append(ScopedPod(pod, uid, PENDING))
    return added


def _stop(connection: sqlite3.Connection, notification_uid: str, reason: str) -> None:
    connection.execute("UPDATE notification_runs SET stopped = ? WHERE notification_uid = ? "
                       "AND stopped = ''", (reason, notification_uid))


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
        "rolledBack": sum(p.rollback == ROLLBACK_DONE for p in pods),
    }
