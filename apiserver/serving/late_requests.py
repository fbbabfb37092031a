"""Requests that arrive after the shutdown delay: 429 with Retry-After and Connection: close.

As k8s.io/apiserver's ``WithRetryAfter`` (``--shutdown-send-retry-after``): once the delay is
over the server no longer listens, but a client may still send a request on a keep-alive
connection it opened before. Such a request is answered before anything of it runs (it changed
nothing, so a retry is always safe): a ``TooManyRequests`` Status with ``Retry-After`` and
``Connection: close``, so the client drops the connection and retries on a new one, which the
load balancer sends to another replica. client-go retries any verb so answered, POST included,
when it can send the body again. The probes (``HEALTH_PATHS``) are still answered.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from apiserver import errors
from apiserver.api import status
from apiserver.serving.health import HEALTH_PATHS, Draining

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1
"""The Retry-After of a late request: by then the load balancer has taken this replica out (its
/readyz failed for the whole delay), so a retry a second later reaches another one."""


class LateRequestsMiddleware:
    def __init__(self, app: ASGIApp, *, draining: Draining) -> None:
        self._app = app
        self._draining = draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or not self._draining.late
                or scope.get("path") in HEALTH_PATHS):
            await self._app(scope, receive, send)
            return
        log.info("refused a request that arrived after the shutdown delay", extra={
            "method": scope.get("method"), "path": scope.get("path"),
            "retry_after_seconds": RETRY_AFTER_SECONDS})
        response = status.response(errors.too_many_requests(
            "the server is shutting down and starts no new request; this one was not started, "
            f"so send it again after {RETRY_AFTER_SECONDS} s (Retry-After) on a new "
            "connection: another replica serves it", RETRY_AFTER_SECONDS))
        response.headers["Connection"] = "close"
        await response(scope, receive, send)
