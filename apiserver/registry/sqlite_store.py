"""``ObjectStore`` on the embedded SQLite database.

Generic over resources: each ``ResourceType.indexed_fields`` gets an expression index on the
stored JSON (created by the store's first write), which cohort queries use.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import json
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from apiserver.registry import sqlite_database as db
from apiserver.registry.errors import (
    Expired,
    ResourceVersionTooLarge,
    check_preconditions,
    not_found,
)
from apiserver.registry.objects import (
    GENERATE_NAME_ATTEMPTS,
    already_exists,
    check_size,
    checked_new,
    encode,
    generate_name,
    metadata,
    no_free_name,
)
from apiserver.registry.paging import PageRequest
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import (
    FieldSelector,
    parse_field_selector,
)
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.store import (
    DEFAULT_MAX_OBJECT_BYTES,
    Cohort,
    ListResult,
    Object,
    ObjectStore,
)
from apiserver.registry.tokens import parse_resource_version
from apiserver.registry.watch import (
    DEFAULT_MAX_QUEUED_EVENTS,
    Change,
    EventType,
    Watch,
    WatchFilter,
    WatchHub,
    selection,
)
from apiserver.timestamps import timestamp

_LIST_BATCH = 500
_CURRENT = "resource = ? AND superseded IS NULL"
_FIELD_PATH = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*")

T = TypeVar("T")


@dataclass(frozen=True)
class _Stored:
    object: Object
    rv: int
    created_rv: int


class SqliteObjectStore(ObjectStore):
    def __init__(
        self,
        database: SqliteDatabase,
        resource: ResourceType,
        *,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS,
    ) -> None:
        self.resource = resource
        self._database = database
        self.max_object_bytes = max_object_bytes
        self._max_queued_events = max_queued_events
        self._hub = WatchHub()
        self._writes: set[asyncio.Task[Any]] = set()
        self._indexed = False
        """Whether this store's write made sure its indexed fields have their indexes."""
        for field in resource.extra_fields:  # written into SQL
            if not _FIELD_PATH.fullmatch(field):
                raise ValueError(f"{resource.plural}: cannot select on field {field!r}")

    # Writes

    async def create(self, obj: Mapping[str, Any], *, cohort: Cohort | None = None) -> Object:
        prepared = self._new_object(obj)
        if cohort is None:
            return await self._write(lambda tx: tx.add(prepared))
        namespace = metadata(prepared)["namespace"]
        selector = parse_field_selector(cohort.field_selector, self.resource.selectable_fields)
        evictable = parse_field_selector(cohort.evictable, self.resource.selectable_fields)

        def create_in_cohort(tx: _Transaction) -> Object:
            members = [stored.object for stored in _cohort(tx.connection, self.resource,
                                                           namespace, selector)]
            if cohort.admit is not None:
                cohort.admit(copy.deepcopy(members))
            for member in cohort.evicted(members, evictable.matches):
                tx.remove(tx.require(namespace, metadata(member)["name"]))
            return tx.add(prepared)

        return await self._write(create_in_cohort)

    async def guaranteed_update(
        self, namespace: str, name: str, mutate: Callable[[Object], Object]
    ) -> Object:
        def replace(tx: _Transaction) -> Object:
            stored = tx.require(namespace, name)
            return tx.replace(stored, mutate(copy.deepcopy(stored.object)))

        return await self._write(replace)

    async def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> Object:
        def remove(tx: _Transaction) -> Object:
            stored = tx.require(namespace, name)
            check_preconditions(self.resource, stored.object, resource_version, uid)
            return tx.remove(stored)

        return await self._write(remove)

    async def delete_collection(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        selection = self._filter(namespace, label_selector, field_selector)

        def remove_matching(tx: _Transaction) -> list[Object]:
            current = _current_objects(tx.connection, self.resource, namespace,
                                       selection.fields)
            matching = [stored for stored in current if selection.matches(stored.object)]
            return [tx.remove(stored) for stored in matching]

        return await self._write(remove_matching)

    # Reads

    async def consistent_read(self, namespace: str | None, name: str = "") -> None:
        """Nothing to wait for: one process, whose every read sees every write it made."""

    async def get(self, namespace: str, name: str) -> Object:
        stored = await self._database.run(lambda c: _current(c, self.resource, namespace, name))
        if stored is None:
            raise not_found(self.resource, name)
        return stored.object

    async def list(
        self,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> ListResult:
        request = PageRequest.of(limit, continue_token)
        selection = self._filter(namespace, label_selector, field_selector)
        return await self._database.run(lambda c: self._list_page(c, selection, request))

    async def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        selection = self._filter(namespace, label_selector, field_selector)
        start = parse_resource_version(resource_version)
        async with self._database.write_lock:
            initial = await self._database.run(lambda c: self._watch_start(c, namespace, start))
            watch = Watch(
                initial, selection, max_queued=self._max_queued_events, on_close=self._hub.remove
            )
            self._hub.add(watch)
        return watch

    def close(self) -> None:
        self._hub.close_all()

    # Internals

    async def _write(self, operation: Callable[[_Transaction], T]) -> T:
        """Commit ``operation`` in one transaction and publish its changes, in order.

        The commit-and-publish runs as its own task: once started it completes even if the
        caller is cancelled, so a committed change always reaches the watchers.
        """
        task = asyncio.ensure_future(self._commit_and_publish(operation))
        self._writes.add(task)
        task.add_done_callback(self._forget)
        return await asyncio.shield(task)

    async def _commit_and_publish(self, operation: Callable[[_Transaction], T]) -> T:
        async with self._database.write_lock:
            changes: list[Change] = []

            indexed = self._indexed

            def run(connection: sqlite3.Connection) -> T:
                if not indexed:
                    _create_indexes(connection, self.resource)
                tx = _Transaction(connection, self.resource, self.max_object_bytes, changes)
                result = operation(tx)
                db.compact(connection, self._database.event_retention)
                return result

            result = await self._database.transaction(run)
            self._indexed = True
            for change in changes:
                self._hub.publish(change)
            return copy.deepcopy(result)  # watchers hold the published objects

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here when the caller was cancelled meanwhile

    def _new_object(self, obj: Mapping[str, Any]) -> Object:
        prepared = checked_new(self.resource, obj)
        meta = prepared["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp()
        return prepared

    def _filter(self, namespace: str | None, labels: str, fields: str) -> WatchFilter:
        return selection(self.resource, namespace, labels, fields)

    def _list_page(
        self, connection: sqlite3.Connection, selection: WatchFilter, request: PageRequest
    ) -> ListResult:
        at = request.snapshot_to_read(
            db.resource_version(connection), db.compacted_version(connection))
        return request.page(self._snapshot_objects(connection, at, selection, request), at)

    def _snapshot_objects(
        self,
        connection: sqlite3.Connection,
        at: int,
        selection: WatchFilter,
        request: PageRequest,
    ) -> Iterator[Object]:
        """The objects of ``selection`` as of resourceVersion ``at`` after the request's last
        key, in key order, read in batches (no larger than a page and the one after it, which
        tells whether the page is the last)."""
        after = request.after
        batch = min(_LIST_BATCH, request.limit + 1) if request.limit else _LIST_BATCH
        while True:
            rows = self._snapshot_rows(connection, at, selection, after, batch)
            yield from (obj for obj in map(json.loads, (r[2] for r in rows))
                        if selection.matches(obj))
            if len(rows) < batch:
                return
            after = (rows[-1][0], rows[-1][1])

    def _snapshot_rows(
        self,
        connection: sqlite3.Connection,
        at: int,
        selection: WatchFilter,
        after: tuple[str, str] | None,
        batch: int,
    ) -> builtins.list[tuple[str, str, str]]:
        """A batch of the objects as of resourceVersion ``at``, in key order after ``after``:
        at least those of ``selection`` (field requirements are checked in SQL first)."""
        fields, field_parameters = _field_conditions(selection.fields)
        sql = (
            "SELECT namespace, name, object FROM revisions WHERE resource = ? AND rv <= ? "
            f"AND (superseded IS NULL OR superseded > ?){fields}"
        )
        parameters: list[Any] = [self.resource.plural, at, at, *field_parameters]
        if selection.namespace is not None:
            sql += " AND namespace = ?"
            parameters.append(selection.namespace)
        if after is not None:
            sql += " AND (namespace, name) > (?, ?)"
            parameters += after
        sql += " ORDER BY namespace, name LIMIT ?"
        return connection.execute(sql, [*parameters, batch]).fetchall()

    def _watch_start(
        self, connection: sqlite3.Connection, namespace: str | None, start: int | None
    ) -> builtins.list[Change]:
        """The events a new watch begins with: a snapshot, or the history after ``start``."""
        if start is None:
            objects = _current_objects(connection, self.resource, namespace)
            return [Change(EventType.ADDED, stored.object) for stored in objects]
        current = db.resource_version(connection)
        if start > current:
            raise ResourceVersionTooLarge(
                f"resourceVersion {start} is newer than this server's {current}; list again"
            )
        compacted = db.compacted_version(connection)
        if start < compacted:
            raise Expired(f"too old resource version: {start} ({compacted})")
        sql = (
            "SELECT e.rv, e.type, now.object, before.object FROM events e "
            "LEFT JOIN revisions now ON now.resource = e.resource "
            "AND now.namespace = e.namespace AND now.name = e.name AND now.rv = e.rv "
            "LEFT JOIN revisions before ON before.resource = e.resource "
            "AND before.namespace = e.namespace AND before.name = e.name "
            "AND before.superseded = e.rv "
            "WHERE e.resource = ? AND e.rv > ?"
        )
        parameters: list[Any] = [self.resource.plural, start]
        if namespace is not None:
            sql += " AND e.namespace = ?"
            parameters.append(namespace)
        changes = []
        for rv, kind, after, before in connection.execute(sql + " ORDER BY e.rv", parameters):
            previous = None if before is None else json.loads(before)
            if kind == EventType.DELETED:
                assert previous is not None
                changes.append(Change(EventType.DELETED, _stamped(previous, rv)))
            else:
                changes.append(Change(EventType(kind), json.loads(after), previous))
        return changes


class _Transaction:
    """The writes of one SQLite transaction; each records the change it makes."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        resource: ResourceType,
        max_object_bytes: int,
        changes: list[Change],
    ) -> None:
        self.connection = connection
        self._resource = resource
        self._max_object_bytes = max_object_bytes
        self._changes = changes

    def require(self, namespace: str, name: str) -> _Stored:
        stored = _current(self.connection, self._resource, namespace, name)
        if stored is None:
            raise not_found(self._resource, name)
        return stored

    def add(self, obj: Object) -> Object:
        meta = metadata(obj)
        namespace = meta["namespace"]
        if meta.get("name"):
            if _current(self.connection, self._resource, namespace, meta["name"]) is not None:
                raise already_exists(self._resource, meta["name"])
        else:
            meta["name"] = self._free_name(namespace, meta["generateName"])
        rv = db.next_resource_version(self.connection)
        self._insert(obj, rv, rv)
        self._log(rv, EventType.ADDED, namespace, meta["name"])
        self._changes.append(Change(EventType.ADDED, obj))
        return obj

    def replace(self, stored: _Stored, desired: Object) -> Object:
        old_meta = metadata(stored.object)
        obj = copy.deepcopy(desired)
        meta = obj.setdefault("metadata", {})
        for key in ("name", "namespace", "uid", "creationTimestamp", "generateName"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if obj == stored.object:
            return stored.object
        rv = db.next_resource_version(self.connection)
        self._supersede(stored, rv)
        self._insert(obj, rv, stored.created_rv)
        self._log(rv, EventType.MODIFIED, meta["namespace"], meta["name"])
        self._changes.append(Change(EventType.MODIFIED, obj, stored.object))
        return obj

    def remove(self, stored: _Stored) -> Object:
        meta = metadata(stored.object)
        rv = db.next_resource_version(self.connection)
        self._supersede(stored, rv)
        self._log(rv, EventType.DELETED, meta["namespace"], meta["name"])
        gone = _stamped(stored.object, rv)
        self._changes.append(Change(EventType.DELETED, gone))
        return gone

    def _free_name(self, namespace: str, prefix: str) -> str:
        for _ in range(GENERATE_NAME_ATTEMPTS):
            name = generate_name(prefix)
            if _current(self.connection, self._resource, namespace, name) is None:
                return name
        raise no_free_name(self._resource, prefix)

    def _insert(self, obj: Object, rv: int, created_rv: int) -> None:
        meta = metadata(obj)
        meta["resourceVersion"] = str(rv)
        check_size(self._resource, obj, self._max_object_bytes)
        text = encode(obj)
        self.connection.execute(
            "INSERT INTO revisions (resource, namespace, name, rv, superseded, created_rv, "
            "object) VALUES (?, ?, ?, ?, NULL, ?, ?)",
            (self._resource.plural, meta["namespace"], meta["name"], rv, created_rv, text),
        )

    def _supersede(self, stored: _Stored, rv: int) -> None:
        meta = metadata(stored.object)
        self.connection.execute(
            "UPDATE revisions SET superseded = ? WHERE resource = ? AND namespace = ? "
            "AND name = ? AND rv = ?",
            (rv, self._resource.plural, meta["namespace"], meta["name"], stored.rv),
        )

    def _log(self, rv: int, kind: EventType, namespace: str, name: str) -> None:
        self.connection.execute(
            "INSERT INTO events (rv, resource, namespace, name, type) VALUES (?, ?, ?, ?, ?)",
            (rv, self._resource.plural, namespace, name, kind.value),
        )


def _current(
    connection: sqlite3.Connection, resource: ResourceType, namespace: str, name: str
) -> _Stored | None:
    row = connection.execute(
        f"SELECT object, rv, created_rv FROM revisions WHERE {_CURRENT} "
        "AND namespace = ? AND name = ?",
        (resource.plural, namespace, name),
    ).fetchone()
    return None if row is None else _Stored(json.loads(row[0]), row[1], row[2])


def _current_objects(
    connection: sqlite3.Connection, resource: ResourceType, namespace: str | None,
    fields: FieldSelector | None = None,
) -> list[_Stored]:
    """The current objects in (namespace, name) order: all of them, or (with ``fields``) at
    least those that match."""
    conditions, parameters = _field_conditions(fields or FieldSelector())
    sql = f"SELECT object, rv, created_rv FROM revisions WHERE {_CURRENT}{conditions}"
    parameters.insert(0, resource.plural)
    if namespace is not None:
        sql += " AND namespace = ?"
        parameters.append(namespace)
    rows = connection.execute(sql + " ORDER BY namespace, name", parameters)
    return [_Stored(json.loads(text), rv, created) for text, rv, created in rows]


_COLUMNS = {"metadata.name": "name", "metadata.namespace": "namespace"}


def _field_conditions(selector: FieldSelector) -> tuple[str, list[Any]]:
    """SQL (`` AND ...``) that keeps every row ``selector`` matches, so that fewer objects are
    decoded; the caller still matches each. A field that is not a JSON string is kept (a field
    selector compares the text of any value)."""
    sql, parameters = "", []
    for requirement in selector.requirements:
        operator = "<>" if requirement.negated else "="
        column = _COLUMNS.get(requirement.field)
        if column is not None:
            sql += f" AND {column} {operator} ?"
        else:
            path = f"'$.{requirement.field}'"
            sql += (f" AND (json_type(object, {path}) IS NOT 'text' "
                    f"OR json_extract(object, {path}) {operator} ?)")
        parameters.append(requirement.value)
    return sql, parameters


def _json_path(field: str) -> str:
    return f"json_extract(object, '$.{field}')"


def _create_indexes(connection: sqlite3.Connection, resource: ResourceType) -> None:
    """An index of the current revisions per indexed field (shared by resources that index the
    same field: other resources' rows just hold NULL there)."""
    for field in resource.indexed_fields:
        connection.execute(
            f"CREATE INDEX IF NOT EXISTS \"current_by_{field}\" ON revisions "
            f"(resource, namespace, {_json_path(field)}, created_rv) WHERE superseded IS NULL"
        )


def _cohort(
    connection: sqlite3.Connection, resource: ResourceType, namespace: str,
    selector: FieldSelector,
) -> list[_Stored]:
    """The current objects of ``namespace`` that match ``selector``, in creation order; an
    equality on an indexed field narrows the query through its index."""
    sql = f"SELECT object, rv, created_rv FROM revisions WHERE {_CURRENT} AND namespace = ?"
    parameters: list[Any] = [resource.plural, namespace]
    for requirement in selector.requirements:
        if (requirement.field in resource.indexed_fields and not requirement.negated
                and requirement.value):
            sql += f" AND {_json_path(requirement.field)} = ?"
            parameters.append(requirement.value)
    rows = connection.execute(sql + " ORDER BY created_rv", parameters)
    stored = [_Stored(json.loads(text), rv, created) for text, rv, created in rows]
    return [member for member in stored if selector.matches(member.object)]


def _stamped(obj: Object, rv: int) -> Object:
    stamped = copy.deepcopy(obj)
    stamped["metadata"]["resourceVersion"] = str(rv)
    return stamped
