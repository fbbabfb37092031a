"""A server told to stop (SIGTERM) ends its open watches at once instead of waiting for them.

The watches go through HAProxy to any replica: every replica is told to stop."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from localcluster import plane, processes
from tests.support.kube import Cluster, wait_until
from tests.support.notify import API

pytestmark = pytest.mark.cluster

GRACEFUL_SHUTDOWN_SECONDS = 25
"""apiserver.serving.server's: how long uvicorn would wait for a response still open."""


def test_sigterm_ends_open_watches_and_the_server_promptly(cluster: Cluster,
                                                           namespace: str) -> None:
    servers = plane.replicas(cluster.layout)
    ended: list[str] = []
    try:
        with cluster.admin(timeout=GRACEFUL_SHUTDOWN_SECONDS - 10) as client:
            with client.stream("GET", f"{API}/namespaces/{namespace}/podnotifiers",
                               params={"watch": "true"}) as records, client.stream(
                    "GET", f"{API}/notifications", params={"watch": "true"}) as notifications:
                assert records.status_code == 200 and notifications.status_code == 200
                started = time.monotonic()
                for server in servers:
                    os.kill(server.pid, signal.SIGTERM)
                for name, stream in (("podnotifiers", records), ("notifications", notifications)):
                    try:
                        events = list(stream.iter_lines())
                    except httpx.RemoteProtocolError:
                        events = []  # the aggregator may cut the proxied stream as its backend goes
                    # The namespace is new; the watch of every namespace starts with an ADDED
                    # event for each Notification earlier tests left (their namespaces may still
                    # be terminating).
                    if name == "podnotifiers":
                        assert events == []
                    ended.append(name)
            wait_until(lambda: not any(processes.is_alive(s) for s in servers),
                       "the servers to stop", 30)
            stopped = time.monotonic() - started
    finally:
        if not all(processes.is_alive(s) for s in servers):
            cluster.restart_notifier(signal.SIGTERM)

    assert ended == ["podnotifiers", "notifications"]
    assert stopped < 10, f"the servers took {stopped:.1f}s to stop"
