"""Quiesce windows (spec.release) and one quiesce at a time (spec.concurrencyPolicy) against the
real control plane, through the aggregator, as real users with RBAC (issue 11).

Every pod is a bare pod with its own declaration (trusted through pods/exec, rule 2) whose
quiesce and unquiesce append a line to the pod's own file on the host (kwok runs exec commands
on the host), so counting lines proves what ran on which pod and how often: "every quiesced pod
unquiesced exactly once" is one line each."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.test_ha import leader
from tests.support.extension import scrape
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import API, create_notification, declare, exec_notifier, notification
from tests.support.notify import records as list_records

pytestmark = pytest.mark.cluster

WINDOW_READS = "container_notifier_window_reads_total"

LABEL = "notifier.x-k8s.io/notification"
RULES = [
    {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify"],
     "verbs": ["create", "get", "list", "delete"]},
    {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications/release"],
     "verbs": ["create"]},
    # bare pods, each with its own declaration: trusted through pods/exec (trust rule 2)
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
]


@pytest.fixture(autouse=True)
def every_replica_back(cluster: Cluster) -> Iterator[None]:
    """The crash tests kill replicas; afterwards every replica runs and is routed to."""
    yield
    for replica in range(cluster.replicas):
        if not cluster.replica_ready(replica):
            cluster.restart_replica(replica)


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("backup-operator")
    cluster.grant(namespace, user, RULES)
    return user


def make_pods(cluster: Cluster, namespace: str, host: Path, count: int,
              unquiesce_seconds: float = 0) -> list[str]:
    """`count` pods labelled set=db; quiesce appends "quiesce" to host/<pod>, unquiesce
    appends "unquiesce start", sleeps `unquiesce_seconds`, then appends "unquiesce"."""
    names = [f"db-{i:02d}" for i in range(count)]
    with cluster.admin() as kube:
        for name in names:
            out = shlex.quote(str(host / name))
            quiesce = f"echo quiesce >> {out}"
            unquiesce = (f"echo unquiesce start >> {out}; sleep {unquiesce_seconds}; "
                         f"echo unquiesce >> {out}")
            response = kube.post(f"/api/v1/namespaces/{namespace}/pods", json={
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"set": "db"},
                             "annotations": declare(app=[
                                 exec_notifier("quiesce", quiesce, timeout=60),
                                 exec_notifier("unquiesce", unquiesce, timeout=60)])},
                "spec": {"containers": [{"name": "app", "image": "fake.example/app:1"}]}})
            assert response.status_code == 201, response.text
    cluster.wait_running_pods(namespace, "set=db", count, timeout=120)
    return names


def lines(host: Path, pod: str) -> list[str]:
    path = host / pod
    return path.read_text().splitlines() if path.exists() else []


def tally(host: Path, names: list[str], line: str) -> dict[str, int]:
    return {pod: lines(host, pod).count(line) for pod in names}


def read(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The Notification, or None when it is gone or no replica answered (one was killed)."""
    try:
        with cluster.admin(timeout=10) as kube:
            response = kube.get(f"{API}/namespaces/{namespace}/notifications/{name}")
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def status_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = read(cluster, namespace, name)
    return {} if obj is None else obj.get("status") or {}


def wait_quiesced(cluster: Cluster, namespace: str, name: str, timeout: float = 90
                  ) -> dict[str, Any]:
    def open_() -> bool:
        return any(c["type"] == "Quiesced" and c["status"] == "True"
                   for c in status_of(cluster, namespace, name).get("conditions", []))

    wait_until(open_, f"{name}'s Quiesced condition", timeout)
    return status_of(cluster, namespace, name)


def wait_done(cluster: Cluster, namespace: str, name: str, timeout: float = 90
              ) -> dict[str, Any]:
    wait_until(lambda: status_of(cluster, namespace, name).get("phase") in (
        "Succeeded", "Failed"), f"{name} to finish", timeout)
    return status_of(cluster, namespace, name)


