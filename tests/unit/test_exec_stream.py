"""The pods/exec client against a local WebSocket server that speaks the channel protocol."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from apiserver.kube.tls_sessions import client_context
from apiserver.notifier.exec_protocol import ExecReason
from apiserver.notifier.exec_stream import (
    CLOSE_TIMEOUT_SECONDS,
    KubeEndpoint,
    exec_in_container,
    exec_url,
)
from certs.authority import KeyPair, issue, new_ca

STDOUT, STDERR, STATUS = b"\x01", b"\x02", b"\x03"
SUCCESS = {"metadata": {}, "status": "Success"}


def non_zero_exit(code: int) -> dict:
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def generic_exit(code: int) -> dict:
    message = f"error executing command: exit status {code}"
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


def status_frame(status: dict) -> bytes:
    return STATUS + json.dumps(status).encode()


@dataclass
class FakeApiServer:
    """Plays kube-apiserver's exec endpoint; the command's argv says what to do."""

    url: str = ""
    seen: list[dict] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def refuse(self, connection: ServerConnection, request: Request) -> Response | None:
        query = parse_qs(urlsplit(request.path).query)
        if query["container"] == ["missing"]:
            return self._status_response(
                connection, 400, "container missing is not valid for pod web-0"
            )
        if query["container"] == ["gone"]:
            return self._status_response(
                connection, 404, 'pods "web-0" not found', details={"name": "web-0", "kind": "pods"}
            )
        if query["container"] == ["html"]:
            return connection.respond(502, "<html>bad gateway</html>")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        query = parse_qs(urlsplit(connection.request.path).query)
        self.seen.append(
            {
                "path": urlsplit(connection.request.path).path,
                "query": query,
                "subprotocol": connection.subprotocol,
                "authorization": connection.request.headers.get("Authorization"),
            }
        )
        command = query["command"]
        try:
            await self._act(connection, command)
        finally:
            self.closed.set()

    async def _act(self, connection: ServerConnection, command: list[str]) -> None:
        match command:
            case ["echo", *words]:
                await connection.send(STDOUT)  # v4 servers announce each stream with an empty frame
                await connection.send(STDOUT + " ".join(words).encode() + b"\n")
                await connection.send(STDERR + b"to stderr\n")
                await connection.send(status_frame(SUCCESS))
            case ["exit", code]:
                await connection.send(STDERR + b"failing\n")
                await connection.send(status_frame(non_zero_exit(int(code))))
            case ["kwok-exit", code]:
                await connection.send(status_frame(generic_exit(int(code))))
            case ["split-status"]:
                frame = status_frame(non_zero_exit(4))
                await connection.send(frame[:20])
                await connection.send(STATUS + frame[20:])
            case ["flood", size]:
                total = int(size)
                chunk = 32 * 1024
                for offset in range(0, total, chunk):
                    piece = bytes((offset + i) % 251 for i in range(min(chunk, total - offset)))
                    await connection.send(STDOUT + piece)
                await connection.send(status_frame(SUCCESS))
            case ["sleep"]:
                await connection.wait_closed()
            case ["cat"]:  # a held command: ends when its stdin is closed
                await connection.send(STDOUT + b"ready\n")
                async for message in connection:
                    if message == b"\xff\x00":
                        await connection.send(status_frame(SUCCESS))
                        return
            case ["hangup"]:
                await connection.send(STDOUT + b"partial")
            case ["garbage"]:
                await connection.send(b"")
                await connection.send(STATUS + b"[1, 2]")

    @staticmethod
    def _status_response(
        connection: ServerConnection, code: int, message: str, details: dict | None = None
    ) -> Response:
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "BadRequest" if code == 400 else "NotFound",
            "code": code,
        }
        if details:
            status["details"] = details
        response = connection.respond(code, json.dumps(status))
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "application/json"
        return response


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    async with serve(
        fake.handle,
        "127.0.0.1",
        0,
        subprotocols=["v5.channel.k8s.io", "v4.channel.k8s.io"],
        process_request=fake.refuse,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


def run(fake: FakeApiServer, command: list[str], container: str = "db", timeout: float = 5, **kw):
    endpoint = KubeEndpoint(fake.url, headers={"Authorization": "Bearer t0ken"})
    return exec_in_container(
        endpoint, "ns1", "web-0", container, command, timeout_seconds=timeout, **kw
    )


def test_exec_url_repeats_command_and_disables_stdin_and_tty() -> None:
    url = exec_url("https://10.0.0.1:6443/", "ns", "p", "c", ["sh", "-c", "echo a&b"])

    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "wss",
        "10.0.0.1:6443",
        "/api/v1/namespaces/ns/pods/p/exec",
    )
    assert parse_qs(parts.query) == {
        "command": ["sh", "-c", "echo a&b"],
        "container": ["c"],
        "stdin": ["false"],
        "stdout": ["true"],
        "stderr": ["true"],
        "tty": ["false"],
    }


async def test_output_and_success(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["echo", "hello", "world"])

    assert result.reason == ExecReason.COMPLETED
    assert result.exit_code == 0
    assert result.stdout == b"hello world\n"
    assert result.stderr == b"to stderr\n"
    assert not result.stdout_truncated and not result.stderr_truncated
    assert result.started <= result.finished
    [seen] = apiserver.seen
    assert seen["path"] == "/api/v1/namespaces/ns1/pods/web-0/exec"
    assert seen["query"]["command"] == ["echo", "hello", "world"]
    assert seen["query"]["container"] == ["db"]
    assert seen["subprotocol"] == "v5.channel.k8s.io"
    assert seen["authorization"] == "Bearer t0ken"


@pytest.mark.parametrize("shape", ["exit", "kwok-exit"])
async def test_non_zero_exit_in_both_shapes(apiserver: FakeApiServer, shape: str) -> None:
    result = await run(apiserver, [shape, "3"])

    assert result.reason == ExecReason.NON_ZERO_EXIT_CODE
    assert result.exit_code == 3
    assert "exit" in result.message


async def test_status_spanning_frames(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["split-status"])

    assert result.exit_code == 4


class HoldFirstBytes:
    """A stdout filter that holds back the first `n` bytes and returns them at the end."""

    def __init__(self, n: int) -> None:
        self.n, self.held, self.fed = n, b"", []

    def feed(self, data: bytes) -> bytes:
        self.fed.append(data)
        keep = data[: max(0, self.n - len(self.held))]
        self.held += keep
        return data[len(keep):]

    def end(self) -> bytes:
        return b"<" + self.held + b">"


async def test_stdout_goes_through_the_filter_before_the_tail(apiserver: FakeApiServer) -> None:
    held = HoldFirstBytes(3)
    result = await run(apiserver, ["echo", "hello"], stdout_filter=held)
    assert held.fed == [b"", b"hello\n"]
    assert result.stdout == b"lo\n<hel>"
    assert result.stderr == b"to stderr\n"


async def test_a_held_commands_stdin_is_open_until_closed_with_a_v5_close_frame(
        apiserver: FakeApiServer) -> None:
    close = asyncio.Event()
    running = asyncio.create_task(run(apiserver, ["cat"], close_stdin=close))
    await asyncio.sleep(0.2)
    assert not running.done(), "the command ended with its stdin open"
    close.set()
    result = await asyncio.wait_for(running, 2)
    assert (result.exit_code, result.stdout) == (0, b"ready\n")
    assert apiserver.seen[0]["query"]["stdin"] == ["true"]
    assert apiserver.seen[0]["subprotocol"] == "v5.channel.k8s.io"


async def test_timeout_closes_the_stream(apiserver: FakeApiServer) -> None:
    started = time.monotonic()
    result = await run(apiserver, ["sleep"], timeout=0.3)
    elapsed = time.monotonic() - started

    assert result.reason == ExecReason.TIMEOUT
    assert result.exit_code is None
    assert "may still be running" in result.message
    assert 0.3 <= elapsed < 0.3 + CLOSE_TIMEOUT_SECONDS + 0.5
    await asyncio.wait_for(apiserver.closed.wait(), 2)


async def test_large_output_keeps_the_tail(apiserver: FakeApiServer) -> None:
    size = 1_000_000
    expected = bytes(i % 251 for i in range(size))

    result = await run(apiserver, ["flood", str(size)], tail_bytes=4096)

    assert result.exit_code == 0
    assert result.stdout_truncated
    assert result.stdout == expected[-4096:]
    assert result.stderr == b"" and not result.stderr_truncated


async def test_falls_back_to_v4() -> None:
    fake = FakeApiServer()
    async with serve(fake.handle, "127.0.0.1", 0, subprotocols=["v4.channel.k8s.io"]) as server:
        fake.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        result = await run(fake, ["echo", "old"])

    assert result.stdout == b"old\n"
    assert result.exit_code == 0
    assert fake.seen[0]["subprotocol"] == "v4.channel.k8s.io"


async def test_handshake_400_carries_the_server_message(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["echo"], container="missing")

    assert result.reason == ExecReason.CONTAINER_NOT_RUNNING
    assert result.exit_code is None
    assert result.message == (
        "kube-apiserver refused the exec (HTTP 400): container missing is not valid for pod web-0"
    )


async def test_handshake_404_for_the_pod_is_pod_deleted(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["echo"], container="gone")

    assert result.reason == ExecReason.POD_DELETED
    assert 'pods "web-0" not found' in result.message


async def test_handshake_error_without_status_body(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["echo"], container="html")

    assert result.reason == ExecReason.EXEC_FAILED
    assert result.message == "kube-apiserver refused the exec (HTTP 502): <html>bad gateway</html>"


async def test_stream_closed_without_status_is_a_failure(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["hangup"])

    assert result.reason == ExecReason.EXEC_FAILED
    assert result.exit_code is None
    assert result.stdout == b"partial"
    assert "without an exit status" in result.message


async def test_malformed_status_is_a_failure(apiserver: FakeApiServer) -> None:
    result = await run(apiserver, ["garbage"])

    assert result.reason == ExecReason.EXEC_FAILED
    assert "malformed" in result.message


async def test_unreachable_server_is_a_failure() -> None:
    fake = FakeApiServer(url="http://127.0.0.1:9")

    result = await run(fake, ["echo"])

    assert result.reason == ExecReason.EXEC_FAILED
    assert "cannot open the exec stream" in result.message


async def test_tls_with_client_certificate(tmp_path: Path) -> None:
    ca = new_ca("test-ca")
    server_pair = issue_pair(ca, "127.0.0.1", server=True, tmp_path=tmp_path)
    client_pair = issue_pair(ca, "notifier", client=True, tmp_path=tmp_path)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem())
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca_file)
    server_tls.verify_mode = ssl.CERT_REQUIRED
    server_tls.load_cert_chain(*server_pair)
    client_tls = client_context(str(ca_file))  # as the kubeconfig's (kube/config.py)
    client_tls.load_cert_chain(*client_pair)
    peers: list[tuple[str, bool]] = []

    async def handler(connection: ServerConnection) -> None:
        peer = connection.transport.get_extra_info("peercert")
        resumed = connection.transport.get_extra_info("ssl_object").session_reused
        peers.append((dict(item[0] for item in peer["subject"])["commonName"], resumed))
        await connection.send(STDOUT + b"secure")
        await connection.send(status_frame(SUCCESS))

    async with serve(
        handler, "127.0.0.1", 0, ssl=server_tls, subprotocols=["v5.channel.k8s.io"]
    ) as server:
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        results = [await exec_in_container(
            KubeEndpoint(url, client_tls), "ns", "p", "c", ["x"], timeout_seconds=5
        ) for _ in range(2)]
        untrusted = await exec_in_container(
            KubeEndpoint(url, ssl.create_default_context()),
            "ns",
            "p",
            "c",
            ["x"],
            timeout_seconds=5,
        )

    assert [(r.reason, r.stdout) for r in results] == [(ExecReason.COMPLETED, b"secure")] * 2
    # the second exec resumed the first one's TLS session, still as the client certificate
    assert peers == [("notifier", False), ("notifier", True)]
    assert untrusted.reason == ExecReason.EXEC_FAILED
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.message


def issue_pair(ca: KeyPair, name: str, *, tmp_path: Path, **usage: bool) -> tuple[Path, Path]:
    pair = issue(ca, name, ip_addresses=("127.0.0.1",), **usage)
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    pair.write(cert, key)
    return cert, key
