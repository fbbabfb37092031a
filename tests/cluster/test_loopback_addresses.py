"""Every address the local plane hands out is loopback (Service ClusterIPs from
127.200.0.0/16, pod IPs from 127.244.0.0/16, nodes at 127.0.0.1), so a dial to any of them
stays on this machine; the egress guard sees such a dial and lets it pass."""

from __future__ import annotations

import ipaddress
import socket
import time

import pytest

from localcluster.addresses import (
    KUBERNETES_SERVICE_IP,
    NODE_IP,
    POD_CIDR,
    SERVICE_CLUSTER_IP_RANGE,
)
from tests.support.egress import EgressGuard
from tests.support.kube import Cluster

pytestmark = pytest.mark.cluster


def in_range(address: str, cidr: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)


def a_service(cluster: Cluster, namespace: str) -> dict:
    """A ClusterIP Service (kube-apiserver allocates its address)."""
    with cluster.admin() as kube:
        response = kube.post(f"/api/v1/namespaces/{namespace}/services", json={
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080}]}})
    assert response.status_code == 201, response.text
    return response.json()


def test_services_pods_and_nodes_have_loopback_addresses(cluster: Cluster,
                                                         namespace: str) -> None:
    created = a_service(cluster, namespace)
    assert in_range(created["spec"]["clusterIP"], SERVICE_CLUSTER_IP_RANGE), created["spec"]
    cluster.deploy(namespace, "web", replicas=2)
    with cluster.admin() as kube:
        services = kube.get("/api/v1/services").json()["items"]
        pods = kube.get("/api/v1/pods").json()["items"]
        nodes = kube.get("/api/v1/nodes").json()["items"]

    kubernetes = [s for s in services if s["metadata"]["name"] == "kubernetes"
                  and s["metadata"]["namespace"] == "default"]
    assert [s["spec"]["clusterIP"] for s in kubernetes] == [KUBERNETES_SERVICE_IP]
    for service in services:
        for address in service["spec"].get("clusterIPs", []):
            assert in_range(address, SERVICE_CLUSTER_IP_RANGE), service
    assert len([p for p in pods if p["metadata"]["namespace"] == namespace]) == 2
    for pod in pods:
        status = pod["status"]
        assert status.get("hostIP") in (None, NODE_IP), pod["metadata"]
        for address in status.get("podIPs", []):
            assert in_range(address["ip"], POD_CIDR), pod["metadata"]
    assert nodes
    for node in nodes:
        internal = [a["address"] for a in node["status"]["addresses"]
                    if a["type"] == "InternalIP"]
        assert internal == [NODE_IP], node["status"]["addresses"]


def test_a_dial_to_a_cluster_ip_stays_on_this_machine(cluster: Cluster, namespace: str,
                                                      egress_guard: EgressGuard) -> None:
    """Nothing listens on a fresh ClusterIP: the dial is refused at once by this machine. A
    server listening there on purpose answers, and the guard sees that connection and reports
    nothing."""
    address = a_service(cluster, namespace)["spec"]["clusterIP"]
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, 8080), timeout=5)
    assert time.monotonic() - started < 1.0, "a loopback dial is refused at once"

    with socket.create_server((address, 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection((address, port), timeout=5) as client:
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"ping")
                assert accepted.recv(4) == b"ping"
                egress_guard.sample()
    assert address in egress_guard.remotes_seen, "the guard did not see the connection"
    assert egress_guard.take() == []
