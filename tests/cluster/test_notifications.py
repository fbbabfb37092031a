"""Notification fan-out against the real control plane, through the aggregator."""

from __future__ import annotations

import json
import signal
from datetime import datetime
from typing import Any

import pytest

from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    create_notification,
    declare,
    exec_notifier,
    get_notification,
    notification,
    records,
    wait_finished,
)

pytestmark = pytest.mark.cluster

LABEL = "notifier.x-k8s.io/notification"


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    """May create Notifications and notify pods; may exec too, so the bare pods of these
    tests (which no template vouches for) are trusted by rule 2."""
    user = cluster.user("db-operator")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify"],
         "verbs": ["create", "get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    ])
    return user


def _quiesce_pods(cluster: Cluster, namespace: str, fail: set[str], names: list[str]) -> None:
    for name in names:
        script = "echo quiesce failed >&2; exit 1" if name in fail else f"echo {name} quiesced"
        cluster.create_pod(namespace, name, labels={"app": "db"}, annotations=declare(app=[
            exec_notifier("quiesce", script), exec_notifier("unquiesce", f"echo {name} resumed")]))


def _by_pod(cluster: Cluster, namespace: str, notifier: str) -> dict[str, dict]:
    return {r["spec"]["podName"]: r for r in records(
        cluster, namespace, fieldSelector=f"spec.notifier={notifier}")}


def test_three_replicas_all_succeed(cluster: Cluster, namespace: str, operator: User) -> None:
    cluster.deploy(namespace, "db", replicas=3, annotations=declare(
        app=[exec_notifier("quiesce", "echo quiesced")]))
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "quiesce-all", "quiesce", {"app": "db"}, parallelism=3))
    assert created.status_code == 201, created.text
    status = wait_finished(cluster, namespace, "quiesce-all")["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"] == {"total": 3, "pending": 0, "running": 0, "succeeded": 3,
                                "failed": 0, "skipped": 0, "rolledBack": 0}
    assert status["conditions"][0]["type"] == "Complete"
    labelled = records(cluster, namespace, labelSelector=f"{LABEL}=quiesce-all")
    assert len(labelled) == 3
    assert all(r["status"]["containers"][0]["stdout"] == "quiesced\n" for r in labelled)
    assert all(r["spec"]["requestedBy"]["username"] == "db-operator" for r in labelled)


def test_abort_stops_new_starts_and_rolls_back(
        cluster: Cluster, namespace: str, operator: User) -> None:
    _quiesce_pods(cluster, namespace, fail={"db-1"}, names=["db-0", "db-1", "db-2"])
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "snapshot", "quiesce", {"app": "db"}, rollback={"notifier": "unquiesce"}))
    status = wait_finished(cluster, namespace, "snapshot")["status"]
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["reason"] == "FailFast"
    counts = status["counts"]
    assert (counts["succeeded"], counts["failed"], counts["pending"]) == (1, 1, 1)
    assert counts["rolledBack"] == 1
    quiesced = _by_pod(cluster, namespace, "quiesce")
    assert set(quiesced) == {"db-0", "db-1"}
    assert quiesced["db-1"]["status"]["phase"] == "Failed"
    unquiesced = _by_pod(cluster, namespace, "unquiesce")
    assert set(unquiesced) == {"db-0"}
    assert unquiesced["db-0"]["status"]["containers"][0]["stdout"] == "db-0 resumed\n"


def test_continue_runs_every_pod(cluster: Cluster, namespace: str, operator: User) -> None:
    _quiesce_pods(cluster, namespace, fail={"db-1"}, names=["db-0", "db-1", "db-2"])
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "best-effort", "quiesce", {"app": "db"}, failurePolicy="Continue"))
    status = wait_finished(cluster, namespace, "best-effort")["status"]
    assert status["phase"] == "Failed"
    assert (status["counts"]["succeeded"], status["counts"]["failed"]) == (2, 1)
    assert set(_by_pod(cluster, namespace, "quiesce")) == {"db-0", "db-1", "db-2"}


