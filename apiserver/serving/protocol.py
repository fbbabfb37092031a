"""uvicorn's h11 protocol, extended to hand the TLS client certificate to the ASGI app.

uvicorn does not expose the peer certificate; this protocol reads it once the handshake is done
(asyncio calls connection_made after it) and adds it to every request's scope as
``scope["extensions"]["tls"]["client_cert_der"]`` (DER bytes, or None without a certificate).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def client_cert_der(scope: MutableMapping[str, Any]) -> bytes | None:
    """The verified client certificate of the request's connection, if it presented one."""
    return scope.get("extensions", {}).get("tls", {}).get("client_cert_der")


class PeerCertH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return
        der = ssl_object.getpeercert(binary_form=True)
        app = self.app

        async def with_peer_cert(scope: Any, receive: Any, send: Any) -> None:
            extensions = scope.setdefault("extensions", {})
            extensions["tls"] = {"client_cert_der": der}
            await app(scope, receive, send)

        self.app = with_peer_cert
