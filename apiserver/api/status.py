"""The HTTP edge of errors: ``metav1.Status`` bodies and responses for ``APIError``s.

Layers below raise ``apiserver.errors`` kinds; this module is the one place that turns them
into what kube-apiserver would answer: the Status body, its HTTP code, and for 429/503 with a
retry hint a Retry-After header. It also words the errors only the edge raises (routing,
authorization denials).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

from apiserver.api.resources import GROUP
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.errors import (
    AlreadyExists,
    APIError,
    Conflict,
    Forbidden,
    Invalid,
    MethodNotAllowed,
    NotFound,
    Unauthorized,
    forbidden,
)


def status_body(error: APIError) -> dict[str, Any]:
    """The ``metav1.Status`` of `error`."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
        "reason": error.reason,
        "code": error.code,
    }
    details = error.details
    if details or isinstance(error, _ALWAYS_DETAILED):
        body["details"] = details
    return body


_ALWAYS_DETAILED = (NotFound, MethodNotAllowed, Forbidden, Conflict, AlreadyExists, Invalid)
"""Kinds kube-apiserver answers with a ``details`` object even when it is empty."""


class StatusResponse(JSONResponse):
    """A Status body in ASCII JSON: whatever a message quotes (a lone surrogate, a control
    character) is escaped, so rendering an error can never fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def response(error: APIError) -> JSONResponse:
    headers = {"X-Content-Type-Options": "nosniff"}
    if error.retry_after_seconds:
        headers["Retry-After"] = str(error.retry_after_seconds)
    return StatusResponse(status_body(error), status_code=error.code, headers=headers)


def unauthorized() -> Unauthorized:
    return Unauthorized("Unauthorized")


def forbidden_request(user_name: str, attributes: RequestAttributes, reason: str = ""
                      ) -> Forbidden:
    """The 403 kube-apiserver answers when the authorizer denies a request."""
    message = denial_message(user_name, attributes, reason)
    if _is_namespace_notify(attributes):
        message += NOTIFY_ACCESS_HINT
    resource = attributes.resource if attributes.resource_request else ""
    return forbidden(resource, attributes.api_group, attributes.name, message)


NOTIFY_ACCESS_HINT = (
    '. Check access with "kubectl notify can-i POD" or "kubectl auth can-i create '
    'pods.notifier.x-k8s.io --subresource=notify" (plain "pods/notify" names the core pods)')
"""Appended to the denial of pods/notify in a whole namespace: how to check it, with kubectl's
own check naming the group (docs/api.md, "Checking who may notify")."""


def _is_namespace_notify(attributes: RequestAttributes) -> bool:
    """``create pods/notify`` without a pod name: the check a Notification's creator must pass.

    A request to one pod's notify names the pod, and kube-apiserver authorizes it before it
    proxies it here: users see kube-apiserver's 403, which ours must equal word for word (a
    caller of this server's own port gets the same). Only the namespace-wide check is this
    server's alone, so only its 403 carries the hint."""
    return (attributes.resource_request and attributes.api_group == GROUP
            and attributes.resource == "pods" and attributes.subresource == "notify"
            and not attributes.name)


def path_not_found() -> NotFound:
    return NotFound("the server could not find the requested resource")


def method_not_allowed() -> MethodNotAllowed:
    return MethodNotAllowed("the server does not allow this method on the requested resource")