def test_pod_without_the_notifier_is_skipped(
        cluster: Cluster, namespace: str, operator: User) -> None:
    _quiesce_pods(cluster, namespace, fail=set(), names=["db-0"])
    cluster.create_pod(namespace, "cache", labels={"app": "db"})
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification("q", "quiesce", {"app": "db"}))
    status = wait_finished(cluster, namespace, "q")["status"]
    counts = status["counts"]
    assert (counts["succeeded"], counts["skipped"], counts["failed"]) == (1, 1, 0)
    assert status["phase"] == "Succeeded"
    complete, skipped = status["conditions"]
    assert (complete["type"], complete["status"]) == ("Complete", "True")
    assert (skipped["type"], skipped["status"], skipped["reason"]) == (
        "PodsSkipped", "True", "NotifierNotDeclared")
    assert skipped["message"] == ('1 of 2 pods do not declare notifier "quiesce" and were '
                                  "skipped: cache")


def _refusal(answer) -> dict:
    """The one cause of a 422 Invalid, as kube-apiserver's aggregator passed it on."""
    assert answer.status_code == 422, answer.text
    status = answer.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    (cause,) = status["details"]["causes"]
    assert status["message"] == (f'Notification.notifier.x-k8s.io "{status["details"]["name"]}" '
                                 f"is invalid: {cause['field']}: {cause['message']}")
    return cause


def _stored_notifications(cluster: Cluster, namespace: str) -> list[dict]:
    with cluster.admin() as kube:
        listed = kube.get(f"/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/"
                          "notifications")
    assert listed.status_code == 200, listed.text
    return listed.json()["items"]


def test_a_misspelled_notifier_is_refused_naming_what_is_declared(
        cluster: Cluster, namespace: str, operator: User) -> None:
    """Issue 11: it used to end Succeeded/Complete with every pod skipped."""
    _quiesce_pods(cluster, namespace, fail=set(), names=["db-0", "db-1"])
    with cluster.client_for(operator) as client:
        answer = create_notification(client, namespace, notification(
            "snap", "quiesse", {"app": "db"}))
    assert _refusal(answer) == {
        "reason": "FieldValueInvalid", "field": "spec.notifier",
        "message": 'Invalid value: "quiesse": no pod selected by app=db declares it; they '
                   "declare: quiesce, unquiesce (in their notifier.x-k8s.io/notifiers "
                   "annotation)"}
    assert _stored_notifications(cluster, namespace) == []
    assert records(cluster, namespace) == []


def test_a_selector_that_matches_nothing_is_refused(
        cluster: Cluster, namespace: str, operator: User) -> None:
    """Issue 11: it used to end Succeeded with 0 of 0 pods."""
    _quiesce_pods(cluster, namespace, fail=set(), names=["db-0"])
    with cluster.client_for(operator) as client:
        answer = create_notification(client, namespace, notification(
            "snap", "quiesce", {"app": "dbb"}))
    cause = _refusal(answer)
    assert cause["field"] == "spec.selector"
    assert cause["message"].startswith(
        f'Invalid value: "app=dbb": selects no pod in namespace "{namespace}"'), cause
    assert _stored_notifications(cluster, namespace) == []
    result = cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-",
                             user=operator, check=False,
                             input=json.dumps(notification("snap", "quiesse", {"app": "db"})))
    assert result.returncode != 0
    assert ('The Notification "snap" is invalid: spec.notifier: Invalid value: "quiesse": no '
            "pod selected by app=db declares it; they declare: quiesce, unquiesce"
            in result.stderr), result.stderr
    assert _stored_notifications(cluster, namespace) == []


