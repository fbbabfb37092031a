"""Serve an app over HTTPS with uvicorn, and shut down gracefully.

On the first SIGINT/SIGTERM the server drains as k8s.io/apiserver's GenericAPIServer does
(docs/high-availability.md, "Stopping a replica without failing a request"):

1. For the shutdown delay (--shutdown-delay-duration) it keeps listening and serving, /readyz
   fails, and every response carries ``Connection: close``: load balancers take the replica out,
   and each connection a client uses is closed by the client's own choice after its answer.
2. Then it stops listening ("not accepting new requests"). A request that still arrives on an
   open connection gets 429 with Retry-After and ``Connection: close``
   (``serving.late_requests``); requests running go on. An idle keep-alive connection (idle
   since before the delay: every one used during it was closed after its answer), and one whose
   running answer began before the delay (a watch the shutdown ends: no ``Connection: close``)
   once that answer is out, is given LATE_IDLE_SECONDS more for a request, which gets that
   429, before it is closed: closing an idle connection fails a request the client sends on it
   at that moment (Go does not retry a POST on it: "http: server closed idle connection"), and a
   connection idle that long is the least likely to be picked.
3. Once no connection is left (or GRACEFUL_SHUTDOWN_SECONDS have passed: running requests are
   cancelled) the app's lifespan shutdown runs. (uvicorn then re-raises the signal, so cleanup
   must happen in the lifespan, not after serve() returns.)

A second signal during the delay ends it at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from apiserver.serving.health import Draining
from apiserver.serving.protocol import PeerCertH11Protocol
from apiserver.serving.tls import ServingTLS

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_SECONDS = 25
KEEP_ALIVE_SECONDS = 120
"""How long an idle keep-alive connection is kept open in normal serving: longer than the idle
timeout of kube-apiserver's clients (Go's 90 s, which k8s.io/apimachinery's transports keep), so
that the aggregator, not this server, closes an idle connection, and never while it sends a
request on it (uvicorn's 5 s made the server close connections the aggregator was about to
reuse)."""
LATE_IDLE_SECONDS = 2.0
"""After the shutdown delay, how long an idle connection is kept for a late request (answered
429) before it is closed."""
_CLOSE = (b"connection", b"close")


def uvicorn_config(app: FastAPI, tls: ServingTLS, host: str, port: int) -> uvicorn.Config:
    """HTTPS with the peer-certificate protocol and the reloadable TLS context."""

    def ssl_context(config: uvicorn.Config, default: Callable[[], ssl.SSLContext]
                    ) -> ssl.SSLContext:
        return tls.context

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=PeerCertH11Protocol,
        ws="none",
        lifespan="auto",
        ssl_context_factory=ssl_context,
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


class Server(uvicorn.Server):
    """uvicorn, draining for `shutdown_delay` seconds after the first signal (see the module
    docstring), and calling `on_shutdown` as shutdown starts: uvicorn waits for open responses
    before the lifespan shutdown, and a watch would otherwise hold it for the whole grace
    period."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None], *,
                 draining: Draining, shutdown_delay: float = 0.0,
                 late_idle_seconds: float = LATE_IDLE_SECONDS) -> None:
        super().__init__(config)
        self._late_idle_seconds = late_idle_seconds
        self._on_shutdown = on_shutdown
        self._draining = draining
        self._shutdown_delay = shutdown_delay
        self._signal: tuple[int, FrameType | None] | None = None
        self._drain_until = 0.0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._shutdown_delay > 0 and self._signal is None and not self.should_exit:
            self._signal = (sig, frame)
            self._drain_until = time.monotonic() + self._shutdown_delay
            self._draining.begin()
            log.info("draining before shutdown", extra={
                "signal": sig, "shutdown_delay_seconds": self._shutdown_delay})
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        should_exit = await super().on_tick(counter)
        if self._signal is not None and not self.should_exit:
            if _CLOSE not in self.server_state.default_headers:
                self.server_state.default_headers = [*self.server_state.default_headers, _CLOSE]
            if time.monotonic() >= self._drain_until:
                super().handle_exit(*self._signal)
        return should_exit

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, but an idle connection is closed LATE_IDLE_SECONDS later instead
        of at once, and late requests are refused (see the module docstring)."""
        self._on_shutdown()
        self._draining.stop_accepting()
        log.info("shutting down: not accepting new requests", extra={
            "connections": len(self.server_state.connections)})
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            _close_when_done_or_idle(connection, self._late_idle_seconds)
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                await self._wait_tasks_to_complete()
        except TimeoutError:
            log.error("graceful shutdown timed out: cancelling the requests still running",
                      extra={"requests": len(self.server_state.tasks),
                             "timeout_seconds": self.config.timeout_graceful_shutdown})
            for task in self.server_state.tasks:
                task.cancel(msg="graceful shutdown timed out")
        if not self.force_exit:
            await self.lifespan.shutdown()


def _close_when_done_or_idle(connection: object, idle_seconds: float) -> None:
    """Close the connection once it has been idle for `idle_seconds` (its keep-alive timeout,
    from now on): at once if idle now (or never used), else after its running request's answer.

    A running request is not made to close its connection after its answer: an answer begun
    before the delay (a watch that the shutdown ends) carries no ``Connection: close``, so the
    client takes the connection back into its pool and may send its next request on it at once;
    that request gets the late 429 instead of a closed connection."""
    if not isinstance(connection, H11Protocol):
        connection.shutdown()  # type: ignore[attr-defined]
        return
    connection.timeout_keep_alive = idle_seconds  # type: ignore[assignment]
    if connection.cycle is not None and not connection.cycle.response_complete:
        return
    if connection.timeout_keep_alive_task is not None:
        connection.timeout_keep_alive_task.cancel()
    connection.timeout_keep_alive_task = connection.loop.call_later(
        idle_seconds, connection.timeout_keep_alive_handler)
