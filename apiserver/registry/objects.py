"""Object helpers the registry needs: metadata it fills in, encoding, timestamps."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

FINISHED_PHASES = ("Succeeded", "Failed")

# Kubernetes' generateName: at most 58 characters of the prefix, then 5 characters from an
# alphabet without vowels and look-alike characters (k8s.io/apimachinery/pkg/util/rand).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
_MAX_GENERATED_PREFIX = 63 - _SUFFIX_LENGTH


def generate_name(prefix: str) -> str:
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return prefix[:_MAX_GENERATED_PREFIX] + suffix


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` serialises."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp; None if absent or unreadable."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def encode(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}
