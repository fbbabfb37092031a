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
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from apiserver.registry.errors import DataDirInUse, StorageUnavailable

log = logging.getLogger(__name__)

FILE_NAME = "registry.sqlite3"
DEFAULT_EVENT_RETENTION = 10_000
DEFAULT_PROBE_INTERVAL_SECONDS = 5.0
_SCHEMA_VERSION = 3
_MINIMUM_SQLITE = (3, 38, 0)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', 3), ('rv', 0), ('compacted', 0);
-- One row per revision of an object, current from resourceVersion rv until superseded. The
-- store adds an index per indexed field of a resource (see SqliteObjectStore).
CREATE TABLE IF NOT EXISTS revisions (
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    rv INTEGER NOT NULL,
    superseded INTEGER,
    created_rv INTEGER NOT NULL,
    object TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, rv)
);
CREATE UNIQUE INDEX IF NOT EXISTS current_revisions
    ON revisions (resource, namespace, name) WHERE superseded IS NULL;
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
"""

# Schema 1 kept PodNotifier fields in columns of every revision; schema 2 indexes the fields of
# each resource's ResourceType.indexed_fields instead (expression indexes on the object).
_MIGRATE_FROM_1 = """
DROP INDEX IF EXISTS current_by_pod;
DROP INDEX IF EXISTS current_by_phase;
ALTER TABLE revisions DROP COLUMN pod;
ALTER TABLE revisions DROP COLUMN notifier;
ALTER TABLE revisions DROP COLUMN phase;
ALTER TABLE revisions DROP COLUMN completion;
ALTER TABLE revisions DROP COLUMN ttl;
UPDATE meta SET value = 2 WHERE key = 'schema';
"""

# Schema 2 kept the Notification scopes in tables of their own; schema 3 keeps them as objects of
# the private resources of apiserver/registry/resources.py (in revisions, like every object).
# The scopes of unfinished Notifications are dropped: the fan-out fails those ScopeNotRecorded.
_MIGRATE_FROM_2 = """
DROP INDEX IF EXISTS notification_pods_by_seq;
DROP TABLE IF EXISTS notification_pods;
DROP TABLE IF EXISTS notification_runs;
UPDATE meta SET value = 3 WHERE key = 'schema';
"""

T = TypeVar("T")


class SqliteDatabase:
    """Open with ``await SqliteDatabase.open(data_dir)``; close with ``await db.close()``.

    A read or write that SQLite fails for a storage reason (full disk, I/O error, read-only
    file, damaged file) raises ``StorageUnavailable``, never ``sqlite3`` errors; a failed write
    transaction is rolled back whole and makes ``writable`` false until a write commits again.
    Meanwhile the database tries a small write of its own every ``probe_interval`` seconds, so
    that it becomes writable again once space is freed even if nothing else writes (a server
    that is not ready gets no requests).
    """

    def __init__(self, path: Path, event_retention: int, probe_interval: float) -> None:
        self.path = path
        self.event_retention = event_retention
        self._probe_interval = probe_interval
        self._probing: asyncio.Task[None] | None = None
        self.write_lock = asyncio.Lock()
        """Held while a write commits and is published, and while a watch starts."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-sqlite")
        self._connection: sqlite3.Connection | None = None
        self._write_error = ""

    @property
    def writable(self) -> bool:
        """False from a write that failed for a storage reason until a write succeeds (for
        readiness: while it is false, every write is likely to answer 503)."""
        return not self._write_error

    @property
    def write_error(self) -> str:
        """What the last failed write said ("" while ``writable``)."""
        return self._write_error

    @classmethod
    async def open(
        cls, data_dir: Path, *, event_retention: int = DEFAULT_EVENT_RETENTION,
        probe_interval: float = DEFAULT_PROBE_INTERVAL_SECONDS,
    ) -> SqliteDatabase:
        if event_retention < 1:
            raise ValueError("event_retention must be at least 1")
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        database = cls(data_dir / FILE_NAME, event_retention, probe_interval)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(database._executor, database._connect)
        except BaseException:
            database._executor.shutdown(wait=False)
            raise
        return database

    async def run(self, function: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``function`` with the connection on the database thread (for reads)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._call, function)
        except sqlite3.DatabaseError as error:
            if not _is_storage_failure(error):
                raise
            raise self._unavailable("read", error) from error

    async def transaction(self, function: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``function`` on the database thread in one write transaction: all of it is
        committed, or (on any exception) none of it."""
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                self._executor, self._call,
                lambda connection: self._in_transaction(connection, function))
        except sqlite3.DatabaseError as error:
            if not _is_storage_failure(error):
                raise
            unavailable = self._unavailable("write", error)
            if self.writable:
                log.error("registry write failed", extra={"path": str(self.path),
                                                          "error": unavailable.message})
            self._write_error = unavailable.message
            if self._probing is None or self._probing.done():
                self._probing = asyncio.get_running_loop().create_task(
                    self._probe_until_writable(), name="registry-write-probe")
            raise unavailable from error
        if not self.writable:
            log.info("registry writes succeed again", extra={"path": str(self.path)})
            self._write_error = ""
        return result

    async def close(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            await asyncio.gather(self._probing, return_exceptions=True)
        await self.run(self._disconnect)
        self._executor.shutdown(wait=True)

    async def _probe_until_writable(self) -> None:
        while not self.writable:
            await asyncio.sleep(self._probe_interval)
            with contextlib.suppress(StorageUnavailable):
                await self.transaction(_probe_write)

    def _call(self, function: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            raise RuntimeError(f"{self.path} is closed")
        return function(self._connection)

    def _unavailable(self, action: str, error: sqlite3.DatabaseError) -> StorageUnavailable:
        code = getattr(error, "sqlite_errorname", "")
        remedy = next((text for primary, text in _REMEDIES.items()
                       if code == primary or code.startswith(primary + "_")), _DEFAULT_REMEDY)
        return StorageUnavailable(
            f"storage failed: could not {action} {self.path}: {error}"
            f"{f' ({code})' if code else ''}; {remedy.format(data_dir=self.path.parent)}")

    def _connect(self) -> None:
        if sqlite3.sqlite_version_info < _MINIMUM_SQLITE:
            raise RuntimeError(
                f"the registry needs SQLite {'.'.join(map(str, _MINIMUM_SQLITE))} or later (JSON "
                f"functions, ALTER TABLE DROP COLUMN); this Python has {sqlite3.sqlite_version}")
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(descriptor)
        connection = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            connection.execute("PRAGMA locking_mode=EXCLUSIVE")
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            _script(connection, _SCHEMA)
            schema = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
            for version, migration in ((1, _MIGRATE_FROM_1), (2, _MIGRATE_FROM_2)):
                if schema == version:
                    _script(connection, migration)
                    log.info("migrated the registry database", extra={
                        "path": str(self.path), "from": version, "to": version + 1})
                    schema = version + 1
        except sqlite3.OperationalError as error:
            connection.close()
            if "locked" in str(error):
                raise DataDirInUse(
                    f"{self.path} is in use by another process; give each server its own "
                    "data directory"
                ) from error
            raise
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
            connection.execute("COMMIT")
        except BaseException:
            # SQLite may already have rolled back (it does for some SQLITE_FULL and
            # SQLITE_IOERR cases); a failed COMMIT leaves the transaction open.
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return result


def _probe_write(connection: sqlite3.Connection) -> None:
    """A write that needs a free page and a commit, and leaves no row behind."""
    page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    connection.execute("INSERT INTO meta (key, value) VALUES ('write-probe', zeroblob(?))",
                       (page_size,))
    connection.execute("DELETE FROM meta WHERE key = 'write-probe'")


def _script(connection: sqlite3.Connection, script: str) -> None:
    """Run ``script`` in one transaction (``executescript`` commits any open one first)."""
    try:
        connection.executescript(f"BEGIN IMMEDIATE;{script}COMMIT;")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _is_storage_failure(error: sqlite3.DatabaseError) -> bool:
    """Errors of the storage (disk full, I/O, read-only, damaged file), not of our SQL:
    IntegrityError and ProgrammingError stay bugs."""
    return isinstance(error, sqlite3.OperationalError) or type(error) is sqlite3.DatabaseError


_DEFAULT_REMEDY = "check the file system of --data-dir {data_dir}, then retry"
_REMEDIES = {
    "SQLITE_FULL": "free space on the file system of --data-dir {data_dir} (or give it a larger "
                   "volume), then retry",
    "SQLITE_IOERR": "the disk behind --data-dir {data_dir} failed; check it, then retry",
    "SQLITE_READONLY": "make --data-dir {data_dir} writable by the server, then retry",
    "SQLITE_CORRUPT": "the database file is damaged; restart the server with a restored or "
                      "empty --data-dir {data_dir}",
}


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
