"""Bug 6: a Notification's scope rows are deleted with it, whichever way it goes: through the
API, or with its namespace (the namespace controller deletes each Notification through the
API). Read from each replica's database while that replica is stopped (the replica that took
the create keeps the scope)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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

pytestmark = pytest.mark.cluster

DATABASE = "registry.sqlite3"


def scope_rows(data: Path, uids: list[str]) -> dict[str, int]:
    """How many run and pod rows the database holds for these Notification UIDs."""
    connection = sqlite3.connect(f"file:{data / DATABASE}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(uids))
        return {table: connection.execute(
            f"SELECT COUNT(*) FROM {table} WHERE notification_uid IN ({marks})", uids
        ).fetchone()[0] for table in ("notification_runs", "notification_pods")}
    finally:
        connection.close()


def scope_rows_of_every_replica(cluster: Cluster, uids: list[str]) -> dict[str, int]:
    """scope_rows summed over the replicas, each read while it is stopped."""
    total: dict[str, int] = {}
    for replica in range(cluster.replicas):
        with cluster.notifier_stopped(replica) as data:
            for table, count in scope_rows(data, uids).items():
                total[table] = total.get(table, 0) + count
    return total


def _namespace_gone(cluster: Cluster, name: str) -> bool:
    with cluster.admin() as kube:
        return kube.get(f"/api/v1/namespaces/{name}").status_code == 404


def test_scope_rows_go_with_the_notification_and_its_namespace(cluster: Cluster) -> None:
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
        assert scope_rows_of_every_replica(cluster, uids) == {"notification_runs": 2,
                                                              "notification_pods": 6}
        deleted = kube.delete(f"{API}/namespaces/{namespace}/notifications/by-api")
        assert deleted.status_code == 200, deleted.text
    cluster.delete_namespace(namespace)
    wait_until(lambda: _namespace_gone(cluster, namespace), "the namespace to be deleted", 90)
    assert scope_rows_of_every_replica(cluster, uids) == {"notification_runs": 0,
                                                          "notification_pods": 0}
