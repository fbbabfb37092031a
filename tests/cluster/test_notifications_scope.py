"""Bug 6: a Notification's scope (its run and pod sets) is deleted with it, whichever way it goes:
through the API, or with its namespace (the namespace controller deletes each Notification
through the API). Read as the storage custom resources of the default backend
(``--storage=kubernetes``) through kube-apiserver; the SQLite backend's scopes are covered by
the scope store's tests on every backend (tests/unit/test_fanout_scope.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import Cluster, wait_until
from tests.support.notify import (
    API,
    create_notification,
    declare,
    exec_notifier,
    notification,
    wait_finished,
)
from tests.support.storage import storage_path

pytestmark = pytest.mark.cluster


Counts = dict[str, int]


def scopes(cluster: Cluster, uids: list[str]) -> Counts:
    """How many runs, pod sets and pods the scopes of these Notification UIDs hold."""
    with cluster.admin() as kube:
        def current(plural: str) -> list[dict[str, Any]]:
            listed = kube.get(storage_path(plural))
            assert listed.status_code == 200, listed.text
            return [item["object"] for item in listed.json()["items"]]  # the public objects

        runs, pod_sets = current("storednotificationruns"), current("storednotificationpodsets")
    mine = [s for s in pod_sets if s["spec"]["notificationUID"] in uids]
    return {"runs": sum(r["metadata"]["name"] in uids for r in runs), "pod sets": len(mine),
            "pods": sum(len(s["pods"]) for s in mine)}


def _namespace_gone(cluster: Cluster, name: str) -> bool:
    with cluster.admin() as kube:
        return kube.get(f"/api/v1/namespaces/{name}").status_code == 404


def test_the_scope_goes_with_the_notification_and_its_namespace(cluster: Cluster) -> None:
    namespace = cluster.create_namespace("scope")
    cluster.deploy(namespace, "db", replicas=3, annotations=declare(
        app=[exec_notifier("quiesce", "true")]))
    uids = []
    with cluster.admin() as kube:
        for name in ("by-api", "by-namespace"):
            created = create_notification(kube, namespace, notification(
                name, "quiesce", {"app": "db"}, parallelism=3))
            assert created.status_code == 201, created.text
            uids.append(created.json()["metadata"]["uid"])
            wait_finished(cluster, namespace, name)
    assert scopes(cluster, uids) == {"runs": 2, "pod sets": 2, "pods": 6}
    with cluster.admin() as kube:
        deleted = kube.delete(f"{API}/namespaces/{namespace}/notifications/by-api")
        assert deleted.status_code == 200, deleted.text
    wait_until(lambda: scopes(cluster, uids) == {"runs": 1, "pod sets": 1, "pods": 3},
               "the deleted Notification's scope to go", 30)
    cluster.delete_namespace(namespace)
    wait_until(lambda: _namespace_gone(cluster, namespace), "the namespace to be deleted", 90)
    assert scopes(cluster, uids) == {"runs": 0, "pod sets": 0, "pods": 0}
