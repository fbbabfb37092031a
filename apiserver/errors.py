"""The server's one error hierarchy, in Kubernetes' terms but without HTTP.

Every error the server raises on purpose is an ``APIError``: a kind (the class, with the
``metav1.StatusReason`` and code of its Kubernetes equivalent), a message worded as
kube-apiserver words it, and the details a client can act on (the resource, the name, field
causes, a retry hint). Layers raise the kind that says what went wrong (the registry
``NotFound``, the notifier ``PodNotFound``, the kube client ``KubeUnavailable``, ...); only the
HTTP edge (``apiserver.api.status``) turns one into a ``metav1.Status`` response.

This module imports nothing of the app, so every layer can use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Cause:
    """One field-level problem: `reason` is e.g. FieldValueInvalid, FieldValueRequired."""

    reason: str
    message: str
    field: str = ""

    def as_dict(self) -> dict[str, str]:
        """The ``StatusCause``, with empty fields left out as Go's omitempty does."""
        return {key: value for key, value in
                (("reason", self.reason), ("message", self.message), ("field", self.field))
                if value}


class APIError(Exception):
    """Base of every deliberate error. ``reason`` and ``code`` are those of ``metav1.Status``."""

    reason: ClassVar[str] = "InternalError"
    code: ClassVar[int] = 500

    def __init__(self, message: str, *, group: str = "", resource: str = "", name: str = "",
                 causes: Sequence[Cause] = (), retry_after_seconds: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.group = group
        self.resource = resource
        self.name = name
        self.causes = tuple(causes)
        self.retry_after_seconds = retry_after_seconds

    @property
    def details(self) -> dict[str, Any]:
        """``metav1.StatusDetails``, empty fields left out (``kind`` holds the resource, as
        kube-apiserver fills it)."""
        details: dict[str, Any] = {key: value for key, value in
                                   (("name", self.name), ("group", self.group),
                                    ("kind", self.resource)) if value}
        if self.causes:
            details["causes"] = [cause.as_dict() for cause in self.causes]
        if self.retry_after_seconds:
            details["retryAfterSeconds"] = self.retry_after_seconds
        return details


class BadRequest(APIError):
    reason, code = "BadRequest", 400


class Unauthorized(APIError):
    reason, code = "Unauthorized", 401


class Forbidden(APIError):
    reason, code = "Forbidden", 403


class NotFound(APIError):
    reason, code = "NotFound", 404


class MethodNotAllowed(APIError):
    reason, code = "MethodNotAllowed", 405


class NotAcceptable(APIError):
    reason, code = "NotAcceptable", 406


class AlreadyExists(APIError):
    reason, code = "AlreadyExists", 409


class Conflict(APIError):
    reason, code = "Conflict", 409


class Gone(APIError):
    """A resourceVersion or continue token older than the retained history."""

    reason, code = "Expired", 410


class RequestEntityTooLarge(APIError):
    reason, code = "RequestEntityTooLarge", 413


class UnsupportedMediaType(APIError):
    reason, code = "UnsupportedMediaType", 415


class Invalid(APIError):
    reason, code = "Invalid", 422


class TooManyRequests(APIError):
    reason, code = "TooManyRequests", 429


class InternalError(APIError):
    reason, code = "InternalError", 500


class ServiceUnavailable(APIError):
    reason, code = "ServiceUnavailable", 503


class Timeout(APIError):
    reason, code = "Timeout", 504


class StartupError(Exception):
    """A misconfiguration that keeps the server from starting (no kubeconfig, an unusable
    serving certificate, the storage CRDs missing, the trust ConfigMap unreadable, options that
    do not fit together). Its message is one line naming what is wrong and what to do; the
    entry point prints it and exits 1, without a traceback. Not an ``APIError``: no request
    is being answered."""


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quoted(value: str) -> str:
    """`value` in double quotes, escaped as Go's ``%q`` escapes it (quote and backslash, and
    every character that is not printable: ``\\n``, ``\\x00``, ``\\ud800``), so a message
    that names it holds no control character or lone surrogate."""
    out = []
    for char in value:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def qualified(resource: str, group: str) -> str:
    """``<resource>.<group>`` (just the resource for the core group), as messages name it."""
    return f"{resource}.{group}" if group else resource


def bad_request(message: str) -> BadRequest:
    return BadRequest(message)


def forbidden_message(resource: str, group: str, name: str, why: str) -> str:
    """kube-apiserver's wording of a 403 for `resource` in `group` (both may be empty)."""
    if not resource and not group:
        return f"forbidden: {why}"
    if not name:
        return f"{qualified(resource, group)} is forbidden: {why}"
    return f"{qualified(resource, group)} {quoted(name)} is forbidden: {why}"


def invalid_message(kind: str, group: str, name: str, causes: Sequence[Cause]) -> str:
    """kube-apiserver's wording of a 422 (apimachinery ``NewInvalid``): ``<Kind>.<group>
    "<name>" is invalid: <field>: <problem>``, several causes as ``[a, b]``.

    A cause's message is only the problem (``Invalid value: 0: must be ...``) and its field is
    apart, as in Go's ``StatusCause``: kubectl prints ``<field>: <message>`` for each cause, so
    a message that repeated the field would print it twice."""
    messages = [f"{cause.field}: {cause.message}" if cause.field else cause.message
                for cause in causes]
    summary = messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
    return f'{qualified(kind, group)} "{name}" is invalid: {summary}'


def forbidden(resource: str, group: str, name: str, why: str) -> Forbidden:
    return Forbidden(forbidden_message(resource, group, name, why),
                     group=group, resource=resource, name=name)


def not_found(resource: str, group: str, name: str) -> NotFound:
    return NotFound(f'{qualified(resource, group)} "{name}" not found',
                    group=group, resource=resource, name=name)


def invalid(kind: str, group: str, name: str, causes: Sequence[Cause]) -> Invalid:
    """A 422 naming the object by kind (``details.kind`` is the kind, as kube-apiserver fills
    it for Invalid), e.g. ``invalid("PodNotifier", GROUP, "run-1", causes)``."""
    return Invalid(invalid_message(kind, group, name, causes),
                   group=group, resource=kind, name=name, causes=causes)


def request_entity_too_large(message: str) -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"Request entity too large: {message}")


def unsupported_media_type(accepted: Sequence[str]) -> UnsupportedMediaType:
    return UnsupportedMediaType(
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted))


def not_acceptable(accepted: Sequence[str]) -> NotAcceptable:
    return NotAcceptable(f"only the following media types are accepted: {', '.join(accepted)}")


def too_many_requests(message: str, retry_after_seconds: int) -> TooManyRequests:
    return TooManyRequests(message, retry_after_seconds=retry_after_seconds)


def internal_error(message: str) -> InternalError:
    return InternalError(f"Internal error occurred: {message}", causes=[Cause("", message)])


def service_unavailable(message: str) -> ServiceUnavailable:
    return ServiceUnavailable(message)
