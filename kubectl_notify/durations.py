"""Durations as kubectl spells them (Go's time.ParseDuration: ``500ms``, ``30s``, ``1m30s``,
``2h``), plus a bare number meaning seconds; and the short form results are printed in."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError naming the value and the accepted forms."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    position, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise ValueError(f"invalid duration {text!r}: use a number and a unit, e.g. 500ms, "
                         "30s, 1m30s, 2h")
    return total


def format_duration(seconds: float) -> str:
    """``27ms``, ``1.4s``, ``2m3s``, ``1h2m``: milliseconds under a second, one decimal under
    ten seconds, whole units above."""
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"
