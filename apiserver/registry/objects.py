"""Object helpers the registry needs: names it generates, encoding, metadata."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

# Kubernetes' generateName: at most 58 characters of the prefix, then 5 characters from an
# alphabet without vowels and look-alike characters (k8s.io/apimachinery/pkg/util/rand).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
_MAX_GENERATED_PREFIX = 63 - _SUFFIX_LENGTH


def generate_name(prefix: str) -> str:
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return prefix[:_MAX_GENERATED_PREFIX] + suffix


def encode(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}
