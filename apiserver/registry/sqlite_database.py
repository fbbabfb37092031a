"""The embedded SQLite database behind the registry: one file, one connection, one thread.

Why a single worker thread: every statement here is small (single-row writes, indexed reads,
pages of a list), but a commit waits for an fsync and a WAL checkpoint may take longer, which
must not stall the event loop. One dedicated thread owns the connection, so SQLite needs no
locking of its own and writes are naturally serialised; coroutines await its results.

Durability: WAL with ``synchronous=FULL``, so a committed resourceVersion survives a power
loss and is never handed out twice. ``locking_mode=EXCLUSIVE`` holds the file for the life of
the process: a second server on the same data directory fails at start instead of corrupting
the watch stream, which lives in this process's memory.

History: every object revision is kept with the range of resourceVersions in which it was
current, and every write is logged as an event. Both are compacted to the last
``event_retention`` resourceVersions; a snapshot or watch from before that is ``Expired``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from apiserver.registry.errors import DataDirInUse

FILE_NAME = "registry.sqlite3"
DEFAULT_EVENT_RETENTION = 10_000
_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', 1), ('rv', 0), ('compacted', 0);
-- One row per revision of an object, current from resourceVersion rv until superseded.
CREATE TABLE IF NOT EXISTS revisions (
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    rv INTEGER NOT NULL,
    superseded INTEGER,
    created_rv INTEGER NOT NULL,
    pod TEXT,
    notifier TEXT,
    phase TEXT,
    completion REAL,
    ttl INTEGER,
    object TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, rv)
);
CREATE UNIQUE INDEX IF NOT EXISTS current_revisions
    ON revisions (resource, namespace, name) WHERE superseded IS NULL;
CREATE INDEX IF NOT EXISTS current_by_pod
    ON revisions (resource, namespace, pod, created_rv) WHERE superseded IS NULL;
CREATE INDEX IF NOT EXISTS current_by_phase
    ON revisions (resource, phase) WHERE superseded IS NULL;
CREATE INDEX IF NOT EXISTS superseded_revisions
    ON revisions (superseded) WHERE superseded IS NOT NULL;
-- One row per write: ADDED and MODIFIED name the revision starting at rv, DELETED the one
-- superseded at rv.
CREATE TABLE IF NOT EXISTS events (
    rv INTEGER PRIMARY KEY,
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL
);
-- The fan-out state of each Notification, kept by the server rather than in the object (see
-- apiserver/fanout/scope.py). notification_runs: one row per Notification, written in the same
-- transaction as its pod set, with the spec a rollback needs and the decisions taken (why no
-- pod starts any more, the outcome). notification_pods: one row per pod, in the order pods
-- joined the scope, with how far its run got and, separately, how far its rollback got.
CREATE TABLE IF NOT EXISTS notification_runs (
    notification_uid TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    stopped TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL DEFAULT '',
    outcome_reason TEXT NOT NULL DEFAULT '',
    finished INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS notification_pods (
    notification_uid TEXT NOT NULL,
    seq INTEGER NOT NULL,
    pod TEXT NOT NULL,
    pod_uid TEXT NOT NULL,
    state TEXT NOT NULL,
    record TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    rollback TEXT NOT NULL DEFAULT '',
    rollback_record TEXT NOT NULL DEFAULT '',
    rollback_attempts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (notification_uid, pod_uid)
);
CREATE INDEX IF NOT EXISTS notification_pods_by_seq ON notification_pods (notification_uid, seq);
"""

T = TypeVar("T")


class SqliteDatabase:
    """Open with ``await SqliteDatabase.open(data_dir)``; close with ``await db.close()``."""

    def __init__(self, path: Path, event_retention: int) -> None:
        self.path = path
        self.event_retention = event_retention
        self.write_lock = asyncio.Lock()
        """Held while a write commits and is published, and while a watch starts."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-sqlite")
        self._connection: sqlite3.Connection | None = None

    @classmethod
    async def open(
        cls, data_dir: Path, *, event_retention: int = DEFAULT_EVENT_RETENTION
    ) -> SqliteDatabase:
        if event_retention < 1:
            raise ValueError("event_retention must be at least 1")
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        database = cls(data_dir / FILE_NAME, event_retention)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(database._executor, database._connect)
        except BaseException:
            database._executor.shutdown(wait=False)
            raise
        return database

    async def run(self, function: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``function`` with the connection on the database thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, function)

    async def transaction(self, function: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``function`` on the database thread in one write transaction."""
        return await self.run(lambda connection: self._in_transaction(connection, function))

    async def close(self) -> None:
        await self.run(self._disconnect)
        self._executor.shutdown(wait=True)

    def _call(self, function: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            raise RuntimeError(f"{self.path} is closed")
        return function(self._connection)

    def _connect(self) -> None:
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(descriptor)
        connection = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            connection.execute("PRAGMA locking_mode=EXCLUSIVE")
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
            _migrate_notification_pods(connection)
        except sqlite3.OperationalError as error:
            connection.close()
            if "locked" in str(error):
                raise DataDirInUse(
                    f"{self.path} is in use by another process; give each server its own "
                    "data directory"
                ) from error
            raise
        schema = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        if schema != _SCHEMA_VERSION:
            connection.close()
            raise RuntimeError(
                f"{self.path} has schema {schema}, this server reads {_SCHEMA_VERSION}"
            )
        self._connection = connection

    def _disconnect(self, connection: sqlite3.Connection) -> None:
        connection.close()
        self._connection = None

    @staticmethod
    def _in_transaction(
        connection: sqlite3.Connection, function: Callable[[sqlite3.Connection], T]
    ) -> T:
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = function(connection)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return result


def _migrate_notification_pods(connection: sqlite3.Connection) -> None:
    """Bring a notification_pods table made before rollback had its own state up to date:
    add the rollback record and attempt columns, and rename the old rollback outcomes."""
    columns = {row[1] for row in connection.execute("PRAGMA table_info(notification_pods)")}
    if "rollback_record" in columns:
        return
    connection.executescript(
        "BEGIN IMMEDIATE;"
        "ALTER TABLE notification_pods ADD COLUMN rollback_record TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE notification_pods ADD COLUMN rollback_attempts INTEGER NOT NULL DEFAULT 0;"
        "UPDATE notification_pods SET rollback = 'done' WHERE rollback = 'rolledBack';"
        "UPDATE notification_pods SET rollback = 'failed' WHERE rollback = 'rollbackFailed';"
        "COMMIT;")


def resource_version(connection: sqlite3.Connection) -> int:
    """The latest resourceVersion handed out."""
    return connection.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()[0]


def compacted_version(connection: sqlite3.Connection) -> int:
    """History at or before this resourceVersion is gone."""
    return connection.execute("SELECT value FROM meta WHERE key = 'compacted'").fetchone()[0]


def next_resource_version(connection: sqlite3.Connection) -> int:
    """Take the next resourceVersion (inside a write transaction)."""
    connection.execute("UPDATE meta SET value = value + 1 WHERE key = 'rv'")
    return resource_version(connection)


def compact(connection: sqlite3.Connection, retention: int) -> None:
    """Drop history older than the last ``retention`` resourceVersions."""
    horizon = resource_version(connection) - retention
    if horizon <= compacted_version(connection):
        return
    connection.execute("DELETE FROM events WHERE rv <= ?", (horizon,))
    connection.execute(
        "DELETE FROM revisions WHERE superseded IS NOT NULL AND superseded <= ?", (horizon,)
    )
    connection.execute("UPDATE meta SET value = ? WHERE key = 'compacted'", (horizon,))
