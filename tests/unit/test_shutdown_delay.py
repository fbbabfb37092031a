"""--shutdown-delay-duration: after the first SIGTERM the server keeps serving while /readyz
fails and each response closes its connection; after the delay uvicorn shuts down."""

from __future__ import annotations

import asyncio
import signal

import uvicorn
from fastapi import FastAPI

from apiserver.serving.health import Draining
from apiserver.serving.server import Server
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
