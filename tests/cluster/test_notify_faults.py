"""Faults lose no record: a deleted pod, a watch that follows a run, a server restart."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import pytest

from tests.support.kube import Cluster, wait_until
from tests.support.notify import API, declare, exec_notifier, notify

pytestmark = pytest.mark.cluster


def _record(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{name}")
    assert response.status_code == 200, response.text
    return response.json()


def _phase(cluster: Cluster, namespace: str, name: str) -> str:
    return _record(cluster, namespace, name)["status"]["phase"]


def test_pod_deleted_mid_run_ends_podDeleted(cluster: Cluster, namespace: str) -> None:
    annotations = declare(app=[exec_notifier("long", "sleep 30", timeout=60)])
    pod = cluster.deploy(namespace, "doomed", annotations=annotations)[0]["metadata"]["name"]
    with cluster.admin() as client:
        name = notify(client, namespace, pod, "long", wait=0).json()["metadata"]["name"]
        wait_until(lambda: _phase(cluster, namespace, name) == "Running", "run to start", 10)
        deleted = client.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}",
                                params={"gracePeriodSeconds": "0"})
        assert deleted.status_code == 200
    wait_until(lambda: _phase(cluster, namespace, name) == "Failed", "PodDeleted", 20)
    status = _record(cluster, namespace, name)["status"]
    assert status["reason"] == "PodDeleted"
    assert status["containers"][0]["reason"] == "PodDeleted"


def test_watch_sees_running_then_succeeded_in_two_events(cluster: Cluster, namespace: str) -> None:
    """A record is created Running and written once more, when it ends: a watch sees ADDED
    Running, then MODIFIED Succeeded with the container's result, and nothing in between."""
    annotations = declare(app=[exec_notifier("brief", "sleep 1; echo done")])
    pod = cluster.deploy(namespace, "watched", annotations=annotations)[0]["metadata"]["name"]
    phases: list[str] = []
    with cluster.admin() as client:
        with client.stream("GET", f"{API}/namespaces/{namespace}/podnotifiers",
                           params={"watch": "true", "timeoutSeconds": "20"}) as stream:
            name = notify(client, namespace, pod, "brief", wait=0).json()["metadata"]["name"]
            for line in stream.iter_lines():
                event = json.loads(line)
                if event["object"]["metadata"]["name"] != name:
                    continue
                phase = event["object"]["status"]["phase"]
                phases.append(f"{event['type']} {phase}")
                if phase in ("Succeeded", "Failed"):
                    final = event["object"]["status"]
                    break
    assert phases == ["ADDED Running", "MODIFIED Succeeded"]
    assert final["containers"][0]["stdout"] == "done\n"


def test_kubectl_get_watch_streams_rows(cluster: Cluster, namespace: str) -> None:
    """kubectl lists first, then watches from that list's resourceVersion: once it has printed
    the row of a record that existed before it started, it sees every change of a record
    notified after, however late its watch starts on a loaded machine."""
    annotations = declare(app=[exec_notifier("brief", "sleep 1")])
    pod = cluster.deploy(namespace, "kwatch", annotations=annotations)[0]["metadata"]["name"]
    with cluster.admin() as client:
        earlier = notify(client, namespace, pod, "brief", wait=30).json()
    assert earlier["status"]["phase"] == "Succeeded", earlier["status"]
    kubectl = subprocess.Popen(
        [str(cluster.bins / "kubectl"), f"--kubeconfig={cluster.layout.kubeconfig}", "-n",
         namespace, "get", "podnotifiers", "--watch", "--request-timeout=30s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert kubectl.stdout is not None
        header, listed = kubectl.stdout.readline().split(), kubectl.stdout.readline().split()
        assert header[:4] == ["NAME", "POD", "NOTIFIER", "PHASE"]
        assert listed[:1] == [earlier["metadata"]["name"]], listed
        with cluster.admin() as client:
            name = notify(client, namespace, pod, "brief", wait=0).json()["metadata"]["name"]
        phases = []
        for line in kubectl.stdout:
            row = line.split()
            if row[:1] == [name]:
                phases.append(row[3])
                if row[3] == "Succeeded":
                    break
    finally:
        kubectl.kill()
    assert phases[-1] == "Succeeded"
    assert "Running" in phases


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "stop"])
def test_restart_ends_running_records_as_interrupted(
        cluster: Cluster, namespace: str, sig: signal.Signals) -> None:
    annotations = declare(app=[exec_notifier("long", "sleep 20", timeout=60)])
    pod = cluster.deploy(namespace, "restarted", annotations=annotations)[0]["metadata"]["name"]
    with cluster.admin() as client:
        name = notify(client, namespace, pod, "long", wait=0).json()["metadata"]["name"]
    wait_until(lambda: _phase(cluster, namespace, name) == "Running", "run to start", 10)
    cluster.restart_notifier(sig)
    status = _record(cluster, namespace, name)["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "Interrupted"
    assert status["completionTime"]
    assert status["containers"][0]["reason"] == "Interrupted"
