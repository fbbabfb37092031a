"""Serve an app over HTTPS with uvicorn, and shut down gracefully.

On the first SIGINT/SIGTERM the server first drains for the shutdown delay
(--shutdown-delay-duration, as k8s.io/apiserver's): it keeps serving, /readyz fails, and every
response carries ``Connection: close``, so clients and load balancers move their connections to
other replicas without a request failing. Then uvicorn stops accepting connections, lets running
requests finish for up to GRACEFUL_SHUTDOWN_SECONDS, and runs the app's lifespan shutdown.
(uvicorn then re-raises the signal, so cleanup must happen in the lifespan, not after serve()
returns.) A second signal during the delay ends it at once.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from apiserver.serving.health import Draining
from apiserver.serving.protocol import PeerCertH11Protocol
from apiserver.serving.tls import ServingTLS

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_SECONDS = 25
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
    )


class Server(uvicorn.Server):
    """uvicorn, draining for `shutdown_delay` seconds after the first signal (see the module
    docstring), and calling `on_shutdown` as shutdown starts: uvicorn waits for open responses
    before the lifespan shutdown, and a watch would otherwise hold it for the whole grace
    period."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None], *,
                 draining: Draining, shutdown_delay: float = 0.0) -> None:
        super().__init__(config)
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
        self._on_shutdown()
        await super().shutdown(sockets)
