"""Events of runs and Notifications, read with the real kubectl against the local control plane."""

from __future__ import annotations

import pytest

from tests.support.events import events_regarding
from tests.support.kube import Cluster, wait_until
from tests.support.notify import (
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify,
    wait_finished,
)

pytestmark = pytest.mark.cluster

CONTROLLER = "notifier.x-k8s.io/container-notifier"
SECRET = "hunter2-do-not-log"
SERVER_IDENTITY = "system:serviceaccount:container-notifier:container-notifier"


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


def test_a_notify_shows_notified_in_kubectl_events_and_describe_pod(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        record = notify(kube, namespace, db_pod, "quiesce").json()
    assert record["status"]["phase"] == "Succeeded", record
    shown = _kubectl_until(cluster, "events", "--for", f"pod/{db_pod}", "-n", namespace,
                           contains="Notified")
    line = next(line for line in shown.splitlines() if "Notified" in line)
    assert "Normal" in line and f"Pod/{db_pod}" in line
    assert "notifier quiesce succeeded" in line and "app: exit code 0" in line
    assert record["metadata"]["name"] in line
    assert SECRET not in shown
    described = _kubectl_until(cluster, "describe", "pod", db_pod, "-n", namespace,
                               contains="Notified")
    assert CONTROLLER in described  # the From column
    (event,) = [e for e in events_regarding(cluster, namespace, "Pod", db_pod)
                if e.get("reportingController") == CONTROLLER]
    assert event["regarding"]["uid"] == record["spec"]["podUID"]
    assert event["related"] == {"apiVersion": "notifier.x-k8s.io/v1alpha1",
                                "kind": "PodNotifier", "namespace": namespace,
                                "name": record["metadata"]["name"],
                                "uid": record["metadata"]["uid"]}
    assert event["reportingInstance"]


def test_a_failing_notifier_shows_notifier_failed_with_its_exit_code(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        assert notify(kube, namespace, db_pod, "fail").json()["status"]["phase"] == "Failed"
    shown = _kubectl_until(cluster, "events", "--for", f"pod/{db_pod}", "-n", namespace,
                           contains="NotifierFailed")
    line = next(line for line in shown.splitlines() if "NotifierFailed" in line)
    assert "Warning" in line and "app: exit code 3" in line and "NonZeroExitCode" in line
    assert SECRET not in shown


def test_describe_podnotifier_shows_its_events(
        cluster: Cluster, namespace: str, db_pod: str) -> None:
    with cluster.admin() as kube:
        name = notify(kube, namespace, db_pod, "fail").json()["metadata"]["name"]
    described = _kubectl_until(cluster, "describe", "podnotifier", name, "-n", namespace,
                               contains="NotifierFailed")
    events = described.split("Events:", 1)[1]
    assert "<none>" not in events
    assert "exit code 3" in events and SECRET not in events
    by_kind = _kubectl_until(cluster, "events", "--for", f"podnotifier/{name}", "-n",
                             namespace, contains="NotifierFailed")
    assert f"podnotifier/{name}" in by_kind.lower()


@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("create", "events.events.k8s.io", "yes"), ("patch", "events.events.k8s.io", "yes"),
    ("update", "events.events.k8s.io", "no"), ("delete", "events.events.k8s.io", "no"),
    ("list", "events.events.k8s.io", "no"), ("create", "events", "no")])
def test_the_server_may_create_and_patch_events_and_nothing_more(
        cluster: Cluster, verb: str, resource: str, allowed: str) -> None:
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
               timeout=20, interval=0.5)
    on_notification = events_regarding(cluster, namespace, "Notification", "flush-all")
    assert sorted(e["reason"] for e in on_notification) == ["Failed", "PodFailed", "Started"]
    (failed,) = [e for e in on_notification if e["reason"] == "Failed"]
    assert failed["type"] == "Warning" and "20 of 20 pods failed" in failed["note"]
    ours = [e for e in events_regarding(cluster, namespace, "Pod")
            + events_regarding(cluster, namespace, "PodNotifier")
            if e.get("reportingController") == CONTROLLER]
    assert len(ours) == 2 * pods  # one per run on the pod, one on its record
    assert {e["reason"] for e in ours} == {"NotifierFailed"}
    shown = cluster.kubectl("events", "--for", "notification/flush-all", "-n", namespace).stdout
    assert "PodFailed" in shown and "(x20 over" in shown
