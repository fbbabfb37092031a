"""Field errors: one invalid field of a request, worded as Kubernetes' ``field.Error``.

A ``FieldError`` is the ``metav1.StatusCause`` of a 422 (``as_cause``) plus the offending value,
so that callers (admission, the fan-out) can say what was wrong without parsing messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from apiserver.errors import Cause

_SHOWN_VALUE_CHARS = 120


class CauseReason(StrEnum):
    """``metav1.CauseType`` values used for field errors."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    NOT_SUPPORTED = "FieldValueNotSupported"
    DUPLICATE = "FieldValueDuplicate"


@dataclass(frozen=True)
class FieldError:
    """One invalid field: a ``metav1.StatusCause`` plus the offending value.

    ``message`` follows the Kubernetes ``field.Error`` body (``Invalid value: "x": ...``) and
    says what to change.
    """

    reason: CauseReason
    field: str
    value: Any
    message: str

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls(CauseReason.INVALID, field, value, f"Invalid value: {show(value)}: {detail}")

    @classmethod
    def required(cls, field: str, detail: str) -> FieldError:
        return cls(CauseReason.REQUIRED, field, None, f"Required value: {detail}")

    @classmethod
    def not_supported(
        cls, field: str, value: Any, supported: Iterable[str], detail: str = "", *,
        quoted: bool = True,
    ) -> FieldError:
        """``quoted``: list the supported values as JSON strings (the annotation's wording) or
        bare (the request bodies' wording)."""
        listed = ", ".join(json.dumps(item) if quoted else item for item in supported)
        prefix = f"{detail}; " if detail else ""
        return cls(
            CauseReason.NOT_SUPPORTED,
            field,
            value,
            f"Unsupported value: {show(value)}: {prefix}supported values: {listed}",
        )

    @classmethod
    def duplicate(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls(
            CauseReason.DUPLICATE, field, value, f"Duplicate value: {show(value)}: {detail}"
        )

    def as_cause(self) -> Cause:
        """The ``metav1.StatusCause`` for ``details.causes``: the problem as the message and the
        field apart, as Go's ``field.Error.ErrorBody`` fills it (the Status message, see
        ``errors.invalid_message``, joins them)."""
        return Cause(self.reason.value, self.message, self.field)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def show(value: Any) -> str:
    """A value as a message quotes it: JSON, shortened past 120 characters; in ASCII escapes
    if it holds characters that are not printable (surrogates among them: a message must be
    encodable and safe to print). Only as much of the value is encoded as is shown: a body's
    value may be a list of a million items."""
    shown = _json_start(value, ascii_only=False)
    if not shown.isprintable():
        shown = _json_start(value, ascii_only=True)
    if len(shown) > _SHOWN_VALUE_CHARS:
        return shown[: _SHOWN_VALUE_CHARS - 3] + "..."
    return shown


def _json_start(value: Any, *, ascii_only: bool) -> str:
    """The JSON text of ``value``, or its start when that is longer than a message shows."""
    shown = ""
    for chunk in json.JSONEncoder(ensure_ascii=ascii_only).iterencode(value):
        shown += chunk
        if len(shown) > _SHOWN_VALUE_CHARS:
            break
    return shown
