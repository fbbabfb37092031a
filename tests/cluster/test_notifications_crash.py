"""A Notification survives its server being SIGKILLed mid-fan-out, against the real control
plane: every notifier run appends a line to a file on the host (kwok runs exec commands on the
host), so counting lines proves what ran, how often, and that nothing ran after fail-fast.

Which run does what is decided on the host too: each run takes the next free slot number
(`mkdir` is atomic), so the pods of one Deployment (trusted by their template) can behave
differently by the order in which they run."""

from __future__ import annotations

import shlex
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.extension import scrape
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    create_notification,
    declare,
    exec_notifier,
    get_notification,
    notification,
    notify,
    records,
    wait_finished,
)

STARTED = "container_notifier_podnotifiers_started_total"
pytestmark = pytest.mark.cluster

LABEL = "notifier.x-k8s.io/notification"
ROLLBACK_ATTEMPT = "notifier.x-k8s.io/rollback-attempt"


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("crash-operator")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify"],
         "verbs": ["create", "get", "list", "delete"]}])
    return user


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """A directory on the host the notifiers write to; runs still waiting are released (they
    then exit without a trace) when the test ends."""
    yield tmp_path
    (tmp_path / "release").touch()


def slot_script(host: Path, what: str, hang: range, fail: range = range(0),
                sleep: dict[int, int] | None = None) -> str:
    """Append "<what> start" to host/log, take the next slot; a slot in `hang` waits until the
    test ends (the server is killed meanwhile), one in `fail` exits 1, one in `sleep` sleeps
    that long first; the others append "<what> done" and exit 0."""
    q = shlex.quote
    slots, log, release = host / f"slots-{what}", host / "log", host / "release"
    sleeps = " ".join(f"{n}) sleep {s};;" for n, s in (sleep or {}).items())
    hangs = "|".join(str(n) for n in hang) or "none"
    fails = "|".join(str(n) for n in fail) or "none"
    return (f"echo {q(what)} start >> {q(str(log))}; mkdir -p {q(str(slots))}; "
            f"i=1; until mkdir {q(str(slots))}/$i 2>/dev/null; do i=$((i+1)); done; "
            f"case $i in {hangs}) until [ -e {q(str(release))} ]; do sleep 0.2; done; exit 1;; "
            f"{fails}) exit 1;; {sleeps} esac; echo {q(what)} done >> {q(str(log))}")


def lines(host: Path, text: str) -> int:
    log = host / "log"
    return log.read_text().splitlines().count(text) if log.exists() else 0


def counts(cluster: Cluster, namespace: str, name: str) -> dict[str, int]:
    return get_notification(cluster, namespace, name)["status"].get("counts", {})


def test_bug3_abort_is_kept_across_a_crash(
        cluster: Cluster, namespace: str, operator: User, host: Path) -> None:
    """20 pods, Abort, parallelism 4: SIGKILL with 4 succeeded, 4 running and 12 pending. The 4
    runs end Interrupted (failures), so none of the 12 is started after the restart."""
    cluster.deploy(namespace, "db", replicas=20, annotations=declare(app=[exec_notifier(
        "quiesce", slot_script(host, "quiesce", hang=range(5, 9)), timeout=120)]))
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "snap", "quiesce", {"app": "db"}, parallelism=4))
    assert created.status_code == 201, created.text
    wait_until(lambda: (counts(cluster, namespace, "snap").get("succeeded"),
                        counts(cluster, namespace, "snap").get("running")) == (4, 4),
               "4 pods succeeded and 4 running", 60)
    wait_until(lambda: lines(host, "quiesce start") == 8, "the 4 hanging runs to start", 10)

    cluster.restart_notifier(signal.SIGKILL)

    status = wait_finished(cluster, namespace, "snap", timeout=60)["status"]
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["reason"] == "FailFast"
    assert status["counts"] == {"total": 20, "pending": 12, "running": 0, "succeeded": 4,
                                "failed": 4, "skipped": 0, "rolledBack": 0}
    labelled = records(cluster, namespace, labelSelector=f"{LABEL}=snap")
    assert sorted(r["status"]["reason"] for r in labelled) == ["Completed"] * 4 + [
        "Interrupted"] * 4
    # Nothing more starts afterwards: exactly the 8 runs begun before the crash. The point
    # to check it at is a later run of ours (a direct notify of one of the pods, slot 9, so
    # it does not hang) that we see finish: the service's started runs then moved by this
    # one, and the log holds one more start and one more done.
    started = scrape(cluster).get(STARTED, 0)
    pod = next(r["spec"]["podName"] for r in labelled if r["status"]["reason"] == "Completed")
    with cluster.admin() as kube:
        later = notify(kube, namespace, pod, "quiesce")
    assert later.status_code == 201, later.text
    assert later.json()["status"]["phase"] == "Succeeded", later.text
    assert scrape(cluster).get(STARTED, 0) == started + 1
    assert lines(host, "quiesce start") == 9
    assert lines(host, "quiesce done") == 5
    assert len(records(cluster, namespace, labelSelector=f"{LABEL}=snap")) == 8


