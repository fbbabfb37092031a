"""``meta.k8s.io/v1`` Table output, as ``kubectl get`` asks for it, and the PodNotifier columns.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`` and prints the
server's columns (names upper-cased) and cells as they come. Each row carries the object as a
``PartialObjectMetadata`` (``includeObject=Metadata``, the default), the whole object
(``Object``) or nothing (``None``); kubectl reads the namespace for ``-A`` from it.

Columns that show a field take their description and type from the field's definition
(types.py), so a column cannot describe a field differently from ``kubectl explain``.

A watch answered as Table sends one single-row Table per event; like kube-apiserver, only the
first carries ``columnDefinitions`` (the later ones have ``null``) and kubectl reuses the columns
it has seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from apiserver import errors
from apiserver.api.model import APIModel
from apiserver.api.schema import field_schema
from apiserver.api.types import (
    ACCESS_INVALID_DECLARATION,
    FINISHED_PHASES,
    Notification,
    NotifierPod,
    ObjectMeta,
    Phase,
    PodNotifier,
)
from apiserver.timestamps import parse_timestamp

Object = Mapping[str, Any]

META_GROUP_VERSION = "meta.k8s.io/v1"

class IncludeObject(StrEnum):
    """The ``includeObject`` query parameter of a Table request."""

    METADATA = "Metadata"
    OBJECT = "Object"
    NONE = "None"

    @classmethod
    def parse(cls, value: str | None) -> IncludeObject:
        """The parameter's value (default Metadata); 400 as kube-apiserver words it."""
        if not value:
            return cls.METADATA
        try:
            return cls(value)
        except ValueError:
            raise errors.bad_request(
                f'Unable to convert to Table as requested: includeObject: Invalid value: '
                f'"{value}": must be \'Metadata\', \'Object\', \'None\', or empty'
            ) from None


@dataclass(frozen=True)
class Column:
    """One ``TableColumnDefinition`` and how to compute its cell from an object."""

    name: str
    """As kube names columns ("Name", "Age"); kubectl prints it upper-cased."""
    cell: Callable[[Object, datetime], Any]
    """The cell of an object, given the time of rendering (for ages and running durations)."""
    type: str = "string"
    """OpenAPI type: string, integer, number, boolean or date."""
    format: str = ""
    """e.g. "name" for the column that identifies the row."""
    description: str = ""
    priority: int = 0
    """0: always shown; higher: only with ``-o wide``."""

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


@dataclass(frozen=True)
class TableConvertor:
    """The columns of one resource, and the Tables made of them."""

    columns: tuple[Column, ...]

    def column_definitions(self) -> list[dict[str, Any]]:
        return [column.definition() for column in self.columns]

    def row(self, obj: Object, *, include: IncludeObject = IncludeObject.METADATA,
            now: datetime | None = None) -> dict[str, Any]:
        moment = now or datetime.now(UTC)
        return {"cells": [column.cell(obj, moment) for column in self.columns],
                "object": row_object(obj, include)}

    def table(self, objects: Iterable[Object], *, resource_version: str = "",
              continue_token: str = "", include: IncludeObject = IncludeObject.METADATA,
              headers: bool = True, now: datetime | None = None) -> dict[str, Any]:
        """A Table of ``objects``; its ``metadata`` is the list's (or the object's) ListMeta.

        Without ``headers`` (watch events after the first), ``columnDefinitions`` is null.
        """
        moment = now or datetime.now(UTC)
        meta: dict[str, Any] = {}
        if resource_version:
            meta["resourceVersion"] = resource_version
        if continue_token:
            meta["continue"] = continue_token
        return {
            "kind": "Table",
            "apiVersion": META_GROUP_VERSION,
            "metadata": meta,
            "columnDefinitions": self.column_definitions() if headers else None,
            "rows": [self.row(obj, include=include, now=moment) for obj in objects],
        }


def partial_object_metadata(obj: Object) -> dict[str, Any]:
    """The object's ``PartialObjectMetadata`` (kind, apiVersion meta.k8s.io/v1, metadata)."""
    return {"kind": "PartialObjectMetadata", "apiVersion": META_GROUP_VERSION,
            "metadata": dict(obj.get("metadata") or {})}


def row_object(obj: Object, include: IncludeObject) -> dict[str, Any] | None:
    if include is IncludeObject.OBJECT:
        return dict(obj)
    if include is IncludeObject.NONE:
        return None
    return partial_object_metadata(obj)


# Cells


