"""The local control plane is a real one: scheduling, RBAC, aggregation configuration."""

from __future__ import annotations

import json
import os
import signal

import pytest

from localcluster import __main__ as localcluster
from localcluster import components, health, processes
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster


def test_deployment_pods_run_on_kwok_nodes(cluster: Cluster, namespace: str) -> None:
    pods = cluster.deploy(namespace, "web", replicas=3)
    assert len(pods) == 3
    with cluster.admin() as kube:
        nodes = {n["metadata"]["name"]: n for n in kube.get("/api/v1/nodes").json()["items"]}
    for pod in pods:
        node = nodes[pod["spec"]["nodeName"]]
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert pod["status"]["phase"] == "Running"
        assert all(c["ready"] for c in pod["status"]["containerStatuses"])


def test_user_without_binding_is_forbidden_and_allowed_with_one(
        cluster: Cluster, namespace: str) -> None:
    user = cluster.user("carol")
    path = f"/api/v1/namespaces/{namespace}/pods"
    with cluster.client_for(user) as kube:
        denied = kube.get(path)
    assert denied.status_code == 403
    assert denied.json()["reason"] == "Forbidden"
    assert 'User "carol" cannot list resource "pods"' in denied.json()["message"]

    cluster.grant(namespace, user, [{"apiGroups": [""], "resources": ["pods"],
                                     "verbs": ["list"]}])

    def allowed() -> bool:
        with cluster.client_for(user) as kube:
            return kube.get(path).status_code == 200

    wait_until(allowed, "RBAC binding to take effect", timeout=10)


def test_extension_apiserver_authentication_configmap_holds_requestheader_keys(
        cluster: Cluster) -> None:
    with cluster.admin() as kube:
        response = kube.get(
            "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
    assert response.status_code == 200
    data = response.json()["data"]
    assert "BEGIN CERTIFICATE" in data["client-ca-file"]
    assert "BEGIN CERTIFICATE" in data["requestheader-client-ca-file"]
    assert data["requestheader-client-ca-file"] != data["client-ca-file"]
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert json.loads(data["requestheader-group-headers"]) == ["X-Remote-Group"]
    assert json.loads(data["requestheader-extra-headers-prefix"]) == ["X-Remote-Extra-"]


def test_every_component_answers_its_probe(cluster: Cluster) -> None:
    recorded = processes.load(cluster.layout.state_file)
    assert [p.name for p in recorded] == list(components.plane(cluster.replicas))
    for probe in health.probes(cluster.layout, cluster.ports, cluster.replicas):
        assert probe.answers(), probe
    assert health.check(cluster.layout, cluster.ports, cluster.replicas) == []


def test_a_component_that_runs_but_does_not_answer_makes_the_plane_unhealthy(
        cluster: Cluster) -> None:
    (scheduler,) = [p for p in processes.load(cluster.layout.state_file)
                    if p.name == components.SCHEDULER]
    os.kill(scheduler.pid, signal.SIGSTOP)
    try:
        assert processes.is_alive(scheduler)
        assert health.check(cluster.layout, cluster.ports, cluster.replicas) == [
            f"kube-scheduler: pid {scheduler.pid} runs but GET "
            f"https://127.0.0.1:{cluster.ports.scheduler}/healthz does not answer 200"]
        assert not localcluster.healthy(cluster.layout, cluster.ports, cluster.replicas)
    finally:
        os.kill(scheduler.pid, signal.SIGCONT)
    wait_until(lambda: localcluster.healthy(cluster.layout, cluster.ports, cluster.replicas),
               "the plane to be healthy again", 30)
