"""metav1.Status error bodies, worded like kube-apiserver's (k8s.io/apimachinery errors).

Raise a `StatusError` from a handler; the app renders it with its code and, for 429/503 with a
retry hint, a Retry-After header.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from apiserver.authz.attributes import RequestAttributes


@dataclass(frozen=True)
class Cause:
    """One field-level problem: `reason` is e.g. FieldValueInvalid, FieldValueRequired."""

    reason: str
    message: str
    field: str = ""


class StatusError(Exception):
    def __init__(self, code: int, reason: str, message: str, *,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if details is not None:
            self.status["details"] = details

    def response(self) -> JSONResponse:
        headers = {"X-Content-Type-Options": "nosniff"}
        retry_after = self.status.get("details", {}).get("retryAfterSeconds")
        if retry_after:
            headers["Retry-After"] = str(retry_after)
        return JSONResponse(self.status, status_code=self.code, headers=headers)


def _details(*, group: str = "", kind: str = "", name: str = "",
             causes: Sequence[Cause] = (), retry_after_seconds: int = 0) -> dict[str, Any]:
    """StatusDetails with empty fields left out, as Go's omitempty does."""
    details: dict[str, Any] = {"name": name, "group": group, "kind": kind}
    details = {key: value for key, value in details.items() if value}
    if causes:
        details["causes"] = [
            {key: value for key, value in
             (("reason", c.reason), ("message", c.message), ("field", c.field)) if value}
            for c in causes
        ]
    if retry_after_seconds:
        details["retryAfterSeconds"] = retry_after_seconds
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def forbidden(resource: str, group: str, name: str, message: str) -> StatusError:
    """403 for `resource` in `group` (both may be empty): `message` says why."""
    if not resource and not group:
        text = f"forbidden: {message}"
    elif not name:
        text = f"{_qualified(resource, group)} is forbidden: {message}"
    else:
        text = f'{_qualified(resource, group)} "{name}" is forbidden: {message}'
    return StatusError(403, "Forbidden", text,
                       details=_details(group=group, kind=resource, name=name))


def forbidden_request(user_name: str, attributes: RequestAttributes, reason: str = ""
                      ) -> StatusError:
    """The 403 kube-apiserver answers when the authorizer denies a request."""
    if not attributes.resource_request:
        message = f'User "{user_name}" cannot {attributes.verb} path "{attributes.path}"'
    else:
        resource = attributes.resource
        if attributes.subresource:
            resource = f"{resource}/{attributes.subresource}"
        message = (f'User "{user_name}" cannot {attributes.verb} resource "{resource}" '
                   f'in API group "{attributes.api_group}"')
        if attributes.namespace:
            message += f' in the namespace "{attributes.namespace}"'
        else:
            message += " at the cluster scope"
    message = message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if reason:
        message = f"{message}: {reason}"
    resource = attributes.resource if attributes.resource_request else ""
    return forbidden(resource, attributes.api_group, attributes.name, message)


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                       details=_details(group=group, kind=resource, name=name))


def path_not_found() -> StatusError:
    return StatusError(404, "NotFound", "the server could not find the requested resource",
                       details={})


def method_not_allowed() -> StatusError:
    return StatusError(405, "MethodNotAllowed",
                       "the server does not allow this method on the requested resource",
                       details={})


def not_acceptable(accepted: Sequence[str]) -> StatusError:
    return StatusError(406, "NotAcceptable",
                       f"only the following media types are accepted: {', '.join(accepted)}")


def conflict(resource: str, group: str, name: str, message: str) -> StatusError:
    return StatusError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {message}',
        details=_details(group=group, kind=resource, name=name),
    )


def request_entity_too_large(message: str) -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def unsupported_media_type(accepted: Sequence[str]) -> StatusError:
    return StatusError(
        415, "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def invalid(kind: str, group: str, name: str, causes: Sequence[Cause]) -> StatusError:
    """422: each cause's message is the full ``<field>: <problem>`` text, as in Go."""
    messages = [cause.message for cause in causes]
    summary = messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
    return StatusError(422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {summary}',
                       details=_details(group=group, kind=kind, name=name, causes=causes))


def too_many_requests(message: str, retry_after_seconds: int) -> StatusError:
    return StatusError(429, "TooManyRequests", message,
                       details=_details(retry_after_seconds=retry_after_seconds))


def internal_error(message: str) -> StatusError:
    return StatusError(500, "InternalError", f"Internal error occurred: {message}",
                       details=_details(causes=[Cause("", message)]))



def service_unavailable(message: str) -> StatusError:
    return StatusError(503, "ServiceUnavailable", message)
