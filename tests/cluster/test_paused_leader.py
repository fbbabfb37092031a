"""A fan-out leader paused (SIGSTOP) beyond its Leases with runs in flight, then resumed
(SIGCONT), against the real control plane: the other replica takes over and ends those runs
Failed/Interrupted; when the paused one resumes, its commands have meanwhile completed, and it
must write nothing more for those runs: every record keeps the takeover's result, and the
Notification and its records agree. Every run appends to a file on the host (kwok runs exec
commands there), so the test counts that no pod ran twice and nothing ran after fail-fast."""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import plane
from tests.cluster.test_ha import LEASE_DURATION_SECONDS, TAKEOVER_BOUND_SECONDS, leader
from tests.support.extension import scrape_replica
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
TAKEN_OVER = ('container_notifier_podnotifiers_finished_total'
              '{phase="Failed",reason="FinishedElsewhere"}')


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("pause-operator")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify"],
         "verbs": ["create", "get", "list", "delete"]}])
    return user


@pytest.fixture(autouse=True)
def every_replica_back(cluster: Cluster) -> Iterator[None]:
    assert cluster.replicas >= 2, "a takeover needs CN_REPLICAS of at least 2 (default 2)"
    yield
    for replica in plane.replicas(cluster.layout):
        os.kill(replica.pid, signal.SIGCONT)
    for replica in range(cluster.replicas):
        if not cluster.replica_ready(replica):
            cluster.restart_replica(replica)


def test_a_paused_leader_resumed_after_a_takeover_changes_no_finished_record(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    log, release = tmp_path / "log", tmp_path / "release"
    script = (f"echo start >> {shlex.quote(str(log))}; "
              f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.2; done; "
              f"echo done >> {shlex.quote(str(log))}")
    cluster.deploy(namespace, "db", replicas=10, annotations=declare(app=[
        exec_notifier("quiesce", script, timeout=300)]))

    def started() -> int:
        return log.read_text().splitlines().count("start") if log.exists() else 0

    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "snap", "quiesce", {"app": "db"}, parallelism=5))
    assert created.status_code == 201, created.text
    wait_until(lambda: started() == 5, "5 runs in flight", 60)
    paused = leader(cluster)
    before = scrape_replica(cluster, paused).get(TAKEN_OVER, 0.0)
    os.kill(plane.replica(cluster.layout, paused).pid, signal.SIGSTOP)
    try:
        finished = wait_finished(cluster, namespace, "snap",
                                 timeout=LEASE_DURATION_SECONDS + TAKEOVER_BOUND_SECONDS)
        release.touch()  # the paused leader's commands now complete, successfully
        wait_until(lambda: log.read_text().splitlines().count("done") == 5,
                   "the 5 commands to complete", 30)
    finally:
        os.kill(plane.replica(cluster.layout, paused).pid, signal.SIGCONT)
    status = finished["status"]
    assert status["phase"] == "Failed", status
    assert (status["counts"]["failed"], status["counts"]["pending"],
            status["counts"]["succeeded"]) == (5, 5, 0), status["counts"]

    # the resumed replica reads its 5 exec results and tries to store them: each is refused
    wait_until(lambda: scrape_replica(cluster, paused).get(TAKEN_OVER, 0.0) == before + 5,
               "the resumed replica to find its 5 runs finished elsewhere", 60)
    labelled = records(cluster, namespace, labelSelector=f"{LABEL}=snap")
    assert sorted((r["status"]["phase"], r["status"]["reason"]) for r in labelled) == [
        ("Failed", "Interrupted")] * 5
    again = get_notification(cluster, namespace, "snap")["status"]
    assert (again["phase"], again["counts"]) == (status["phase"], status["counts"])
    assert started() == 5  # no pod ran twice, nothing ran after fail-fast
