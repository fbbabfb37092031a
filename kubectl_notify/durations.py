"""Durations as kubectl spells them (Go's time.ParseDuration: ``500ms``, ``30s``, ``1m30s``,
``2h``), plus a bare number meaning seconds; results print as the server's DURATION column.

The plugin is a distribution without the server, so it has its own copy of the two rules it
shares with the server (the Go duration syntax of `apiserver.config.parse_duration`, the
DURATION column of `apiserver.api.tables.run_length`); tests/unit/test_kubectl_notify_durations.py
holds the two to the same answers.
"""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError naming the value and the accepted forms."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(value) or not value:
        raise ValueError(f"invalid duration {text!r}: use a number and a unit, e.g. 500ms, "
                         "30s, 1m30s, 2h")
    return total


def format_duration(seconds: float) -> str:
    """``27ms``, ``1.4s``, ``2m3s``, ``62m``: as ``kubectl get podnotifiers`` shows DURATION
    (precise while a run is short, then as kubectl's human durations)."""
    millis = round(seconds * 1000)  # status times are whole milliseconds
    if millis < 1000:
        return f"{max(millis, 0)}ms"
    if millis < 10_000:
        tenths = millis // 100  # truncated, like the longer forms' figures
        return f"{tenths // 10}s" if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}s"
    return _human_duration(millis / 1000)


def _human_duration(seconds: float) -> str:
    """kubectl's HumanDuration (apimachinery duration.HumanDuration)."""
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
