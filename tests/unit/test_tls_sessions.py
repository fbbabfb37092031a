"""TLS session resumption (apiserver/kube/tls_sessions.py) against a real TLS 1.3 server on
loopback: a second connection to the same name resumes, one to another name does not, and a
context that was never given a session makes full handshakes."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apiserver.kube.tls_sessions import client_context, remember
from certs.authority import issue, new_ca


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[int, str]]:
    """A TLS server on loopback for the names `kube` and `other` (its CA file's path), which
    greets each connection with a line."""
    ca = new_ca("test-ca")
    leaf = issue(ca, "kube", dns_names=("kube", "other"), server=True)
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    leaf.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        await reader.read()
        writer.close()

    listening = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=context)
    async with listening:
        yield listening.sockets[0].getsockname()[1], str(tmp_path / "ca.crt")


async def connect(port: int, context: ssl.SSLContext, name: str) -> bool:
    """One connection that reads the greeting; whether it was resumed (``remember``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname=name)
    try:
        assert await reader.readline() == b"hello\n"
        return remember(context, writer.get_extra_info("ssl_object"))
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_connection_resumes_the_session_of_the_one_before(
        server: tuple[int, str]) -> None:
    port, cafile = server
    context = client_context(cafile)
    assert [await connect(port, context, "kube") for _ in range(3)] == [False, True, True]
    assert list(context.sessions) == ["kube"]


async def test_resumed_connections_keep_offering_the_session_of_the_full_handshake(
        server: tuple[int, str]) -> None:
    """Replacing it with each resumed connection's own session kept about 6 KB per
    connection that OpenSSL never freed (12 MiB over 2000 execs)."""
    port, cafile = server
    context = client_context(cafile)
    assert await connect(port, context, "kube") is False
    first = context.sessions["kube"]
    assert [await connect(port, context, "kube") for _ in range(3)] == [True, True, True]
    assert context.sessions["kube"] is first


async def test_a_session_is_offered_only_to_the_name_it_came_from(
        server: tuple[int, str]) -> None:
    port, cafile = server
    context = client_context(cafile)
    assert await connect(port, context, "kube") is False
    assert await connect(port, context, "other") is False
    assert await connect(port, context, "other") is True


async def test_a_plain_context_is_never_resumed(server: tuple[int, str]) -> None:
    port, cafile = server
    plain = ssl.create_default_context(cafile=cafile)
    assert [await connect(port, plain, "kube") for _ in range(2)] == [False, False]


async def test_a_server_certificate_is_still_verified(server: tuple[int, str],
                                                      tmp_path: Path) -> None:
    port, _ = server
    other_ca = new_ca("another-ca")
    other_ca.write(tmp_path / "other-ca.crt", tmp_path / "other-ca.key")
    with pytest.raises(ssl.SSLCertVerificationError):
        await connect(port, client_context(str(tmp_path / "other-ca.crt")), "kube")
    with pytest.raises(ssl.SSLCertVerificationError):  # the name is checked too
        await connect(port, client_context(server[1]), "elsewhere")
