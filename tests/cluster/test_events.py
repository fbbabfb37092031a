"""Events of runs and Notifications, read with the real kubectl against the local control plane."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.kube.events import Limits
from tests.support.events import events_regarding
from tests.support.extension import cluster_pair, direct
from tests.support.kube import Cluster, wait_until
from tests.support.notify import (
    body,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify,
    notify_path,
    wait_finished,
)

pytestmark = pytest.mark.cluster

CONTROLLER = "notifier.x-k8s.io/container-notifier"
SECRET = "hunter2-do-not-log"
SERVER_IDENTITY = "system:serviceaccount:container-notifier:container-notifier"
SERIES_PATCHED_WITHIN = Limits().series_patch_interval_seconds + 15
"""How long a series count may take to show: the server's patch interval (its default) and
some slack."""


@pytest.fixture
def db_pod(cluster: Cluster, namespace: str) -> str:
    return cluster.create_pod(namespace, "db-0", annotations=declare(app=[
        exec_notifier("quiesce", f"echo {SECRET}"),
        exec_notifier("fail", f"echo {SECRET} >&2; exit 3"),
    ]))["metadata"]["name"]


def _kubectl_until(cluster: Cluster, *args: str, contains: str) -> str:
    """kubectl's output, once it contains `contains` (Events are written asynchronously)."""
    output = ""

    def shown() -> bool:
        nonlocal output
        output = cluster.kubectl(*args).stdout
        return contains in output

    wait_until(shown, f"kubectl {' '.join(args)} to show {contains}", timeout=20, interval=0.5)
    return output


def _ours(cluster: Cluster, namespace: str, kind: str, name: str = "") -> list[dict[str, Any]]:
    """The Events this server recorded regarding objects of `kind` (named `name`)."""
    return [e for e in events_regarding(cluster, namespace, kind, name)
            if e.get("reportingController") == CONTROLLER]


