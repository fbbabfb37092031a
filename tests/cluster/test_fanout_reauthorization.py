"""A Notification notifies each pod as its creator at that moment: an AllPods Notification whose
creator lost `create pods/notify` starts no new pod (issue 9, finding 4)."""

from __future__ import annotations

import time

import pytest

from tests.support.kube import Cluster, wait_until
from tests.support.notify import (
    create_notification,
    declare,
    exec_notifier,
    notification,
    records,
    wait_finished,
)

pytestmark = pytest.mark.cluster

AUTHORIZATION_CACHE_SECONDS = 10
"""The server's --authorization-webhook-cache-authorized-ttl default."""


def test_a_revoked_creator_notifies_no_new_pod(cluster: Cluster, namespace: str) -> None:
    creator = cluster.user("revoked-operator")
    cluster.grant(namespace, creator, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications"],
         "verbs": ["create", "get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    ])
    cluster.grant(namespace, creator, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]},
    ], name="may-notify")
    annotations = declare(app=[exec_notifier("reload", "echo reloaded")])
    cluster.create_pod(namespace, "early", labels={"app": "web"}, annotations=annotations)
    with cluster.client_for(creator) as client:
        created = create_notification(client, namespace, notification(
            "follow", "reload", {"app": "web"}, policy="AllPods", failurePolicy="Continue",
            activeDeadlineSeconds=AUTHORIZATION_CACHE_SECONDS + 20))
    assert created.status_code == 201, created.text

    def notified() -> set[str]:
        return {r["spec"]["podName"] for r in records(
            cluster, namespace, labelSelector="notifier.x-k8s.io/notification=follow")}

    wait_until(lambda: "early" in notified(), "the first pod")
    with cluster.admin() as kube:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
                    "/rolebindings/may-notify").raise_for_status()
    time.sleep(AUTHORIZATION_CACHE_SECONDS + 1)  # the allowed answer leaves the server's cache
    cluster.create_pod(namespace, "late", labels={"app": "web"}, annotations=annotations)

    status = wait_finished(cluster, namespace, "follow", timeout=60)["status"]
    assert notified() == {"early"}, "the late pod was notified for a creator who lost the right"
    assert status["phase"] == "Failed"
    assert (status["counts"]["succeeded"], status["counts"]["failed"]) == (1, 1)
    assert "NotAuthorized: 1" in status["conditions"][0]["message"]
