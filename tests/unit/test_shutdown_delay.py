"""--shutdown-delay-duration: after the first SIGTERM the server keeps serving while /readyz
fails and each response closes its connection; after the delay it listens no more, answers late
requests 429 with Retry-After, closes idle connections only on their keep-alive timer, and shuts
down once no connection is left."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import AsyncIterator

import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.responses import StreamingResponse

from apiserver.serving.app import create_app
from apiserver.serving.health import Draining, Readiness
from apiserver.serving.server import Server
from tests.support.access import AllowAll
from tests.unit.conftest import InProcessServer

CLOSE = (b"connection", b"close")


def server(delay: float) -> tuple[Server, Draining, list[str]]:
    draining, stopped = Draining(), []
    config = uvicorn.Config(FastAPI(), lifespan="off")
    config.load()
    return (Server(config, lambda: stopped.append("stopped"), draining=draining,
                   shutdown_delay=delay), draining, stopped)


async def test_the_first_signal_drains_for_the_delay_then_exits() -> None:
    uv, draining, _ = server(0.3)
    uv.handle_exit(signal.SIGTERM, None)
    assert draining.active and not uv.should_exit
    assert not await uv.on_tick(1)
    assert CLOSE in uv.server_state.default_headers
    assert not await uv.on_tick(10)  # the headers' once-a-second refresh keeps the close
    assert CLOSE in uv.server_state.default_headers
    await asyncio.sleep(0.35)
    await uv.on_tick(2)
    assert uv.should_exit
    assert await uv.on_tick(3)


async def test_a_second_signal_ends_the_delay_at_once() -> None:
    uv, draining, _ = server(30)
    uv.handle_exit(signal.SIGTERM, None)
    uv.handle_exit(signal.SIGTERM, None)
    assert draining.active and uv.should_exit


async def test_without_a_delay_the_signal_shuts_down_at_once() -> None:
    uv, draining, _ = server(0)
    uv.handle_exit(signal.SIGTERM, None)
    assert uv.should_exit and not draining.active
    assert CLOSE not in uv.server_state.default_headers


def test_readyz_fails_while_draining_and_the_api_still_serves(
        in_process_server: InProcessServer) -> None:
    assert in_process_server.request("GET", "/readyz", token=False).status == 200
    in_process_server.draining.begin()
    try:
        answer = in_process_server.request("GET", "/readyz?verbose", token=False)
        assert answer.status == 500
        assert b"[-]shutdown failed: reason withheld" in answer.body
        assert in_process_server.request(
            "GET", "/apis/notifier.x-k8s.io/v1alpha1").status == 200
    finally:
        in_process_server.draining.active = False


def test_after_the_delay_a_request_is_refused_429_with_retry_after_and_the_probes_answer(
        in_process_server: InProcessServer) -> None:
    in_process_server.draining.stop_accepting()
    try:
        answer = in_process_server.request(
            "POST", "/apis/notifier.x-k8s.io/v1alpha1/namespaces/default/pods/web/notify",
            body=b'{"notifier": "reload"}', headers={"content-type": "application/json"})
        assert answer.status == 429, answer.body
        status = json.loads(answer.body)
        assert (status["kind"], status["reason"]) == ("Status", "TooManyRequests")
        assert "shutting down" in status["message"] and "not started" in status["message"]
        assert status["details"]["retryAfterSeconds"] == 1
        assert answer.header_values("retry-after") == ["1"]
        assert answer.header_values("connection") == ["close"]
        assert in_process_server.request("GET", "/readyz", token=False).status == 500
        assert in_process_server.request("GET", "/livez", token=False).status == 200
    finally:
        in_process_server.draining.active = in_process_server.draining.late = False


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
                    ) -> tuple[int, dict[str, str]]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in head[1:] if line)
    await reader.readexactly(int(headers["content-length"]))
    return int(head[0].split(" ")[1]), headers


async def test_a_drain_keeps_idle_connections_until_their_keep_alive_and_refuses_late_requests(
        ) -> None:
    """Through a real uvicorn: a connection idle through the delay is still open after it, and
    answers a request there 429 and closes; one that stays idle closes after the late idle
    time, not at once, though its keep-alive timeout is far away; then the server ends."""
    draining, stopped = Draining(), []
    app = create_app(authenticator=AllowAll(), authorizer=AllowAll(),  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=FastAPI().router, draining=draining)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False,
                            timeout_keep_alive=3600, timeout_graceful_shutdown=5)
    uv = Server(config, lambda: stopped.append("stopped"), draining=draining,
                shutdown_delay=0.3, late_idle_seconds=1.0)
    # uvicorn raises the signals it caught again once it has stopped: none here (the signal
    # is simulated; raising it would end pytest).
    uv.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        await asyncio.sleep(0.01)
    port = sock.getsockname()[1]
    late = await asyncio.open_connection("127.0.0.1", port)
    idle = await asyncio.open_connection("127.0.0.1", port)
    path = "/apis/notifier.x-k8s.io/v1alpha1"
    assert (await _exchange(*late, path))[0] == 200
    assert (await _exchange(*idle, path))[0] == 200

    uv.handle_exit(signal.SIGTERM, None)
    while not draining.late:
        await asyncio.sleep(0.02)
    assert stopped == ["stopped"]
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)  # it listens no more
    code, headers = await _exchange(*late, path)
    assert (code, headers["retry-after"], headers["connection"]) == (429, "1", "close")
    assert await late[0].read() == b""  # closed after the answer
    assert not serving.done()
    assert not idle[0].at_eof()
    assert await asyncio.wait_for(idle[0].read(), 5) == b""  # closed after the late idle time
    await asyncio.wait_for(serving, 5)
    for _, writer in (late, idle):
        writer.close()


async def test_a_connection_whose_answer_began_before_the_drain_takes_a_late_request_after_it(
        ) -> None:
    """A streamed answer (a watch) begun before SIGTERM ends after the delay without
    ``Connection: close``: the client keeps the connection, and its next request there is
    answered 429, not met by a closed connection."""
    draining = Draining()
    router = APIRouter()

    @router.get("/apis/notifier.x-k8s.io/v1alpha1/podnotifiers")
    async def watch() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b"{}\n"
            while not draining.late:
                await asyncio.sleep(0.05)
            yield b"{}\n"

        return StreamingResponse(events(), media_type="application/json")

    app = create_app(authenticator=AllowAll(), authorizer=AllowAll(),  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router, draining=draining)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False,
                            timeout_keep_alive=3600, timeout_graceful_shutdown=5)
    uv = Server(config, lambda: None, draining=draining, shutdown_delay=0.3,
                late_idle_seconds=1.0)
    uv.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    writer.write(b"GET /apis/notifier.x-k8s.io/v1alpha1/podnotifiers HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
    assert "connection: close" not in head
    uv.handle_exit(signal.SIGTERM, None)
    await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)  # the stream ended, late
    assert draining.late
    code, headers = await _exchange(reader, writer, "/apis/notifier.x-k8s.io/v1alpha1")
    assert (code, headers["connection"]) == (429, "close")
    await asyncio.wait_for(serving, 5)
    writer.close()
