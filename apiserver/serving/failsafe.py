"""The last line of defence: an error nobody handled still gets a ``metav1.Status``.

Starlette's own catch-all answers 500 and then re-raises, and uvicorn closes a connection whose
app raised. kube-apiserver's aggregator reuses idle connections for other users' requests, so a
closed connection turned one caller's failure into another caller's ``503 error trying to reach
service: EOF``. This middleware wraps the whole app: it answers a 500 Status, keeps the
connection, logs the traceback under a request id (given in the message, so a user can quote it)
and counts it.

A client that went away before its request was read (``ClientDisconnect``: kube-apiserver
cancelled the proxied request, a caller hung up) is not an error of the server: it is logged as
such, at info, neither counted nor answered (nobody is left to read an answer).
"""

from __future__ import annotations

import logging
import uuid
from typing import Protocol

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apiserver import errors
from apiserver.api import status

log = logging.getLogger(__name__)


class UnexpectedErrors(Protocol):
    def unexpected_error(self) -> None: ...


class FailSafeMiddleware:
    def __init__(self, app: ASGIApp, *, counter: UnexpectedErrors | None = None) -> None:
        self._app = app
        self._counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, receive, tracked_send)
        except ClientDisconnect:
            log.info("client disconnected before its request was read", extra={
                "method": scope.get("method"), "path": scope.get("path"),
                "client": _address(scope.get("client"))})
        except Exception:
            request_id = uuid.uuid4().hex[:16]
            log.exception("unexpected error", extra={"request_id": request_id,
                                                     "method": scope.get("method"),
                                                     "path": scope.get("path")})
            if self._counter is not None:
                self._counter.unexpected_error()
            if started:
                raise  # part of an answer is out: only closing the connection can end it
            error = errors.internal_error(
                f"an unexpected error occurred (request id {request_id}); see the server log")
            await status.response(error)(scope, receive, send)


def _address(client: object) -> str:
    """host:port of the ASGI scope's ``client`` ("" when the server does not know it)."""
    if isinstance(client, (tuple, list)) and len(client) == 2:
        return f"{client[0]}:{client[1]}"
    return ""
