"""No tenant can reach the server's storage (issue 20, item 1), on the real control plane through
the aggregator, as real users with RBAC: a user with a namespace-wide `*` Role (a common grant to
a team) can read and write no storage object the server reads, and what they plant in their own
namespace, in either layout, changes no answer of the API, not even after a replica restarts
(the layout-1 move ran once). A namespace's deletion still deletes its records and
Notifications, and nothing is created in a namespace that does not exist."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from apiserver.registry.kube_objects import INSTANCE_LABEL, NAMESPACE_LABEL, STORAGE_API
from apiserver.registry.layout_migration import LAYOUT1_INSTANCE_LABEL
from tests.support.extension import cluster_pair, direct
from tests.support.kube import Cluster, User, wait_until
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
from tests.support.storage import STORAGE_NAMESPACE, storage_path, stored

pytestmark = pytest.mark.cluster

KINDS = {"storedpodnotifiers": "StoredPodNotifier", "storednotifications": "StoredNotification",
         "storednotificationruns": "StoredNotificationRun",
         "storednotificationpodsets": "StoredNotificationPodSet"}
INSTANCE = {INSTANCE_LABEL: "container-notifier"}
LAYOUT1_INSTANCE = {LAYOUT1_INSTANCE_LABEL: "container-notifier"}
EVERYTHING = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


@pytest.fixture
def team(cluster: Cluster, namespace: str) -> User:
    """A user with `*` on `*` in `namespace` and nothing elsewhere."""
    user = cluster.user("team-star")
    cluster.grant(namespace, user, EVERYTHING)
    return user


def forged_record(namespace: str, name: str, pod: str) -> dict[str, Any]:
    """A Succeeded record attributed to somebody else, that never ran."""
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"podName": pod, "podUID": "x", "notifier": "quiesce",
                     "requestedBy": {"username": "cluster-admin"}},
            "status": {"phase": "Succeeded", "reason": "Completed", "containers": []}}


def forged_run(namespace: str, name: str, pod: str) -> dict[str, Any]:
    """An unfinished record of the pod's quiesce, as if a replica were running it now: were it
    read, it would refuse the next quiesce of the pod (409)."""
    record = forged_record(namespace, name, pod)
    record["metadata"]["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["status"] = {"phase": "Running", "replica": "container-notifier-0",
                        "containers": [{"name": "app", "phase": "Running"}]}
    return record


def plant(client: Any, namespace: str, name: str, labels: dict[str, str],
          record: dict[str, Any]) -> None:
    """Write a StoredPodNotifier holding `record` into the tenant's own namespace."""
    planted = client.post(f"{STORAGE_API}/namespaces/{namespace}/storedpodnotifiers",
                          json={"apiVersion": "storage.notifier.x-k8s.io/v1alpha1",
                                "kind": "StoredPodNotifier",
                                "metadata": {"name": name, "labels": labels},
                                "sequence": 1, "object": record})
    assert planted.status_code == 201, planted.text


