"""resourceVersions and continue tokens as clients send them, read the same way by every
backend: a resourceVersion is a decimal of at most 64 bits, a continue token names the snapshot
(a resourceVersion) and the last (namespace, name) of the page before."""

from __future__ import annotations

import base64
import binascii
import json

from apiserver import errors
from apiserver.api import json_input
from apiserver.errors import quoted
from apiserver.registry.errors import BadRequest

MAX_RESOURCE_VERSION = 2**63 - 1
"""resourceVersions are 64-bit integers (SQLite INTEGERs, etcd revisions)."""
_MAX_CONTINUE_CHARS = 4096
"""Longer than any token a store writes (a resourceVersion, a namespace and a name)."""


def parse_resource_version(text: str) -> int | None:
    """None for "start from the current state" ("" or "0"); else a decimal of at most 64
    bits (checked before conversion, so that no length of digits can make it raise)."""
    if text in ("", "0"):
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 19
            and int(text) <= MAX_RESOURCE_VERSION):
        raise BadRequest(f"invalid resource version {quoted(text[:64])}: must be a "
                         f"decimal integer of at most {MAX_RESOURCE_VERSION}")
    return int(text)


def encode_continue(rv: int, after: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "start": list(after)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """The snapshot and the last key of a token from ``encode_continue``. Tokens come from
    clients: read through json_input (bounded, UTF-8, no lone surrogates) and checked member
    by member; anything else is 400."""
    try:
        if len(token) > _MAX_CONTINUE_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        decoded = json_input.read(raw, what="the continue token").value
        rv, start = decoded["rv"], decoded["start"]
        if (type(rv) is int and 0 < rv <= MAX_RESOURCE_VERSION and isinstance(start, list)
                and len(start) == 2 and all(isinstance(part, str) for part in start)):
            return rv, (start[0], start[1])
    except (ValueError, TypeError, KeyError, binascii.Error, errors.BadRequest):
        pass
    raise BadRequest("the continue token is malformed; list again without it")
