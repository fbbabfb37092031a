"""Authentication and authorization of every request, before routing and body parsing.

An ASGI middleware: it strips identity headers, authenticates the caller, derives the request's
authorization attributes, refuses repeated single-valued query parameters (400) and names in
the path that no object can have (404, see `path_names`), and asks the authorizer. Only allowed
requests reach the app, with ``request.state.user`` (UserInfo) and ``request.state.attributes``
set. /healthz, /livez and /readyz skip these steps, so probes never depend on kube-apiserver.

Every request it sees ends here too: logged (polls, ``request_labels.POLLED_PATHS``, at debug,
the others at info) and, given `requests`, counted and timed (``apiserver_request_*``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apiserver import errors
from apiserver.api import status
from apiserver.api.query import check_single_values
from apiserver.authn.authenticator import (
    AuthenticationFailed,
    Authenticator,
    Headers,
    TrustNotLoaded,
)
from apiserver.authn.user import UserInfo, anonymous
from apiserver.authz.attributes import RequestAttributes, request_attributes
from apiserver.authz.sar import ALWAYS_ALLOWED_PATHS, Authorizer
from apiserver.errors import APIError
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.serving.path_names import check_path_names
from apiserver.serving.protocol import client_cert_der
from apiserver.serving.request_labels import POLLED_PATHS, request_labels

log = logging.getLogger(__name__)

NO_ANSWER_CODE = 500
"""The code a request is counted with when the app raised before answering (the fail-safe
middleware answers it with a 500 Status)."""


class RequestMetrics(Protocol):
    """What the middleware needs of ``apiserver.serving.metrics.Metrics``."""

    def request_finished(self, verb: str, resource: str, subresource: str, code: int,
                         duration_seconds: float) -> None: ...


class AccessControlMiddleware:
    def __init__(self, app: ASGIApp, *, authenticator: Authenticator, authorizer: Authorizer,
                 requests: RequestMetrics | None = None):
        self._app = app
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        if scope["type"] != "http":
            # WebSocket is not served (uvicorn runs with ws="none"); never let it bypass this.
            await send({"type": "websocket.close", "code": 1008})
            return
        started = time.monotonic()
        headers = scope["headers"]
        scope["headers"] = self._authenticator.strip_identity_headers(headers)
        attributes = request_attributes(scope["method"], scope["path"],
                                        scope["query_string"].decode("latin-1"))
        user: UserInfo | None = None
        try:
            if scope["path"] in ALWAYS_ALLOWED_PATHS:
                user = anonymous()
            else:
                user = await self._authenticate(headers, client_cert_der(scope))
                check_single_values(scope["query_string"].decode("latin-1"))
                check_path_names(attributes, scope.get("raw_path"))
                await self._authorize(user, attributes)
        except APIError as error:
            await status.response(error)(scope, receive, send)
            self._finished(scope, user, attributes, error.code, started, error.message)
            return

        scope.setdefault("state", {}).update(user=user, attributes=attributes)
        code = 0

        async def send_with_code(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, send_with_code)
        except Exception:
            self._finished(scope, user, attributes, code or NO_ANSWER_CODE, started,
                           "unexpected error")
            raise
        self._finished(scope, user, attributes, code, started)

    async def _authenticate(self, headers: Headers, cert_der: bytes | None) -> UserInfo:
        """The request's user, or an APIError: 401, 503, or 500 if the TokenReview failed."""
        try:
            return await self._authenticator.authenticate(headers, cert_der)
        except AuthenticationFailed as error:
            log.info("authentication failed", extra={"error": str(error)})
            raise status.unauthorized() from None
        except TrustNotLoaded:
            raise errors.service_unavailable(
                "authentication is not ready: the trust material in "
                "kube-system/extension-apiserver-authentication has not been loaded yet"
            ) from None
        except KubeUnavailable as error:
            raise _unavailable("authenticate", error) from None
        except KubeRejected as error:
            raise errors.internal_error(f"TokenReview failed: {error}") from None

    async def _authorize(self, user: UserInfo, attributes: RequestAttributes) -> None:
        """Return if allowed, else raise an APIError: 403, 503, or 500 if the review failed."""
        try:
            decision = await self._authorizer.authorize(user, attributes)
        except KubeUnavailable as error:
            raise _unavailable("authorize", error) from None
        except KubeRejected as error:
            raise errors.internal_error(f"SubjectAccessReview failed: {error}") from None
        if not decision.allowed:
            raise status.forbidden_request(user.name, attributes, decision.reason)

    def _finished(self, scope: Scope, user: UserInfo | None, attributes: RequestAttributes,
                  code: int, started: float, error: str = "") -> None:
        """Log the answered request and count it."""
        duration = time.monotonic() - started
        if self._requests is not None:
            labels = request_labels(attributes)
            self._requests.request_finished(labels.verb, labels.resource, labels.subresource,
                                            code, duration)
        fields: dict[str, Any] = {
            "method": scope["method"],
            "path": scope["path"],
            "verb": attributes.verb,
            "user": user.name if user else "",
            "code": code,
            "duration_ms": round(duration * 1000, 1),
        }
        if error:
            fields["error"] = error
        level = logging.DEBUG if scope["path"] in POLLED_PATHS else logging.INFO
        log.log(level, "request", extra=fields)


def _unavailable(step: str, error: KubeUnavailable) -> APIError:
    log.warning("kube-apiserver unavailable", extra={"step": step, "error": str(error)})
    return errors.service_unavailable(
        f"cannot {step} the request: kube-apiserver is unavailable ({error})")
