"""The per-pod record is bounded whatever the traffic (server flag --max-records-per-pod=10)."""

from __future__ import annotations

import pytest

from tests.support.kube import Cluster, wait_until
from tests.support.notify import declare, exec_notifier, notify, records

pytestmark = pytest.mark.cluster

K = 10
"""The server's --max-records-per-pod in the local control plane (the default)."""


def test_429_with_retry_after_when_k_records_are_unfinished(
        cluster: Cluster, namespace: str) -> None:
    holds = [exec_notifier(f"hold-{i}", "sleep 4", timeout=20) for i in range(K + 1)]
    pod = cluster.deploy(namespace, "held", annotations=declare(app=holds))[0]["metadata"]["name"]
    with cluster.admin() as client:
        accepted = [notify(client, namespace, pod, f"hold-{i}", wait=0) for i in range(K)]
        refused = notify(client, namespace, pod, f"hold-{K}", wait=0)
    assert [r.status_code for r in accepted] == [201] * K
    assert refused.status_code == 429, refused.text
    assert refused.json()["reason"] == "TooManyRequests"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["details"]["retryAfterSeconds"] >= 1
    assert len(records(cluster, namespace, fieldSelector=f"spec.podName={pod}")) == K


def test_ten_times_k_notifications_leave_at_most_k_records(
        cluster: Cluster, namespace: str) -> None:
    annotations = declare(app=[exec_notifier("ping", "echo pong")])
    pod = cluster.deploy(namespace, "chatty", annotations=annotations)[0]["metadata"]["name"]
    with cluster.admin() as client:
        for _ in range(10 * K):
            response = notify(client, namespace, pod, "ping", wait=20)
            assert response.status_code == 201, response.text
            assert response.json()["status"]["phase"] == "Succeeded"
    kept = records(cluster, namespace, fieldSelector=f"spec.podName={pod}")
    assert len(kept) == K
    assert all(r["status"]["phase"] == "Succeeded" for r in kept)


def test_finished_records_expire_after_their_ttl(cluster: Cluster, namespace: str) -> None:
    annotations = declare(app=[exec_notifier("ping", "echo pong")])
    pod = cluster.deploy(namespace, "brief", annotations=annotations)[0]["metadata"]["name"]
    with cluster.admin() as client:
        kept = notify(client, namespace, pod, "ping", ttlSecondsAfterFinished=3600).json()
        short = notify(client, namespace, pod, "ping", ttlSecondsAfterFinished=1).json()
    assert short["status"]["phase"] == "Succeeded"

    def names() -> set[str]:
        return {r["metadata"]["name"] for r in records(cluster, namespace)}

    wait_until(lambda: short["metadata"]["name"] not in names(), "the record to expire", 30)
    assert kept["metadata"]["name"] in names()


def test_records_of_deleted_pods_are_collected(cluster: Cluster, namespace: str) -> None:
    annotations = declare(app=[exec_notifier("ping", "echo pong")])
    pod = cluster.create_pod(namespace, "short-lived", annotations=annotations)
    with cluster.admin() as client:
        assert notify(client, namespace, "short-lived", "ping").json()["status"][
            "phase"] == "Succeeded"
        client.delete(f"/api/v1/namespaces/{namespace}/pods/short-lived",
                      params={"gracePeriodSeconds": "0"})
    assert pod["metadata"]["uid"]
    wait_until(lambda: records(cluster, namespace) == [], "the orphaned record to go", 30)
