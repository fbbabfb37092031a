"""A server told to stop (SIGTERM) ends its open watches at once instead of waiting for them."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from localcluster import __main__ as localcluster
from localcluster import processes
from tests.support.kube import Cluster, wait_until
from tests.support.notify import API

pytestmark = pytest.mark.cluster

GRACEFUL_SHUTDOWN_SECONDS = 25
"""apiserver.serving.server's: how long uvicorn would wait for a response still open."""


def test_sigterm_ends_open_watches_and_the_server_promptly(cluster: Cluster,
                                                           namespace: str) -> None:
    (server,) = [p for p in processes.load(cluster.layout.state_file)
                 if p.name == "notifier-apiserver"]
    ended: list[str] = []
    try:
        with cluster.admin(timeout=GRACEFUL_SHUTDOWN_SECONDS - 10) as client:
            with client.stream("GET", f"{API}/namespaces/{namespace}/podnotifiers",
                               params={"watch": "true"}) as records, client.stream(
                    "GET", f"{API}/notifications", params={"watch": "true"}) as notifications:
                assert records.status_code == 200 and notifications.status_code == 200
                started = time.monotonic()
                os.kill(server.pid, signal.SIGTERM)
                for name, stream in (("podnotifiers", records), ("notifications", notifications)):
                    try:
                        assert list(stream.iter_lines()) == []
                    except httpx.RemoteProtocolError:
                        pass  # the aggregator may cut the proxied stream as its backend goes
                    ended.append(name)
            wait_until(lambda: not processes.is_alive(server), "the server to stop", 30)
            stopped = time.monotonic() - started
    finally:
        if not processes.is_alive(server):
            localcluster.restart(cluster.layout, "notifier-apiserver")
            wait_until(lambda: _served(cluster), "the restarted server", 60)

    assert ended == ["podnotifiers", "notifications"]
    assert stopped < 10, f"the server took {stopped:.1f}s to stop"


def _served(cluster: Cluster) -> bool:
    try:
        with cluster.admin(timeout=5) as kube:
            return kube.get(API).status_code == 200
    except httpx.HTTPError:
        return False
