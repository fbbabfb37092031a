"""The server with its default --storage=kubernetes end to end: notify through the aggregator,
the record kept as a storage custom resource, listed and watched with the storage
resourceVersions."""

from __future__ import annotations

import json

import pytest

from tests.support.kube import Cluster
from tests.support.notify import (
    API,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify,
    records,
    wait_finished,
)
from tests.support.storage import STORAGE_NAMESPACE, storage_path

pytestmark = pytest.mark.cluster



def test_records_live_in_the_kubernetes_api(cluster: Cluster, namespace: str) -> None:
    pod = cluster.deploy(namespace, "db", containers=("db",), annotations=declare(
        db=[exec_notifier("quiesce", "echo quiesced")]))[0]["metadata"]["name"]

    with cluster.admin() as kube:
        response = notify(kube, namespace, pod, "quiesce")
        assert response.status_code == 201, response.text
        record = response.json()
        name = record["metadata"]["name"]
        stored = kube.get(storage_path("storedpodnotifiers", namespace, name))

    assert record["status"]["phase"] == "Succeeded", record
    assert stored.status_code == 200, stored.text
    storage_object = stored.json()
    assert storage_object["kind"] == "StoredPodNotifier"
    assert storage_object["object"]["spec"]["podName"] == pod
    assert storage_object["object"]["status"]["phase"] == "Succeeded"
    assert storage_object["metadata"]["namespace"] == STORAGE_NAMESPACE
    assert storage_object["metadata"]["name"] == f"{namespace}.{name}"
    assert storage_object["object"]["metadata"]["uid"] == record["metadata"]["uid"]
    assert storage_object["metadata"]["uid"] != record["metadata"]["uid"]
    [listed] = records(cluster, namespace)
    assert listed["metadata"]["resourceVersion"] == storage_object["metadata"]["resourceVersion"]


def test_watch_from_a_listed_resource_version(cluster: Cluster, namespace: str) -> None:
    pod = cluster.deploy(namespace, "db", containers=("db",), annotations=declare(
        db=[exec_notifier("quiesce", "echo quiesced")]))[0]["metadata"]["name"]
    collection = f"{API}/namespaces/{namespace}/podnotifiers"

    with cluster.admin() as kube:
        listed = kube.get(collection).json()
        assert notify(kube, namespace, pod, "quiesce").status_code == 201
        with kube.stream("GET", collection, params={
                "watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"],
                "timeoutSeconds": "5"}) as watch:
            events = [json.loads(line) for line in watch.iter_lines() if line.strip()]
        too_old = kube.get(collection, params={"watch": "true", "resourceVersion": "1",
                                               "timeoutSeconds": "1"})

    assert [e["type"] for e in events][0] == "ADDED"
    assert events[-1]["object"]["status"]["phase"] == "Succeeded"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(listed["metadata"]["resourceVersion"])
    assert too_old.status_code == 200  # a watch answers 410 as an ERROR event
    assert '"code":410' in too_old.text.replace(" ", ""), too_old.text


def test_notification_fans_out_with_kubernetes_storage(cluster: Cluster, namespace: str) -> None:
    cluster.deploy(namespace, "web", replicas=3, containers=("app",), annotations=declare(
        app=[exec_notifier("flush", "echo flushed")]))

    with cluster.admin() as kube:
        created = create_notification(kube, namespace, notification("flush-all", "flush",
                                                                    {"app": "web"}))
        assert created.status_code == 201, created.text
        done = wait_finished(cluster, namespace, "flush-all")
        stored = kube.get(storage_path("storednotifications", namespace, "flush-all"))

    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert stored.status_code == 200, stored.text
    assert stored.json()["object"]["status"]["phase"] == "Succeeded"
    assert len(records(cluster, namespace, fieldSelector="spec.notifier=flush")) == 3
