"""After kube-apiserver restarts, the server replicas serve again by themselves, within
seconds of kube-apiserver answering (issue 21, deliverable 6): no replica is restarted, the
next notify through the aggregator is answered 201 once the APIService is Available, and the
replicas' informers resync (a pod created after the restart is notified on each replica)."""

from __future__ import annotations

import pytest

from localcluster import plane
from tests.support.control_plane import (
    OUTAGE_SECONDS,
    restart_kube_apiserver_and_time_recovery,
    settle_after_kube_apiserver_restart,
)
from tests.support.kube import Cluster
from tests.support.notify import body, declare, exec_notifier, notify_path

pytestmark = pytest.mark.cluster

NOTIFY = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]}


def test_after_kube_apiserver_restarts_notify_succeeds_again_without_restarting_a_replica(
        cluster: Cluster, namespace: str) -> None:
    annotations = declare(app=[exec_notifier("ping", "true")])
    (pod,) = cluster.deploy(namespace, "steady", annotations=annotations)
    name = pod["metadata"]["name"]
    user = cluster.user("recovery-caller")
    cluster.grant(namespace, user, [NOTIFY])
    replicas = [(r.name, r.pid) for r in plane.replicas(cluster.layout)]

    with cluster.client_for(user, timeout=15) as client:
        first = client.post(notify_path(namespace, name), params={"waitSeconds": "10"},
                            json=body("ping"))
        assert first.status_code == 201, first.text
        recovery = restart_kube_apiserver_and_time_recovery(cluster, client, namespace, name,
                                                            annotations)
    print(f"\nafter a {OUTAGE_SECONDS:.0f} s outage, from kube-apiserver answering /readyz "
          f"again: APIService Available {recovery.apiservice_available_seconds:.1f} s, first "
          f"notify 201 {recovery.first_notify_seconds:.1f} s; a pod created then Running "
          f"{recovery.new_pod_running_seconds:.1f} s, notified 201 "
          f"{recovery.new_pod_notify_seconds:.1f} s")
    settle_after_kube_apiserver_restart(cluster)  # each replica's pod informers resynced
    assert [(r.name, r.pid) for r in plane.replicas(cluster.layout)] == replicas