def human_duration(seconds: float) -> str:
    """kubectl's duration format (apimachinery ``duration.HumanDuration``): ~2-3 figures.

    e.g. 5s, 119s, 2m5s, 10m, 3h, 7h59m, 2d, 7d23h, 30d, 2y15d, 9y. Up to one second in the
    future reads "0s" (clock skew); further in the future "<invalid>".
    """
    whole = int(seconds)  # truncates toward zero, like Go's int()
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def run_length(seconds: float) -> str:
    """A run's length, precise while it is short: 27ms, 1.4s, 45s, then as ``human_duration``
    (2m3s, 10m, ...). Runs mostly take milliseconds; whole seconds would show 0s for all."""
    millis = round(seconds * 1000)  # status times are whole milliseconds
    if millis < 1000:
        return f"{max(millis, 0)}ms"
    if millis < 10_000:
        tenths = millis // 100  # truncated, like human_duration's figures
        return f"{tenths // 10}s" if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}s"
    return human_duration(millis / 1000)


def age(obj: Object, now: datetime) -> str:
    """Time since ``metadata.creationTimestamp``, or "<unknown>" as kubectl prints it."""
    created = parse_timestamp(_get(obj, "metadata", "creationTimestamp"))
    if created is None:
        return "<unknown>"
    return human_duration(now.timestamp() - created)


def run_duration(status_: Any, now: datetime) -> str:
    """completionTime - startTime, or now - startTime while running; "" before it starts.

    As kubectl shows a Job's DURATION, but to the millisecond below a second (``run_length``):
    status times carry milliseconds.
    """
    if not isinstance(status_, Mapping):
        return ""
    started = parse_timestamp(status_.get("startTime"))
    if started is None:
        return ""
    completed = parse_timestamp(status_.get("completionTime"))
    end = completed if completed is not None else now.timestamp()
    return run_length(end - started)


def field(*path: str, default: Any = "") -> Callable[[Object, datetime], Any]:
    """A cell showing the value at ``path`` (e.g. "spec", "podName"), ``default`` if unset."""

    def cell(obj: Object, now: datetime) -> Any:
        value = _get(obj, *path)
        return default if value is None else value

    return cell


def field_column(name: str, kind: type[APIModel], *path: str, default: Any = "",
                 priority: int = 0) -> Column:
    """A column showing the field at ``path`` of ``kind`` (JSON names), described and typed as
    the definition describes and types the field; ``default`` while it is unset."""
    schema = field_schema(kind, *path)
    return Column(name, field(*path, default=default), type=schema.get("type", "string"),
                  description=schema["description"], priority=priority)


def name_column() -> Column:
    return Column("Name", field("metadata", "name"), format="name",
                  description=field_schema(ObjectMeta, "name")["description"])


def age_column() -> Column:
    return Column("Age", age,
                  description=field_schema(ObjectMeta, "creationTimestamp")["description"])


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


# PodNotifier


def podnotifier_exit(obj: Object, now: datetime) -> str:
    """The first failed container's exit code (an http notifier's "HTTP <status code>"), or
    its reason when it has none (Timeout, ExecFailed, ...): a failure must not read like
    success. Otherwise one container's exit code (or "HTTP <status code>"), several
    containers' "<finished>/<total>", and "-" until known."""
    containers = [c for c in _get(obj, "status", "containers") or [] if isinstance(c, Mapping)]
    if not containers:
        return "-"
    failed = next((c for c in containers if c.get("phase") == Phase.FAILED), None)
    if failed is not None:
        code = failed.get("exitCode")
        if code not in (None, 0):
            return str(code)
        if "statusCode" in failed:
            return f"HTTP {failed['statusCode']}"
        return str(failed.get("reason") or "Failed")
    if len(containers) == 1:
        code = containers[0].get("exitCode")
        if code is None and "statusCode" in containers[0]:
            return f"HTTP {containers[0]['statusCode']}"
        return "-" if code is None else str(code)
    finished = sum(1 for c in containers if c.get("phase") in FINISHED_PHASES)
    return f"{finished}/{len(containers)}"


def podnotifier_duration(obj: Object, now: datetime) -> str:
    return run_duration(obj.get("status"), now)


PODNOTIFIER_TABLE = TableConvertor((
    name_column(),
    field_column("Pod", PodNotifier, "spec", "podName"),
    field_column("Notifier", PodNotifier, "spec", "notifier"),
    field_column("Phase", PodNotifier, "status", "phase"),
    Column("Exit", podnotifier_exit,
           description="The first failed container's exit code (HTTP and the status code for "
                       "an http notifier), or its reason (e.g. Timeout) if it has none; else "
                       "the exit code (or HTTP status) of a single container, or "
                       "finished/total containers; - until known."),
    Column("Duration", podnotifier_duration,
           description="How long the run took, or has been running (27ms, 1.4s, 2m3s); "
                       "empty until it starts. Sort runs by --sort-by=.status.startTime "
                       "(milliseconds; creationTimestamp has whole seconds)."),
    age_column(),
    field_column("Reason", PodNotifier, "status", "reason", priority=1),
))
"""``kubectl get podnotifiers``: NAME POD NOTIFIER PHASE EXIT DURATION AGE (+ REASON wide)."""