def test_bug4_an_interrupted_rollback_runs_again_and_stopped_pods_stay_untouched(
        cluster: Cluster, namespace: str, operator: User, host: Path) -> None:
    """5 pods, Abort, parallelism 2, rollback unquiesce: the first two quiesce, the third
    fails, so the last two are never started. SIGKILL while both rollbacks run: after the
    restart each rollback runs again (a new record, attempt 2), each pod is unquiesced to the
    end exactly once, and the two stopped pods are never quiesced."""
    cluster.deploy(namespace, "db", replicas=5, annotations=declare(app=[
        exec_notifier("quiesce", slot_script(host, "quiesce", hang=range(0), fail=range(3, 4),
                                             sleep={2: 3}), timeout=60),
        exec_notifier("unquiesce", slot_script(host, "unquiesce", hang=range(1, 3)),
                      timeout=120)]))
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "snap", "quiesce", {"app": "db"}, parallelism=2, rollback={"notifier": "unquiesce"}))
    assert created.status_code == 201, created.text
    wait_until(lambda: lines(host, "unquiesce start") == 2, "both rollbacks to start", 60)
    wait_until(lambda: counts(cluster, namespace, "snap")["succeeded"] == 2,
               "the status to show both succeeded", 5)

    cluster.restart_notifier(signal.SIGKILL)

    status = wait_finished(cluster, namespace, "snap", timeout=60)["status"]
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["reason"] == "FailFast"
    assert status["counts"] == {"total": 5, "pending": 2, "running": 0, "succeeded": 2,
                                "failed": 1, "skipped": 0, "rolledBack": 2,
                                "mayHaveRunTwice": 2}
    assert "2 may have run their release or rollback twice" in status["conditions"][0][
        "message"]
    assert lines(host, "quiesce start") == 3  # never after fail-fast, not even after the crash
    assert lines(host, "unquiesce start") == 4  # two interrupted, two run again
    assert lines(host, "unquiesce done") == 2  # each succeeded pod unquiesced exactly once
    rollbacks = records(cluster, namespace, labelSelector=f"{LABEL}=snap",
                        fieldSelector="spec.notifier=unquiesce")
    by_attempt = sorted((r["spec"]["podName"], r["metadata"]["labels"][ROLLBACK_ATTEMPT],
                         r["status"]["reason"]) for r in rollbacks)
    pods = sorted({pod for pod, _, _ in by_attempt})
    assert len(pods) == 2
    assert by_attempt == sorted([(pod, "1", "Interrupted") for pod in pods]
                                + [(pod, "2", "Completed") for pod in pods])
    quiesced = {r["spec"]["podName"] for r in records(
        cluster, namespace, labelSelector=f"{LABEL}=snap", fieldSelector="spec.notifier=quiesce")}
    assert set(pods) < quiesced and len(quiesced) == 3