def release(cluster: Cluster, user: User, namespace: str, name: str,
            timeout: float = 30) -> httpx.Response:
    """POST the release action, retried while a killed replica answers 503."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with cluster.client_for(user) as client:
                answer = client.post(
                    f"{API}/namespaces/{namespace}/notifications/{name}/release", json={})
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def window(name: str, **release_spec: Any) -> dict[str, Any]:
    return notification(name, "quiesce", {"set": "db"}, parallelism=5,
                        release={"notifier": "unquiesce", **release_spec})


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end.replace("Z", "+00:00"))
            - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def test_a_window_over_20_pods_holds_and_releases_on_request_after_seconds_deletion_and_max_hold(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    names = make_pods(cluster, namespace, tmp_path, 20)
    client = cluster.client_for(operator)

    # 1. on request
    began = time.monotonic()
    assert create_notification(client, namespace, window("on-request")).status_code == 201
    status = wait_quiesced(cluster, namespace, "on-request")
    quiesced_after = time.monotonic() - began
    assert status["phase"] == "Running"
    assert status["window"]["quiescedTime"]
    assert tally(tmp_path, names, "quiesce") == dict.fromkeys(names, 1)
    # Held: the leader's hold loop keeps reading the window's run for a release request; a
    # window let go (or never held) stops that loop, so the count would stop (a timeout).
    reads = scrape(cluster).get(WINDOW_READS, 0)
    wait_until(lambda: scrape(cluster).get(WINDOW_READS, 0) >= reads + 3,
               "the leader to read the held window again", 30)
    assert tally(tmp_path, names, "unquiesce start") == dict.fromkeys(names, 0), "held"
    outsider = cluster.user("no-release")
    cluster.grant(namespace, outsider, [RULES[0]], name="no-release")
    refused = release(cluster, outsider, namespace, "on-request")
    assert refused.status_code == 403, refused.text
    assert "notifications/release" in refused.json()["message"]
    asked = time.monotonic()
    answer = release(cluster, operator, namespace, "on-request")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["window"]["releaseRequestedTime"]
    status = wait_done(cluster, namespace, "on-request")
    released_after = time.monotonic() - asked
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Succeeded",
                                                                   "PodsSucceeded")
    assert status["counts"]["released"] == 20
    times = status["window"]
    assert times["releaseReason"] == "ReleaseRequested"
    assert (times["quiescedTime"] <= times["releaseRequestedTime"] <= times["releaseTime"]
            <= times["unquiescedTime"])
    quiesced = [c for c in status["conditions"] if c["type"] == "Quiesced"][0]
    assert (quiesced["status"], quiesced["reason"]) == ("False", "Released")
    assert tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 1)
    unquiesces = list_records(cluster, namespace, labelSelector=f"{LABEL}=on-request",
                              fieldSelector="spec.notifier=unquiesce")
    assert len(unquiesces) == 20
    print(f"\nwindow, 20 pods at parallelism 5: Quiesced {quiesced_after:.1f} s after the "
          f"create; released and finished {released_after:.1f} s after the release request "
          f"(release to last unquiesce "
          f"{seconds(times['releaseTime'], times['unquiescedTime']):.1f} s): {times}")

    # 2. afterSeconds
    assert create_notification(client, namespace, window(
        "after", afterSeconds=2)).status_code == 201
    status = wait_done(cluster, namespace, "after")
    times = status["window"]
    assert (status["phase"], times["releaseReason"]) == ("Succeeded", "AfterSeconds")
    assert seconds(times["quiescedTime"], times["releaseTime"]) >= 2
    assert tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 2)
    print(f"afterSeconds 2: released {seconds(times['quiescedTime'], times['releaseTime']):.1f}"
          " s after quiescedTime")

    # 3. deletion
    assert create_notification(client, namespace, window("deleted")).status_code == 201
    wait_quiesced(cluster, namespace, "deleted")
    deleted = time.monotonic()
    answer = client.delete(f"{API}/namespaces/{namespace}/notifications/deleted")
    assert answer.status_code == 200, answer.text
    wait_until(lambda: tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 3),
               "every pod unquiesced after the deletion", 60)
    print(f"deletion: every pod unquiesced {time.monotonic() - deleted:.1f} s after it")

    # 4. maxHoldSeconds, nobody releases (the orchestrator "died"); Wait: the deleted one's
    # locks go once its release is stored, a moment after the last line
    abandoned = window("abandoned", maxHoldSeconds=3)
    abandoned["spec"]["concurrencyPolicy"] = "Wait"
    assert create_notification(client, namespace, abandoned).status_code == 201
    status = wait_done(cluster, namespace, "abandoned")
    times = status["window"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed",
                                                                   "ReleasedAfterMaxHold")
    assert seconds(status["startTime"], times["releaseTime"]) >= 3
    assert tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 4)
    assert tally(tmp_path, names, "quiesce") == dict.fromkeys(names, 4)
    print(f"maxHoldSeconds 3: released "
          f"{seconds(status['startTime'], times['releaseTime']):.1f} s after the start")
    client.close()


def test_the_leader_killed_in_the_window_and_in_the_release_unquiesces_each_pod_at_least_once(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    assert cluster.replicas >= 2, "needs two replicas"
    names = make_pods(cluster, namespace, tmp_path, 20, unquiesce_seconds=2)
    with cluster.client_for(operator) as client:
        assert create_notification(client, namespace, window("snap")).status_code == 201
    before = wait_quiesced(cluster, namespace, "snap")["window"]

    first = leader(cluster)
    cluster.kill_replica(first)
    killed = time.monotonic()
    answer = release(cluster, operator, namespace, "snap")  # to the survivor, not leading yet
    assert answer.status_code == 200, answer.text

    def releases_started() -> int:
        return sum(tally(tmp_path, names, "unquiesce start").values())

    wait_until(lambda: releases_started() >= 5, "the new leader to start releasing", 90)
    resumed = time.monotonic() - killed
    second = leader(cluster)
    assert second != first
    at_kill = releases_started()
    assert at_kill < 20, "caught the release in the middle"
    cluster.kill_replica(second)
    cluster.restart_replica(first)
    restarted = time.monotonic()

    status = wait_done(cluster, namespace, "snap", timeout=120)
    finished = time.monotonic() - restarted
    assert tally(tmp_path, names, "quiesce") == dict.fromkeys(names, 1), "at most once"
    assert status["window"]["quiescedTime"] == before["quiescedTime"]
    assert status["window"]["releaseReason"] == "ReleaseRequested"
    assert status["phase"] == "Succeeded", status
    records = list_records(cluster, namespace, labelSelector=f"{LABEL}=snap",
                           fieldSelector="spec.notifier=unquiesce")
    interrupted = Counter(r["spec"]["podName"] for r in records
                          if r["status"].get("reason") == "Interrupted")
    # at least once: a pod's release runs again after each interrupted attempt, and only then
    attempts = Counter(r["spec"]["podName"] for r in records)
    assert attempts == Counter({pod: 1 + interrupted[pod] for pod in names}), attempts
    assert tally(tmp_path, names, "unquiesce start") == dict(attempts)
    # exec'd commands outlive the killed server: those it started still run to their end
    wait_until(lambda: tally(tmp_path, names, "unquiesce") == dict(attempts),
               "every started unquiesce to complete", 15)
    # a pod ran a second attempt after an interrupted one, or after one never stored
    again = {r["spec"]["podName"] for r in records
             if int(r["metadata"]["labels"]["notifier.x-k8s.io/rollback-attempt"]) >= 2}
    assert set(interrupted) <= again
    assert status["counts"].get("mayHaveRunTwice", 0) == len(again)
    assert status["counts"]["released"] == 20
    if again:
        assert "may have run their release or rollback twice" in status["conditions"][0][
            "message"]
    print(f"\nleader {first} killed in the window, the release requested meanwhile: the new "
          f"leader {second} started releasing {resumed:.1f} s after the kill; killed with "
          f"{at_kill} of 20 releases started; after the restart the Notification ended "
          f"{status['phase']} {finished:.1f} s later; {len(interrupted)} release runs ended "
          f"Interrupted and ran again (mayHaveRunTwice {len(interrupted)}); every other pod's "
          f"unquiesce started once")
    cluster.restart_replica(second)


def test_two_competing_notifications_forbid_then_wait(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    names = make_pods(cluster, namespace, tmp_path, 5)
    client = cluster.client_for(operator)
    assert create_notification(client, namespace, window("first")).status_code == 201
    wait_quiesced(cluster, namespace, "first")

    assert create_notification(client, namespace, window("forbidden")).status_code == 201
    status = wait_done(cluster, namespace, "forbidden")
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "FailFast")
    assert "QuiesceConflict" in status["conditions"][0]["message"]
    assert "by first" in status["conditions"][0]["message"]
    assert tally(tmp_path, names, "quiesce") == dict.fromkeys(names, 1), "nothing quiesced twice"

    waiting = window("waiting", afterSeconds=0)
    waiting["spec"]["concurrencyPolicy"] = "Wait"
    assert create_notification(client, namespace, waiting).status_code == 201

    def waits() -> dict[str, Any]:
        return next((c for c in status_of(cluster, namespace, "waiting").get("conditions", [])
                     if c["type"] == "WaitingForNotification"), {})

    wait_until(lambda: waits().get("status") == "True",
               "waiting to wait for first's quiesce (WaitingForNotification True)", 30)
    assert waits()["reason"] == "OtherNotificationQuiescing" and "first" in waits()["message"]
    assert status_of(cluster, namespace, "waiting")["phase"] == "Running"
    assert tally(tmp_path, names, "quiesce") == dict.fromkeys(names, 1), "the second waits"
    released = time.monotonic()
    assert release(cluster, operator, namespace, "first").status_code == 200
    assert wait_done(cluster, namespace, "first")["phase"] == "Succeeded"
    status = wait_done(cluster, namespace, "waiting")
    assert status["phase"] == "Succeeded", status
    for pod in names:
        assert [line for line in lines(tmp_path, pod) if line != "unquiesce start"] == [
            "quiesce", "unquiesce", "quiesce", "unquiesce"], pod
    print(f"\ncompeting: Forbid failed QuiesceConflict at once; Wait ran after the first "
          f"released, finished {time.monotonic() - released:.1f} s after the release request")
    client.close()
