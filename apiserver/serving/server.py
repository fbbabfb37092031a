"""Serve an app over HTTPS with uvicorn, and shut down gracefully.

uvicorn handles SIGINT/SIGTERM: it stops accepting connections, lets running requests finish
for up to GRACEFUL_SHUTDOWN_SECONDS, then runs the app's lifespan shutdown. (uvicorn then
re-raises the signal, so cleanup must happen in the lifespan, not after serve() returns.)
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

from apiserver.serving.protocol import PeerCertH11Protocol
from apiserver.serving.tls import ServingTLS

GRACEFUL_SHUTDOWN_SECONDS = 25


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
    """uvicorn, calling `on_shutdown` as shutdown starts: uvicorn waits for open responses
    before the lifespan shutdown, and a watch would otherwise hold it for the whole grace
    period."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)
