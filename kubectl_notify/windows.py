"""Whether snapshot times lie inside a quiesce window (``kubectl notify verify-window``).

A window's bounds are the server's: RFC 3339 times with milliseconds, from container-notifier's
clock. A snapshot time comes from somewhere else (a ``VolumeSnapshot``'s ``creationTime`` is
set by the CSI snapshotter from the storage system's answer, in whole seconds), so the check
assumes the least it can: a time stands for the whole interval its last digit allows
(``12:00:05Z`` is any instant from 12:00:05.000 to 12:00:06.000; ``12:00:05.3Z`` from 05.3 to
05.4), widened by the clock skew the caller allows on each side, and it is inside only if all
of that interval lies inside the window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubectl_notify.errors import FAILED, PluginError, UsageError

_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.(\d{1,6}))?(?:[Zz]|[+-]\d\d:\d\d)")


@dataclass(frozen=True)
class Window:
    """A quiesce window: from ``start`` (every pod quiesced) to ``end`` (the first release
    began); ``what`` names its fields, for the report."""

    start: Instant
    end: Instant
    what: str


@dataclass(frozen=True)
class Instant:
    """A time as given, and the interval it stands for: [earliest, earliest + precision)."""

    text: str
    earliest: datetime
    precision: timedelta


@dataclass(frozen=True)
class Verdict:
    instant: Instant
    inside: bool
    detail: str


def parse_time(text: str, flag: str = "TIME") -> Instant:
    """An RFC 3339 time (``2026-12-01T12:00:05Z``); its precision is its last digit's."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise UsageError(f"{flag} {text!r} is not an RFC 3339 time (e.g. 2026-12-01T12:00:05Z, "
                         "as a VolumeSnapshot's status.creationTime)", "verify-window")
    digits = match.group(1) or ""
    parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    return Instant(text, parsed, timedelta(microseconds=10 ** (6 - len(digits))))


def window_of(kind: str, obj: dict[str, Any]) -> Window:
    """The window a Notification's ``status.window`` or a held PodNotifier's status records;
    a PluginError (exit code 1) if it has not both begun and ended."""
    status = obj.get("status") or {}
    name = f"{kind}/{(obj.get('metadata') or {}).get('name', '')}"
    if kind == "notification":
        fields = ("window.quiescedTime", "window.releaseTime")
        values = ((status.get("window") or {}).get("quiescedTime"),
                  (status.get("window") or {}).get("releaseTime"))
    else:
        fields = ("heldTime", "releaseRequestedTime")
        values = (status.get("heldTime"), status.get("releaseRequestedTime"))
    missing = [f"status.{field}" for field, value in zip(fields, values, strict=True)
               if not value]
    if missing:
        raise PluginError(f"error: {name} has no {' and no '.join(missing)}: its window has "
                          + ("not begun" if not values[0] else "not ended (release it first)"),
                          FAILED)
    start, end = (parse_time(str(value), field)
                  for field, value in zip(fields, values, strict=True))
    return Window(start, end, f"status.{fields[0]} to status.{fields[1]}")


def verify(window: Window, instant: Instant, skew: timedelta) -> Verdict:
    """Inside only if [earliest - skew, earliest + precision + skew] lies in the window."""
    first = instant.earliest - skew
    last = instant.earliest + instant.precision + skew
    start, end = window.start.earliest, window.end.earliest
    if first < start:
        return Verdict(instant, False, f"may lie {_seconds(start - first)} before the window "
                                       "began")
    if last > end:
        return Verdict(instant, False, f"may lie {_seconds(last - end)} after the window ended")
    return Verdict(instant, True, f"{_seconds(first - start)} after it began, "
                                  f"{_seconds(end - last)} before it ended")


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.3f}s"
