"""JSON from clients, read so that no input raises anything but a ``BadRequest``.

Every body the server reads (pods/notify, Notification create, DeleteOptions) and the
``continue`` token go through ``read``:

- the text must be UTF-8 (Python's ``json.loads`` of bytes would also take UTF-16 and UTF-32,
  which Go's decoder, and so kube-apiserver, refuses);
- nesting is bounded (``MAX_DEPTH``), counted on the text *before* it is decoded: the decoder
  recurses, and a deep enough document would exhaust the stack (``RecursionError``);
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused: they are not JSON;
- an integer that does not fit in 64 bits is read as a float, as Go reads numbers into
  unstructured objects, so that no integer conversion can exceed Python's digit limit and a
  field that wants an integer refuses it (422) instead of seeing a number no field allows; a
  float past the float range reads as infinity, likewise refused by every field;
- a string (a key or a value) holding a lone UTF-16 surrogate (``"\\ud800"``) is refused, naming
  where it is: such a string is not Unicode text, cannot be encoded into a response, a log line
  or the database, and would otherwise surface as a 500 wherever it is echoed;
- keys given twice in one object are reported (``Document.duplicates``, as field paths); the
  last value wins, as in Go, and the caller applies ``fieldValidation``.

``quoted`` and ``field_path`` show user-supplied text in messages: as is when it is printable,
else JSON-escaped in ASCII, so that a message never carries control characters or surrogates.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Any, NoReturn

from apiserver.errors import BadRequest

MAX_DEPTH = 32
"""Deepest nesting of objects and arrays accepted; the deepest field of this API is at 6."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT64_DIGITS = 19
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_MARKS = bytes(set(range(256)) - set(b'"[]{}'))
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""How a surrogate gets into decoded text: UTF-8 cannot encode one, a JSON escape can."""


@dataclass(frozen=True)
class Document:
    """A JSON document as read: its value, and the field paths of keys given more than once
    (in document order)."""

    value: Any
    duplicates: tuple[str, ...] = ()


def read(raw: bytes | str, *, what: str, max_depth: int = MAX_DEPTH) -> Document:
    """``raw`` decoded as JSON; ``what`` names it in messages (e.g. "the request body").

    Raises ``BadRequest`` for anything that is not UTF-8 JSON within the bounds above.
    """
    text = utf8_text(raw, what) if isinstance(raw, bytes) else raw
    depth = nesting_depth(text)
    if depth > max_depth:
        raise BadRequest(f"{what} is nested {depth} levels deep; at most {max_depth} levels of "
                         "objects and arrays are accepted")

    def refuse_constant(name: str) -> NoReturn:
        raise BadRequest(f"{what} is not valid JSON: {name} is not a JSON number; numbers must "
                         "be finite")

    duplicated: list[bool] = []

    def members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) < len(pairs):
            duplicated.append(True)
        return found

    def decode(object_pairs_hook: Any) -> Any:
        try:
            return json.loads(text, parse_int=integer, parse_constant=refuse_constant,
                              object_pairs_hook=object_pairs_hook)
        except ValueError as error:  # JSONDecodeError
            raise BadRequest(f"{what} is not valid JSON: {error}") from None

    value = decode(members)
    if not duplicated and not _SURROGATE_ESCAPE.search(text) and not _SURROGATE.search(text):
        return Document(value)
    # Rare: read again, keeping where each duplicate key and each surrogate is.
    duplicates: list[str] = []
    return Document(_plain(decode(_Members.from_pairs), [], duplicates, what), tuple(duplicates))


def nesting_depth(text: str) -> int:
    """How deeply objects and arrays nest in ``text`` (brackets in strings do not count),
    computed without recursion; for text that is not JSON it is a bound, not exact.

    Each step is one pass of C over the text, none slower than the JSON decoder's (a regular
    expression matching each string took several times as long): without its escaped
    backslashes and quotes, JSON text has a quote only where a string starts or ends."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    marks = unescaped.encode("utf-8", "surrogatepass").translate(None, _NOT_MARKS)
    outside_strings = b"".join(marks.split(b'"')[::2])  # the brackets between quotes go
    opened_or_closed = outside_strings.translate(_STEPS)  # 2 open, 0 close
    return max(accumulate(map(operator.sub, opened_or_closed, repeat(1))), default=0)


def field_path(parts: Sequence[str | int]) -> str:
    """A field path as strict decoding names it (``spec.selector.matchLabels.app``, a list
    index as ``[1]``); a key that is not printable text is shown JSON-escaped."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{as_printable(part)}" if path else as_printable(part)
    return path


def as_printable(text: str) -> str:
    """``text`` as is if it is printable (and not empty), else JSON-escaped (``"\\u0000"``):
    a key in a field path, a value a message shows unquoted."""
    return text if text and text.isprintable() else json.dumps(text)


def utf8_text(raw: bytes, what: str) -> str:
    """``raw`` as UTF-8 text; BadRequest for UTF-16/32, a byte order mark or invalid bytes."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        raise BadRequest(f"{what} is not UTF-8 (it looks like UTF-16 or UTF-32); send JSON "
                         "encoded as UTF-8")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise BadRequest(f"{what} starts with a byte order mark; send UTF-8 without one")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"{what} is not UTF-8: byte {error.start} cannot be decoded; send JSON "
                         "encoded as UTF-8") from None


def integer(text: str) -> int | float:
    """An integer literal: an int within 64 bits, else the nearest float (maybe infinite)."""
    if len(text.lstrip("-")) <= _INT64_DIGITS:
        value = int(text)
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
    return float(text)


class _Members(dict[str, Any]):
    """A decoded object that remembers the keys its text gave more than once."""

    duplicates: list[str]

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> _Members:
        members = cls(pairs)
        members.duplicates = []
        if len(members) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and key not in members.duplicates:
                    members.duplicates.append(key)
                seen.add(key)
        return members


def _plain(value: Any, path: list[str | int], duplicates: list[str], what: str) -> Any:
    """``value`` with plain dicts, its duplicate keys' paths appended to ``duplicates``; raises
    ``BadRequest`` at the first string holding a lone surrogate. Recursion is bounded by the
    depth checked before decoding."""
    if isinstance(value, str):
        _refuse_surrogates(value, path, what, "value")
        return value
    if isinstance(value, list):
        return [_plain(item, [*path, index], duplicates, what)
                for index, item in enumerate(value)]
    if isinstance(value, _Members):
        duplicates += (field_path([*path, key]) for key in value.duplicates)
        plain: dict[str, Any] = {}
        for key, item in value.items():
            _refuse_surrogates(key, [*path, key], what, "field name")
            plain[key] = _plain(item, [*path, key], duplicates, what)
        return plain
    return value


def _refuse_surrogates(text: str, path: list[str | int], what: str, kind: str) -> None:
    found = _SURROGATE.search(text)
    if found is None:
        return
    where = field_path(path) or "the top level"
    raise BadRequest(
        f"{what} is not valid Unicode: the {kind} at {where} holds a lone UTF-16 surrogate "
        f"({json.dumps(found.group())}); send text as valid UTF-8 or JSON escapes of whole "
        "characters")
