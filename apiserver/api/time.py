"""``metav1.Time`` values: RFC 3339 timestamps, as objects carry them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_timestamp(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp; None if absent or unreadable (a
    timestamp without a zone is taken as UTC)."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