def test_a_namespace_wide_star_role_reaches_no_storage(cluster: Cluster, namespace: str,
                                                        team: User) -> None:
    pod = cluster.deploy(namespace, "db", annotations=declare(app=[
        exec_notifier("quiesce", "echo quiesced"),
        exec_notifier("slow", "sleep 30")]))[0]["metadata"]["name"]
    with cluster.client_for(team) as client:
        done = notify(client, namespace, pod, "quiesce")
        assert done.status_code == 201, done.text
        running = notify(client, namespace, pod, "slow", wait=0)
        assert running.status_code in (201, 202), running.text
        real = {done.json()["metadata"]["name"], running.json()["metadata"]["name"]}

        for plural in KINDS:
            mine = client.get(f"{STORAGE_API}/namespaces/{namespace}/{plural}")
            assert mine.status_code == 200 and mine.json()["items"] == [], (plural, mine.text)
            theirs = client.get(storage_path(plural))
            assert theirs.status_code == 403, (plural, theirs.text)
            everywhere = client.get(f"{STORAGE_API}/{plural}")
            assert everywhere.status_code == 403, (plural, everywhere.text)
        # The stored record of the run in flight, which decides the pod's next notifies.
        run = storage_path("storedpodnotifiers", namespace, running.json()["metadata"]["name"])
        assert client.get(run).status_code == 403
        assert client.delete(run).status_code == 403
        assert client.delete(f"{STORAGE_API}/namespaces/{namespace}/storedpodnotifiers/"
                             f"{running.json()['metadata']['name']}").status_code == 404

        # What a `*` Role can write: storage objects in its own namespace, in both layouts:
        # finished records, and unfinished runs of the pod's quiesce.
        for layout, labels in (("2", {**INSTANCE, NAMESPACE_LABEL: namespace}),
                               ("1", LAYOUT1_INSTANCE)):
            plant(client, namespace, f"forged-{layout}", labels,
                  forged_record(namespace, f"forged-{layout}", pod))
            plant(client, namespace, f"running-{layout}", labels,
                  forged_run(namespace, f"running-{layout}", pod))

        again = notify(client, namespace, pod, "slow", wait=0)
        assert again.status_code == 409, again.text  # the real record still holds the run
        assert again.json()["details"]["name"] == running.json()["metadata"]["name"], again.text
        # The planted runs of quiesce are never read: they refuse nothing.
        quiesced = notify(client, namespace, pod, "quiesce")
        assert quiesced.status_code == 201, quiesced.text
        assert quiesced.json()["status"]["phase"] == "Succeeded", quiesced.text
        real.add(quiesced.json()["metadata"]["name"])

    def names() -> set[str]:
        return {r["metadata"]["name"] for r in records(cluster, namespace)}

    def names_on(replica: int) -> set[str]:
        with direct(cluster, cluster_pair(cluster, "admin"), replica=replica) as server:
            listed = server.get(f"{API}/namespaces/{namespace}/podnotifiers")
        assert listed.status_code == 200, listed.text
        return {r["metadata"]["name"] for r in listed.json()["items"]}

    # Each replica lists from its cache, built from one watch's changes in order: once a
    # replica lists the quiesce record, written after the plants, a watch that carried the
    # planted objects has brought them to that list too.
    def lists_the_later_record(replica: int) -> bool:
        return real <= names_on(replica)

    for replica in range(cluster.replicas):
        wait_until(functools.partial(lists_the_later_record, replica),
                   f"replica {replica} to list the later record")
        assert names_on(replica) == real, replica
    assert names() == real
    cluster.restart_replica(0)  # a start moves nothing more from users' namespaces
    assert names() == real
    with cluster.admin() as kube:
        ours = stored(kube, "storedpodnotifiers", namespace)
    assert {o["object"]["metadata"]["name"] for o in ours} == real
    assert all(o["metadata"]["namespace"] == STORAGE_NAMESPACE for o in ours)


def test_a_deleted_namespace_takes_its_records_and_notifications(cluster: Cluster) -> None:
    victim = cluster.create_namespace("gone")
    cluster.deploy(victim, "web", replicas=2, annotations=declare(
        app=[exec_notifier("flush", "echo flushed")]))
    with cluster.admin() as kube:
        created = create_notification(kube, victim, notification("flush-all", "flush",
                                                                  {"app": "web"}))
        assert created.status_code == 201, created.text
    assert wait_finished(cluster, victim, "flush-all")["status"]["phase"] == "Succeeded"
    assert len(records(cluster, victim)) == 2

    started = time.monotonic()
    cluster.delete_namespace(victim)
    with cluster.admin() as kube:
        wait_until(lambda: kube.get(f"/api/v1/namespaces/{victim}").status_code == 404,
                   f"namespace {victim} to be deleted", 90)
        deleted = time.monotonic() - started
        wait_until(lambda: all(not stored(kube, plural, victim) for plural in KINDS),
                   f"the storage objects of {victim} to be deleted", 60)
        print(f"\nnamespace deletion: gone after {deleted:.1f} s, its storage objects after "
              f"{time.monotonic() - started:.1f} s")
        nowhere = create_notification(kube, victim, notification(  # AllPods: no pod needed
            "late", "flush", {"app": "web"}, policy="AllPods"))
    assert nowhere.status_code == 404, nowhere.text
    assert nowhere.json()["message"] == f'namespaces "{victim}" not found', nowhere.text


def test_nothing_is_created_in_a_terminating_namespace(cluster: Cluster) -> None:
    """A namespace held in Terminating by a finalizer of ours refuses new Notifications (403),
    as kube-apiserver refuses new objects there."""
    victim = cluster.create_namespace("terminating")
    holder = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "hold", "namespace": victim,
                           "finalizers": ["notifier.x-k8s.io/test-hold"]}}
    with cluster.admin() as kube:
        assert kube.post(f"/api/v1/namespaces/{victim}/configmaps",
                         json=holder).status_code == 201
        cluster.delete_namespace(victim)
        wait_until(lambda: kube.get(f"/api/v1/namespaces/{victim}").json().get(
            "status", {}).get("phase") == "Terminating", f"{victim} to be terminating", 30)
        try:
            refused = kube.post(f"{API}/namespaces/{victim}/notifications", json=notification(
                "late", "flush", {"app": "web"}, policy="AllPods"))
        finally:
            kube.patch(f"/api/v1/namespaces/{victim}/configmaps/hold",
                       json={"metadata": {"finalizers": None}},
                       headers={"Content-Type": "application/merge-patch+json"})
    assert refused.status_code == 403, refused.text
    assert "because it is being terminated" in refused.json()["message"], refused.text
