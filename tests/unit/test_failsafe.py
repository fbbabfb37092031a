"""An error nobody handled: a 500 Status with a request id, counted, and the connection kept
(kube-apiserver's aggregator reuses it for the next user's request). A client that hangs up
mid-request is logged as such, not as an unexpected error."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from fastapi import APIRouter, FastAPI, Request

from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from apiserver.serving.metrics import Metrics
from tests.support.access import AllowAll


def failing_app(metrics: Metrics) -> FastAPI:
    router = APIRouter()

    @router.get("/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers/boom")
    async def boom() -> dict[str, Any]:
        raise RuntimeError("a bug")

    @router.post("/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/pods/web/notify")
    async def notify(request: Request) -> dict[str, Any]:
        return {"read": len(await request.body())}

    return create_app(authenticator=AllowAll(), authorizer=AllowAll(),  # type: ignore[arg-type]
                      readiness=Readiness(), resource_router=router, metrics=metrics)


@pytest.fixture
async def port() -> AsyncIterator[tuple[int, Metrics]]:
    metrics = Metrics()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(failing_app(metrics), http="h11", ws="none", lifespan="off",
                            log_config=None, access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield sock.getsockname()[1], metrics
    server.should_exit = True
    await task


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
                   ) -> tuple[int, dict[str, Any]]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    length = int(next(line.split(":")[1] for line in head.split("\r\n")
                      if line.lower().startswith("content-length")))
    return int(head.split(" ")[1]), json.loads(await reader.readexactly(length))


async def test_unexpected_error_is_a_status_and_keeps_the_connection(
        port: tuple[int, Metrics]) -> None:
    number, metrics = port
    reader, writer = await asyncio.open_connection("127.0.0.1", number)
    path = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers/boom"
    code, body = await exchange(reader, writer, path)
    assert (code, body["kind"], body["reason"]) == (500, "Status", "InternalError")
    assert "request id" in body["message"] and "a bug" not in body["message"]
    # The same connection still answers: nobody else's request fails with EOF.
    code, body = await exchange(reader, writer, "/apis/notifier.x-k8s.io/v1alpha1/nowhere")
    assert (code, body["reason"]) == (404, "NotFound")
    writer.close()
    exposition = metrics.exposition()[0].decode()
    assert "container_notifier_unexpected_errors_total 1.0" in exposition


async def test_a_client_that_hangs_up_mid_body_is_logged_as_gone_not_as_an_error(
        port: tuple[int, Metrics], caplog: pytest.LogCaptureFixture) -> None:
    number, metrics = port
    caplog.set_level(logging.INFO, logger="apiserver.serving.failsafe")
    reader, writer = await asyncio.open_connection("127.0.0.1", number)
    writer.write(b"POST /apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/pods/web/notify "
                 b"HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"notifier\":")
    await writer.drain()
    await asyncio.sleep(0.2)  # the handler is reading the body
    writer.close()
    async with asyncio.timeout(5):
        while not [r for r in caplog.records if "disconnected" in r.getMessage()]:
            await asyncio.sleep(0.02)
    (gone,) = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert gone.levelno == logging.INFO
    assert (gone.method, gone.path) == (  # type: ignore[attr-defined]
        "POST", "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/pods/web/notify")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    exposition = metrics.exposition()[0].decode()
    assert "container_notifier_unexpected_errors_total 0.0" in exposition