# Notification


def notification_progress(obj: Object, now: datetime) -> str:
    counts = _get(obj, "status", "counts") or {}
    return f"{counts.get('succeeded', 0)}/{counts.get('total', 0)}"


def notification_count(name: str, column: str, priority: int = 0) -> Column:
    """A column showing one of status.counts (0 until set)."""
    return field_column(column, Notification, "status", "counts", name, default=0,
                        priority=priority)


def notification_window(obj: Object, now: datetime) -> str:
    """The quiesce window (spec.release, status.window): ``open 12s`` while it is open (since
    quiescedTime), ``closed 3s`` once the release started (it was open that long), ``never
    opened`` when the Notification ended without every pod quiesced, ``quiescing`` until then;
    empty without spec.release."""
    if not isinstance(_get(obj, "spec", "release"), Mapping):
        return ""
    window = _get(obj, "status", "window")
    window = window if isinstance(window, Mapping) else {}
    opened = parse_timestamp(window.get("quiescedTime"))
    released = parse_timestamp(window.get("releaseTime"))
    if opened is not None and released is not None:
        return f"closed {human_duration(released - opened)}"
    if opened is not None:
        return f"open {human_duration(now.timestamp() - opened)}"
    if released is not None or _get(obj, "status", "phase") in FINISHED_PHASES:
        return "never opened"
    return "quiescing"


NOTIFICATION_TABLE = TableConvertor((
    name_column(),
    field_column("Notifier", Notification, "spec", "notifier"),
    field_column("Phase", Notification, "status", "phase"),
    Column("Succeeded/Total", notification_progress,
           description="Pods whose notifier succeeded, of the pods in scope."),
    notification_count("failed", "Failed"),
    Column("Window", notification_window,
           description="With spec.release, the quiesce window: open 12s while every pod is "
                       "quiesced (since status.window.quiescedTime), closed 3s once the release "
                       "started (how long it was open), quiescing before, never opened if the "
                       "Notification ended first; empty without spec.release."),
    age_column(),
    notification_count("skipped", "Skipped", priority=1),
    notification_count("rolledBack", "Rolled-back", priority=1),
))
"""``kubectl get notifications``: NAME NOTIFIER PHASE SUCCEEDED/TOTAL FAILED WINDOW AGE (+
SKIPPED ROLLED-BACK wide)."""


# NotifierPod


def _declared_names(obj: Object) -> list[str]:
    """The notifier names the pod's containers declare, once each, in declaration order."""
    names = [str(n.get("name")) for c in _get(obj, "containers") or [] if isinstance(c, Mapping)
             for n in c.get("notifiers") or [] if isinstance(n, Mapping)]
    return list(dict.fromkeys(names))


def notifier_pod_notifiers(obj: Object, now: datetime) -> str:
    if _get(obj, "access", "reason") == ACCESS_INVALID_DECLARATION:
        return "<invalid>"
    return ",".join(_declared_names(obj)) or "<none>"


def notifier_pod_allowed(obj: Object, now: datetime) -> str:
    if _get(obj, "access", "allowed") is not True:
        return "<none>"
    return ",".join(_declared_names(obj)) or "<none>"


def notifier_pod_containers(obj: Object, now: datetime) -> str:
    """Each declaring container with its notifiers: ``db=quiesce,lock side=reload``."""
    shown = [f"{c.get('name')}=" + ",".join(str(n.get("name")) for n in c.get("notifiers") or []
                                           if isinstance(n, Mapping))
             for c in _get(obj, "containers") or [] if isinstance(c, Mapping)]
    return " ".join(shown) or "<none>"


def notifier_pod_access(obj: Object, now: datetime) -> str:
    """The trust rule that vouches (allowed), or the reason of the refusal; "" if none."""
    access = _get(obj, "access") or {}
    return str(access.get("rule") or access.get("reason") or "")


NOTIFIER_POD_TABLE = TableConvertor((
    name_column(),
    Column("Notifiers", notifier_pod_notifiers,
           description="The notifier names the pod's containers declare; <invalid> if its "
                       "annotation does not validate."),
    Column("Allowed", notifier_pod_allowed,
           description="The notifiers the caller may run on the pod (create pods/notify and "
                       "a trust rule); <none> if none."),
    age_column(),
    Column("Containers", notifier_pod_containers, priority=1,
           description="Each container that declares notifiers, with their names."),
    Column("Access", notifier_pod_access, priority=1,
           description=field_schema(NotifierPod, "access", "rule")["description"]
           + " When refused: " + field_schema(NotifierPod, "access", "reason")["description"]),
))
"""``kubectl get pods.notifier.x-k8s.io``: NAME NOTIFIERS ALLOWED AGE (+ CONTAINERS ACCESS
wide)."""
