"""``metav1.Time`` and ``metav1.MicroTime`` values: RFC 3339 timestamps, as objects carry them
(a leaf module: every layer, the kube client's Leases included, reads and writes them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` serialises."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def micro_time(seconds: float) -> str:
    """``metav1.MicroTime`` of `seconds` since the epoch: ``2006-01-02T15:04:05.000000Z``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