def test_an_all_pods_notification_with_nothing_matching_waits_visibly(
        cluster: Cluster, namespace: str, operator: User) -> None:
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "later", "reload", {"app": "web"}, policy="AllPods", activeDeadlineSeconds=15))
    assert created.status_code == 201, created.text
    (waiting,) = created.json()["status"]["conditions"]
    assert (waiting["type"], waiting["status"], waiting["reason"]) == (
        "WaitingForPods", "True", "NoPodsSelected")
    assert waiting["message"] == (f'no pod in namespace "{namespace}" matches app=web yet; pods '
                                  "are notified as they start running")
    stored = get_notification(cluster, namespace, "later")["status"]["conditions"]
    assert [c["type"] for c in stored] == ["WaitingForPods"]
    cluster.create_pod(namespace, "web-0", labels={"app": "web"}, annotations=declare(
        app=[exec_notifier("reload", "echo reloaded")]))

    def joined() -> bool:
        conditions = get_notification(cluster, namespace, "later")["status"]["conditions"]
        return any(c["type"] == "WaitingForPods" and c["status"] == "False" for c in conditions)

    wait_until(joined, "the WaitingForPods condition to turn False", 20)
    status = wait_finished(cluster, namespace, "later", timeout=40)["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"]["succeeded"] == 1
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Complete", "True", "PodsSucceeded"), ("WaitingForPods", "False", "PodsJoined")]


def test_pre_existing_pods_scope_is_fixed(
        cluster: Cluster, namespace: str, operator: User) -> None:
    annotations = declare(app=[exec_notifier("quiesce", "sleep 2")])
    cluster.create_pod(namespace, "early", labels={"app": "db"}, annotations=annotations)
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification("fixed", "quiesce", {"app": "db"}))
    wait_until(lambda: get_notification(cluster, namespace, "fixed")["status"]["counts"][
        "running"] == 1, "the first pod to start")
    cluster.create_pod(namespace, "late", labels={"app": "db"}, annotations=annotations)
    status = wait_finished(cluster, namespace, "fixed")["status"]
    assert status["counts"]["total"] == 1
    assert set(_by_pod(cluster, namespace, "quiesce")) == {"early"}


def test_all_pods_policy_notifies_later_pods_once(
        cluster: Cluster, namespace: str, operator: User) -> None:
    annotations = declare(app=[exec_notifier("reload", "echo reloaded")])
    cluster.create_pod(namespace, "early", labels={"app": "web"}, annotations=annotations)
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "follow", "reload", {"app": "web"}, policy="AllPods", activeDeadlineSeconds=8))
    wait_until(lambda: "early" in _by_pod(cluster, namespace, "reload"), "the first pod")
    cluster.create_pod(namespace, "late", labels={"app": "web"}, annotations=annotations)
    wait_until(lambda: "late" in _by_pod(cluster, namespace, "reload"), "the later pod", 20)
    status = wait_finished(cluster, namespace, "follow", timeout=30)["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"]["total"] == 2
    assert len(records(cluster, namespace, labelSelector=f"{LABEL}=follow")) == 2


def test_pod_deleted_mid_run_is_a_podDeleted_failure(
        cluster: Cluster, namespace: str, operator: User) -> None:
    cluster.create_pod(namespace, "doomed", labels={"app": "db"},
                       annotations=declare(app=[exec_notifier("quiesce", "sleep 30", 60)]))
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification("gone", "quiesce", {"app": "db"}))
    wait_until(lambda: get_notification(cluster, namespace, "gone")["status"]["counts"][
        "running"] == 1, "the pod to start")
    with cluster.admin() as kube:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/doomed",
                    params={"gracePeriodSeconds": "0"})
    # The finished record of a deleted pod is collected within seconds: read it as it ends.
    ended: list[dict[str, Any]] = []

    def record_ended() -> bool:
        ended[:] = [r for r in records(cluster, namespace, labelSelector=f"{LABEL}=gone")
                    if r["status"].get("phase") == "Failed"]
        return bool(ended)

    wait_until(record_ended, "the pod's record to end", 30, interval=0.1)
    assert [r["status"]["reason"] for r in ended] == ["PodDeleted"]
    status = wait_finished(cluster, namespace, "gone", timeout=30)["status"]
    assert status["phase"] == "Failed"
    assert status["counts"]["failed"] == 1


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    current = peak = 0
    for _, change in edges:
        current += change
        peak = max(peak, current)
    return peak