def test_a_notify_shows_notified_in_kubectl_events_and_describe_pod(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        record = notify(kube, namespace, db_pod, "quiesce").json()
    assert record["status"]["phase"] == "Succeeded", record
    shown = _kubectl_until(cluster, "events", "--for", f"pod/{db_pod}", "-n", namespace,
                           contains="Notified")
    line = next(line for line in shown.splitlines() if "Notified" in line)
    assert "Normal" in line and f"Pod/{db_pod}" in line
    assert "notifier quiesce requested by " in line and "app: exit code 0" in line
    assert record["metadata"]["name"] in line
    assert SECRET not in shown
    described = _kubectl_until(cluster, "describe", "pod", db_pod, "-n", namespace,
                               contains="Notified")
    assert CONTROLLER in described  # the From column
    (event,) = _ours(cluster, namespace, "Pod", db_pod)
    assert event["regarding"]["uid"] == record["spec"]["podUID"]
    assert "related" not in event
    assert f"requested by {record['spec']['requestedBy']['username']} " in event["note"]
    assert f"latest: PodNotifier {record['metadata']['name']};" in event["note"]
    assert event["reportingInstance"]


def _notify_on_replica_0(cluster: Cluster, namespace: str, pod: str, notifier: str
                         ) -> dict[str, Any]:
    """A notify as admin sent to replica 0 itself (through the front proxy's identity): each
    replica records its own series, so runs must share a replica to share an Event."""
    with direct(cluster, cluster_pair(cluster, "front-proxy-client"), replica=0) as server:
        response = server.post(notify_path(namespace, pod), json=body(notifier),
                               params={"waitSeconds": "20"}, headers=[
                                   ("X-Remote-User", "admin"),
                                   ("X-Remote-Group", "system:masters")])
    assert response.status_code == 201, response.text
    return response.json()


def test_two_notifies_by_one_user_are_one_event_counting_2_naming_the_latest(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    first = _notify_on_replica_0(cluster, namespace, db_pod, "quiesce")
    wait_until(lambda: len(_ours(cluster, namespace, "Pod", db_pod)) == 1,
               "the first run's Event", timeout=20, interval=0.5)
    latest = _notify_on_replica_0(cluster, namespace, db_pod, "quiesce")
    assert first["status"]["phase"] == latest["status"]["phase"] == "Succeeded"
    assert latest["spec"]["requestedBy"]["username"] == "admin"

    def counted() -> list[dict[str, Any]]:
        return [e for e in _ours(cluster, namespace, "Pod", db_pod)
                if (e.get("series") or {}).get("count") == 2]

    wait_until(lambda: bool(counted()), "the run Event's series to count 2",
               timeout=SERIES_PATCHED_WITHIN, interval=0.5)
    (event,) = _ours(cluster, namespace, "Pod", db_pod)
    assert event["series"]["count"] == 2 and event["reason"] == "Notified"
    assert f"requested by {latest['spec']['requestedBy']['username']} " in event["note"]
    assert f"latest: PodNotifier {latest['metadata']['name']};" in event["note"]
    assert first["metadata"]["name"] not in event["note"]
    assert _ours(cluster, namespace, "PodNotifier") == []


def test_a_failing_notifier_shows_notifier_failed_with_its_exit_code(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        assert notify(kube, namespace, db_pod, "fail").json()["status"]["phase"] == "Failed"
    shown = _kubectl_until(cluster, "events", "--for", f"pod/{db_pod}", "-n", namespace,
                           contains="NotifierFailed")
    line = next(line for line in shown.splitlines() if "NotifierFailed" in line)
    assert "Warning" in line and "app: exit code 3" in line and "NonZeroExitCode" in line
    assert SECRET not in shown


def test_no_event_regards_the_record_whose_status_is_the_result(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        name = notify(kube, namespace, db_pod, "fail").json()["metadata"]["name"]
    _kubectl_until(cluster, "events", "--for", f"pod/{db_pod}", "-n", namespace,
                   contains=name)
    assert _ours(cluster, namespace, "PodNotifier") == []
    described = cluster.kubectl("describe", "podnotifier", name, "-n", namespace).stdout
    assert "NonZeroExitCode" in described and SECRET not in described.split("Events:")[-1]


@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("create", "events.events.k8s.io", "yes"), ("patch", "events.events.k8s.io", "yes"),
    ("update", "events.events.k8s.io", "no"), ("delete", "events.events.k8s.io", "no"),
    ("list", "events.events.k8s.io", "no"), ("patch", "events", "yes"),
    ("create", "events", "no"), ("update", "events", "no"), ("get", "events", "no")])
def test_the_server_may_create_and_patch_events_and_nothing_more(
        cluster: Cluster, verb: str, resource: str, allowed: str) -> None:
    """events.k8s.io: create and patch (the count); core: patch only (a series' latest note,
    which events.k8s.io/v1 refuses to change)."""
    answer = cluster.kubectl("auth", "can-i", verb, resource, "-n", "default",
                             f"--as={SERVER_IDENTITY}", check=False)
    assert answer.stdout.strip() == allowed, answer.stderr


def test_a_notification_over_20_failing_pods_writes_a_bounded_number_of_events(
        cluster: Cluster, namespace: str) -> None:
    pods = 20
    cluster.deploy(namespace, "web", replicas=pods, annotations=declare(
        app=[exec_notifier("flush", "exit 1")]))
    with cluster.admin() as kube:
        created = create_notification(kube, namespace, notification(
            "flush-all", "flush", {"app": "web"}, parallelism=10, failurePolicy="Continue"))
    assert created.status_code == 201, created.text
    status = wait_finished(cluster, namespace, "flush-all")["status"]
    assert status["counts"]["failed"] == pods

    def pod_failed_count() -> int:
        series = [e for e in events_regarding(cluster, namespace, "Notification", "flush-all")
                  if e["reason"] == "PodFailed"]
        assert len(series) == 1, series  # one series, not one Event per pod
        return (series[0].get("series") or {}).get("count", 1)

    wait_until(lambda: pod_failed_count() == pods, f"the PodFailed series to count {pods}",
               timeout=SERIES_PATCHED_WITHIN, interval=0.5)
    on_notification = events_regarding(cluster, namespace, "Notification", "flush-all")
    assert sorted(e["reason"] for e in on_notification) == ["Failed", "PodFailed", "Started"]
    (failed,) = [e for e in on_notification if e["reason"] == "Failed"]
    assert failed["type"] == "Warning" and "20 of 20 pods failed" in failed["note"]
    ours = _ours(cluster, namespace, "Pod")
    assert len(ours) == pods  # one per pod's run, none on the records
    assert {e["reason"] for e in ours} == {"NotifierFailed"}
    requester = created.json()["spec"]["requestedBy"]["username"]
    assert all(f"requested by {requester} " in e["note"] for e in ours)
    assert _ours(cluster, namespace, "PodNotifier") == []
    shown = cluster.kubectl("events", "--for", "notification/flush-all", "-n", namespace).stdout
    assert "PodFailed" in shown and "(x20 over" in shown
