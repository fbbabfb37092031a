"""TLS session resumption for the connections this server opens to kube-apiserver.

Every exec opens a new WebSocket connection to kube-apiserver, and each paid a full TLS
handshake: the server's certificate chain sent, parsed and verified, and a signature made and
checked, on both sides (the profile of a replica under the bench: most of an exec's set-up). A
resumed handshake (TLS 1.3 with a pre-shared key from a session ticket, and a new (EC)DHE
exchange: RFC 8446, 2.2) skips that. Python's ``ssl`` offers a saved session only through
``SSLContext.wrap_bio``'s `session` argument, which asyncio (and so websockets and httpcore
above it) never passes: ``ResumingContext`` passes the session of the last full handshake with
the same server name (``remember``), to every later connection (kube-apiserver, like any Go
server, accepts a ticket more than once). A server that does not accept it makes a full
handshake, whose session is offered from then on; a session only stands for the checks this
same context already made. A resumed connection's own session is not kept: replacing the
offered session with each one kept about 6 KB per connection that OpenSSL never freed (12 MiB
over 2000 connections, 28 MiB of a 5000-pod fan-out's peak).
"""

from __future__ import annotations

import ssl
from typing import Any


class ResumingContext(ssl.SSLContext):
    """A client ``SSLContext`` that offers each server name the session remembered for it."""

    def __init__(self, protocol: int) -> None:
        self.sessions: dict[str, ssl.SSLSession] = {}
        """Server name -> the session with a ticket of the last full handshake with it."""

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
                 server_side: bool = False, server_hostname: str | bytes | None = None,
                 session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        if session is None and not server_side and isinstance(server_hostname, str):
            session = self.sessions.get(server_hostname)
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)


def client_context(cafile: str | None = None, *, verify: bool = True) -> ResumingContext:
    """What ``ssl.create_default_context(cafile=...)`` makes, as a ``ResumingContext``: server
    certificates verified against `cafile` (the system's roots without one) and their names
    checked; with `verify` False, neither (a kubeconfig's ``insecure-skip-tls-verify``)."""
    context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and names
    if cafile:
        context.load_verify_locations(cafile)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def remember(context: Any, ssl_object: Any) -> bool:
    """After a connection of `context` brought data: unless it was itself resumed, keep its
    session for the next connections to the same server name (only a session with a ticket
    can be resumed: a TLS 1.3 server sends it after the handshake). Returns whether this
    connection was resumed; False for anything that is not a TLS connection of a
    ``ResumingContext``."""
    if not isinstance(context, ResumingContext) or not isinstance(ssl_object, ssl.SSLObject):
        return False
    if ssl_object.session_reused:
        return True
    session, name = ssl_object.session, ssl_object.server_hostname
    if session is not None and session.has_ticket and name:
        context.sessions[name] = session
    return False
