"""Bug 6: a Notification's scope (its run and pod sets) is deleted with it, whichever way it goes:
through the API, or with its namespace (the namespace controller deletes each Notification
through the API), on either storage backend. With ``--storage=kubernetes`` the scope is read as
storage custom resources through kube-apiserver; with ``--storage=sqlite`` from the server's
database while the server is stopped."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
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
from tests.support.storage import server_with_flags

pytestmark = pytest.mark.cluster

DATABASE = "registry.sqlite3"
STORAGE_API = "/apis/storage.notifier.x-k8s.io/v1alpha1"

Counts = dict[str, int]


def tally(runs: list[dict[str, Any]], pod_sets: list[dict[str, Any]], uids: list[str]
          ) -> Counts:
    """How many runs, pod sets and pods the scopes of these Notification UIDs hold (given the
    public objects of the two private resources)."""
    mine = [s for s in pod_sets if s["spec"]["notificationUID"] in uids]
    return {"runs": sum(r["metadata"]["name"] in uids for r in runs), "pod sets": len(mine),
            "pods": sum(len(s["pods"]) for s in mine)}


def in_database(data: Path, uids: list[str]) -> Counts:
    connection = sqlite3.connect(f"file:{data / DATABASE}?mode=ro", uri=True)
    try:
        def current(resource: str) -> list[dict[str, Any]]:
            return [json.loads(row[0]) for row in connection.execute(
                "SELECT object FROM revisions WHERE resource = ? AND superseded IS NULL",
                (resource,))]

        return tally(current("notificationruns"), current("notificationpodsets"), uids)
    finally:
        connection.close()


def in_kubernetes(cluster: Cluster, uids: list[str]) -> Counts:
    with cluster.admin() as kube:
        def current(plural: str) -> list[dict[str, Any]]:
            listed = kube.get(f"{STORAGE_API}/{plural}")
            assert listed.status_code == 200, listed.text
            return [{**item["object"], "metadata": item["metadata"]}
                    for item in listed.json()["items"]]

        return tally(current("storednotificationruns"), current("storednotificationpodsets"),
                     uids)


@contextlib.contextmanager
def sqlite_scopes(cluster: Cluster) -> Iterator[Callable[[list[str]], Counts]]:
    def read(uids: list[str]) -> Counts:
        with cluster.notifier_stopped() as data:
            return in_database(data, uids)

    with server_with_flags(cluster, "--storage=sqlite"):
        yield read


@contextlib.contextmanager
def kubernetes_scopes(cluster: Cluster) -> Iterator[Callable[[list[str]], Counts]]:
    with server_with_flags(cluster, "--storage=kubernetes"):
        yield lambda uids: in_kubernetes(cluster, uids)


BACKENDS = {"sqlite": sqlite_scopes, "kubernetes": kubernetes_scopes}


def _namespace_gone(cluster: Cluster, name: str) -> bool:
    with cluster.admin() as kube:
        return kube.get(f"/api/v1/namespaces/{name}").status_code == 404


@pytest.mark.parametrize("storage", sorted(BACKENDS))
def test_the_scope_goes_with_the_notification_and_its_namespace(cluster: Cluster,
                                                                storage: str) -> None:
    with BACKENDS[storage](cluster) as scopes:
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
        assert scopes(uids) == {"runs": 2, "pod sets": 2, "pods": 6}
        with cluster.admin() as kube:
            deleted = kube.delete(f"{API}/namespaces/{namespace}/notifications/by-api")
            assert deleted.status_code == 200, deleted.text
        assert scopes(uids) == {"runs": 1, "pod sets": 1, "pods": 3}  # deleted with it
        cluster.delete_namespace(namespace)
        wait_until(lambda: _namespace_gone(cluster, namespace), "the namespace to be deleted",
                   90)
        assert scopes(uids) == {"runs": 0, "pod sets": 0, "pods": 0}
