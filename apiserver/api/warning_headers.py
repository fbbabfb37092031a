"""``Warning`` response headers, as kube-apiserver sends them (RFC 7234 warn-code 299).

kubectl prints each as ``Warning: <text>``. A header must be printable ASCII, and the text may
hold a client's field names, so anything else in it is written as a JSON ``\\u`` escape
(four hex digits).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from starlette.responses import Response

WARNING = "Warning"
R = TypeVar("R", bound=Response)


def warning_header(text: str) -> str:
    """``299 - "<text>"``: the text as a quoted-string of printable ASCII."""
    escaped = "".join(
        character if " " <= character <= "~" else f"\\u{ord(character):04x}"
        for character in text.replace("\\", "\\\\").replace('"', '\\"'))
    return f'299 - "{escaped}"'


def add_warnings(response: R, warnings: Iterable[str]) -> R:
    """``response`` with one Warning header per text of ``warnings``, in order."""
    for text in warnings:
        response.headers.append(WARNING, warning_header(text))
    return response
