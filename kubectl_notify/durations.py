"""Durations as kubectl spells them (Go's time.ParseDuration: ``500ms``, ``30s``, ``1m30s``,
``2h``), plus a bare number meaning seconds; results print as the server's DURATION column."""

from __future__ import annotations

import re

from apiserver.api.tables import run_length
from apiserver.config import parse_duration as parse_go_duration

format_duration = run_length
"""``27ms``, ``1.4s``, ``2m3s``, ``62m``: as ``kubectl get podnotifiers`` shows DURATION."""


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError naming the value and the accepted forms."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        return parse_go_duration(value)
    except ValueError:
        raise ValueError(f"invalid duration {text!r}: use a number and a unit, e.g. 500ms, "
                         "30s, 1m30s, 2h") from None