def test_parallelism_is_never_exceeded(cluster: Cluster, namespace: str, operator: User) -> None:
    cluster.deploy(namespace, "db", replicas=6, annotations=declare(
        app=[exec_notifier("quiesce", "sleep 1")]))
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "capped", "quiesce", {"app": "db"}, parallelism=2))
    assert wait_finished(cluster, namespace, "capped")["status"]["phase"] == "Succeeded"
    intervals = [(datetime.fromisoformat(r["status"]["startTime"]),
                  datetime.fromisoformat(r["status"]["completionTime"]))
                 for r in records(cluster, namespace, labelSelector=f"{LABEL}=capped")]
    assert len(intervals) == 6
    assert _max_overlap(intervals) == 2


def test_creating_needs_notify_permission_too(cluster: Cluster, namespace: str) -> None:
    user = cluster.user("planner")
    cluster.grant(namespace, user, [{"apiGroups": ["notifier.x-k8s.io"],
                                     "resources": ["notifications"], "verbs": ["create"]}])
    with cluster.client_for(user) as client:
        refused = create_notification(client, namespace, notification("n", "quiesce",
                                                                       {"app": "db"}))
    assert refused.status_code == 403
    assert 'User "planner" cannot create resource "pods/notify"' in refused.json()["message"]


def test_deleting_a_running_notification_rolls_back(
        cluster: Cluster, namespace: str, operator: User) -> None:
    for name in ("db-0", "db-1"):
        cluster.create_pod(namespace, name, labels={"app": "db"}, annotations=declare(app=[
            exec_notifier("quiesce", "sleep 1" if name == "db-0" else "sleep 5", 60),
            exec_notifier("unquiesce", "echo resumed")]))
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "cancelled", "quiesce", {"app": "db"}, parallelism=1,
            rollback={"notifier": "unquiesce"}))
        wait_until(lambda: get_notification(cluster, namespace, "cancelled")["status"][
            "counts"]["succeeded"] == 1, "the first pod to succeed")
        deleted = client.delete(f"/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/"
                                "notifications/cancelled")
    assert deleted.status_code == 200
    # The rollback's record is listed from when it starts (Running); wait until it finished.
    wait_until(lambda: _by_pod(cluster, namespace, "unquiesce").get("db-0", {}).get(
        "status", {}).get("phase") in ("Succeeded", "Failed"), "the rollback", 40)
    assert _by_pod(cluster, namespace, "unquiesce")["db-0"]["status"]["phase"] == "Succeeded"


def test_five_hundred_pods_keep_the_object_small(
        cluster: Cluster, namespace: str, operator: User) -> None:
    cluster.deploy(namespace, "fleet", replicas=500, annotations=declare(
        app=[exec_notifier("reload", "true")]))
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "fleet-reload", "reload", {"app": "fleet"}, parallelism=50))
    done = wait_finished(cluster, namespace, "fleet-reload", timeout=300)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["counts"]["succeeded"] == 500
    assert len(json.dumps(done).encode()) < 4096


def test_restart_resumes_and_never_notifies_a_pod_twice(
        cluster: Cluster, namespace: str, operator: User) -> None:
    cluster.deploy(namespace, "db", replicas=3, annotations=declare(
        app=[exec_notifier("quiesce", "sleep 2")]))
    with cluster.client_for(operator) as client:
        create_notification(client, namespace, notification(
            "resumed", "quiesce", {"app": "db"}, failurePolicy="Continue"))
    wait_until(lambda: get_notification(cluster, namespace, "resumed")["status"]["counts"][
        "succeeded"] == 1, "the first pod to succeed", 20)
    wait_until(lambda: get_notification(cluster, namespace, "resumed")["status"]["counts"][
        "running"] == 1, "the second pod to start", 20)
    cluster.restart_notifier(signal.SIGKILL)
    status = wait_finished(cluster, namespace, "resumed", timeout=60)["status"]
    counts = status["counts"]
    assert (counts["succeeded"], counts["failed"], counts["total"]) == (2, 1, 3)
    labelled = records(cluster, namespace, labelSelector=f"{LABEL}=resumed")
    assert sorted(r["spec"]["podName"] for r in labelled) == sorted(
        {r["spec"]["podName"] for r in labelled})
    assert len(labelled) == 3
    assert [r["status"]["reason"] for r in labelled].count("Interrupted") == 1
