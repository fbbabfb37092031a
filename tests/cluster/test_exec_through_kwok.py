"""pods/exec through kube-apiserver over WebSocket reaches kwok, which runs the command on the host
inside its own PID namespace."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from apiserver.notifier.exec_protocol import Channel, ExecReason
from apiserver.notifier.exec_stream import KubeEndpoint, exec_in_container, exec_url
from localcluster.addresses import NODE_IP
from tests.support.control_plane import restart_kube_apiserver
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture
def pod(cluster: Cluster, namespace: str) -> tuple[str, str]:
    pods = cluster.deploy(namespace, "shell", replicas=1)
    return namespace, pods[0]["metadata"]["name"]


def _endpoint(cluster: Cluster) -> KubeEndpoint:
    return KubeEndpoint(cluster.server, cluster.admin_ssl_context())


async def test_exec_echo_returns_its_output(cluster: Cluster, pod: tuple[str, str]) -> None:
    namespace, name = pod
    result = await exec_in_container(_endpoint(cluster), namespace, name, "app",
                                     ["echo", "hello from kwok"], timeout_seconds=20)
    assert result.reason == ExecReason.COMPLETED, result.message
    assert result.exit_code == 0
    assert result.stdout == b"hello from kwok\n"


async def test_nonzero_exit_arrives_as_kwoks_generic_failure(
        cluster: Cluster, pod: tuple[str, str]) -> None:
    """kwok wraps the command's error: the status channel carries reason InternalError with a
    message (and one cause message) ending in "exit status N", not reason NonZeroExitCode with an
    ExitCode cause. The product parses both; this test pins down what kwok really sends."""
    namespace, name = pod
    url = exec_url(cluster.server, namespace, name, "app", ["sh", "-c", "echo oops >&2; exit 3"])
    frames: dict[int, bytes] = {}
    async with websockets.connect(url, ssl=cluster.admin_ssl_context(),
                                  subprotocols=["v5.channel.k8s.io"]) as ws:
        assert ws.subprotocol == "v5.channel.k8s.io"
        async for message in ws:
            assert isinstance(message, bytes)
            frames[message[0]] = frames.get(message[0], b"") + message[1:]
    status = json.loads(frames[Channel.STATUS])
    assert frames[Channel.STDERR] == b"oops\n"
    assert status["status"] == "Failure"
    assert status["reason"] == "InternalError"
    assert status["message"].endswith("exit status 3")
    assert not any(c.get("reason") == "ExitCode" for c in status["details"]["causes"])

    result = await exec_in_container(_endpoint(cluster), namespace, name, "app",
                                     ["sh", "-c", "exit 3"], timeout_seconds=20)
    assert result.reason == ExecReason.NON_ZERO_EXIT_CODE
    assert result.exit_code == 3


async def test_kill_pid_1_reaches_the_namespace_init(
        cluster: Cluster, pod: tuple[str, str]) -> None:
    namespace, name = pod
    log = cluster.layout.pid1_signal_log

    def hups() -> int:
        if not log.exists():
            return 0
        return sum(json.loads(line)["signal"] == "SIGHUP" for line in log.read_text().splitlines())

    before = hups()
    result = await exec_in_container(_endpoint(cluster), namespace, name, "app",
                                     ["sh", "-c", "kill -s HUP 1 && echo $$"], timeout_seconds=20)
    assert result.exit_code == 0, result.message
    # The shell ran in kwok's PID namespace: its pid is small and PID 1 there is our init.
    assert 1 < int(result.stdout) < 100000
    wait_until(lambda: hups() == before + 1, "SIGHUP recorded by the PID-namespace init", 5)


def node_addresses(cluster: Cluster) -> dict[str, list[tuple[str, str]]]:
    with cluster.admin() as kube:
        nodes = kube.get("/api/v1/nodes").json()["items"]
    return {n["metadata"]["name"]: sorted((a["type"], a["address"])
                                          for a in n["status"].get("addresses", []))
            for n in nodes}


def assert_nodes_addressed(cluster: Cluster) -> None:
    found = node_addresses(cluster)
    assert found and all(addresses == [("Hostname", name), ("InternalIP", NODE_IP)]
                         for name, addresses in found.items()), found


async def echo_works(cluster: Cluster, namespace: str, name: str) -> None:
    result = await exec_in_container(_endpoint(cluster), namespace, name, "app",
                                     ["echo", "still here"], timeout_seconds=20)
    assert result.reason == ExecReason.COMPLETED, result.message
    assert result.stdout == b"still here\n"


async def test_exec_works_after_kube_apiserver_restarts(
        cluster: Cluster, pod: tuple[str, str]) -> None:
    """kube-apiserver dials a node's InternalIP for exec; the nodes keep it across a restart of
    kube-apiserver, so exec does not fail with "no preferred addresses found"."""
    assert_nodes_addressed(cluster)
    await asyncio.to_thread(restart_kube_apiserver, cluster)
    assert_nodes_addressed(cluster)
    await echo_works(cluster, *pod)


async def test_a_node_that_was_not_ready_keeps_its_addresses(
        cluster: Cluster, pod: tuple[str, str]) -> None:
    """What kube-controller-manager does to every node when kube-apiserver was away longer
    than the node monitor's grace period: Ready becomes Unknown, and kwok initializes the node
    again. Its addresses stay (kwok used to delete them then: exec failed with "no preferred
    addresses found")."""
    with cluster.admin() as kube:
        for node in node_addresses(cluster):
            response = kube.patch(
                f"/api/v1/nodes/{node}/status",
                headers={"Content-Type": "application/strategic-merge-patch+json"},
                json={"status": {"conditions": [{
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."}]}})
            assert response.status_code == 200, response.text

    def ready_again() -> bool:
        with cluster.admin() as kube:
            nodes = kube.get("/api/v1/nodes").json()["items"]
        return all(c["status"] == "True" for n in nodes for c in n["status"]["conditions"]
                   if c["type"] == "Ready")

    wait_until(ready_again, "kwok to initialize the nodes again", 30)
    assert_nodes_addressed(cluster)
    await echo_works(cluster, *pod)
