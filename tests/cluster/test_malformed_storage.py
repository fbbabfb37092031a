"""Malformed storage objects against the real control plane (issue 20): an admin's storage
objects in one namespace that the server cannot decode (a run with ``object: {}``, a record with
``spec: "x"``) are skipped: a Notification in another namespace still starts and succeeds, a
replica restarted still starts and serves, and a killed replica's held run in another namespace
is still taken over. With the storage CRDs' schemas the grossest of them are refused by
kube-apiserver already; what the schema cannot check (a run's stored Notification spec, a
running record's pod name) is stored and skipped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from apiserver.registry.kube_objects import INSTANCE_LABEL, NAMESPACE_LABEL, storage_name
from tests.cluster.test_hold import finished, hold, owner_replica
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    create_notification,
    declare,
    exec_notifier,
    notification,
    wait_finished,
)
from tests.support.processes import running_sleeps
from tests.support.storage import storage_path

pytestmark = pytest.mark.cluster

INSTANCE = {INSTANCE_LABEL: "container-notifier"}
TAKEOVER_BOUND_SECONDS = 45.0
VALID_RUN_STATUS = {"podSets": 0, "stopped": "", "outcome": "", "outcomeReason": "",
                    "finished": False}


def store(cluster: Cluster, namespace: str, plural: str, kind: str, name: str,
          inner: dict[str, Any]) -> int:
    """Create, as admin, the storage object of `namespace/name` (in the storage namespace,
    where the server reads them) holding `inner`; the HTTP status (201, or 422 from the CRD
    schema)."""
    with cluster.admin() as kube:
        response = kube.post(storage_path(plural), json={
            "apiVersion": "storage.notifier.x-k8s.io/v1alpha1", "kind": kind,
            "metadata": {"name": storage_name(namespace, name),
                         "labels": {**INSTANCE, NAMESPACE_LABEL: namespace}},
            "sequence": 1, "object": inner})
    assert response.status_code in (201, 422), response.text
    return response.status_code


@pytest.fixture
def malformed(cluster: Cluster) -> Iterator[str]:
    """A namespace holding malformed storage objects (deleted afterwards with it)."""
    victim = cluster.create_namespace("malformed")
    stored = [
        store(cluster, victim, "storednotificationruns", "StoredNotificationRun", "bad-run",
              {}),
        store(cluster, victim, "storedpodnotifiers", "StoredPodNotifier", "bad-record",
              {"spec": "x"}),
    ]
    if 422 in stored:  # the schema refused them: store what it cannot check
        assert store(cluster, victim, "storednotificationruns", "StoredNotificationRun",
                     "bad-spec", {"metadata": {
                         "namespace": victim, "name": "bad-spec", "uid": "bad-spec-uid",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
                         "spec": {"notificationName": "n",
                                           "notification": {"notifier": 5, "selector": "x"}},
                                  "status": VALID_RUN_STATUS}) == 201
        assert store(cluster, victim, "storedpodnotifiers", "StoredPodNotifier",
                     "bad-pod", {"metadata": {
                         "namespace": victim, "name": "bad-pod", "uid": "bad-pod-uid",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
                         "spec": {"podName": 5, "podUID": "u", "notifier": "quiesce"},
                         "status": {"phase": "Running", "replica": "container-notifier-9",
                                    "containers": []}}) == 201
    yield victim
    cluster.delete_namespace(victim)
    with cluster.admin() as kube:  # the server deletes no malformed object
        for plural in ("storednotificationruns", "storedpodnotifiers"):
            kube.delete(storage_path(plural),
                        params={"labelSelector": f"{NAMESPACE_LABEL}={victim}"})


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("malformed-operator")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify",
                                                           "podnotifiers"],
         "verbs": ["create", "get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    ])
    return user


def test_the_schema_refuses_what_kube_apiserver_can_check(cluster: Cluster,
                                                           namespace: str) -> None:
    assert store(cluster, namespace, "storednotificationruns", "StoredNotificationRun", "r",
                 {}) == 422
    assert store(cluster, namespace, "storedpodnotifiers", "StoredPodNotifier", "n",
                 {"spec": "x"}) == 422
    assert store(cluster, namespace, "storednotificationpodsets", "StoredNotificationPodSet",
                 "p", {"spec": {"notificationUID": "u", "index": "0"}, "pods": []}) == 422


def test_malformed_storage_objects_stop_no_pass_start_or_takeover(
        cluster: Cluster, malformed: str, namespace: str, operator: User) -> None:
    cluster.deploy(namespace, "web", replicas=2, annotations=declare(
        app=[exec_notifier("quiesce", "echo quiesced")]))
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "snap", "quiesce", {"app": "web"}, parallelism=2))
    assert created.status_code == 201, created.text
    done = wait_finished(cluster, namespace, "snap", 60)
    assert done["status"]["phase"] == "Succeeded", done["status"]

    cluster.restart_replica(0)  # waits until it is ready and routed
    with cluster.client_for(operator) as client:
        listed = client.get(f"/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/"
                            "notifications")
    assert listed.status_code == 200 and [
        item["metadata"]["name"] for item in listed.json()["items"]] == ["snap"], listed.text

    workdir, sleep = cluster.layout.exec_workdir, "3595.3"
    name, _ = hold(cluster, namespace, operator, sleep)  # deploys "db"
    owner = owner_replica(cluster, namespace, name)
    cluster.kill_replica(owner)
    try:
        killed = time.monotonic()
        status = finished(cluster, namespace, name, TAKEOVER_BOUND_SECONDS)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
        wait_until(lambda: not running_sleeps(workdir, sleep), "the held command to stop", 10)
        print(f"\nmalformed storage: the held run was taken over "
              f"{time.monotonic() - killed:.1f} s after SIGKILL")
    finally:
        cluster.restart_replica(owner)
