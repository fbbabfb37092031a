"""A notifier's timeout stops its command in the container, not only the exec stream.

kwok runs exec'd commands on this host, in its exec work directory: a command "in the
container" is a host process whose working directory is that directory, so the tests find it
with /proc.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from apiserver.notifier.stopping import GRACE_SECONDS
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import declare, exec_notifier, notify
from tests.support.processes import running_sleeps

pytestmark = pytest.mark.cluster

NOTIFY_RULES = [{"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"],
                 "verbs": ["create"]},
                {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
                 "verbs": ["get", "list", "watch"]}]
TIMEOUT_SECONDS = 2


@pytest.fixture
def notifier_user(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("backup-bot")
    cluster.grant(namespace, user, NOTIFY_RULES)
    return user


@pytest.mark.parametrize(("script", "stopped", "phrase", "sleep"), [
    # Durations no other test sleeps, so that only this test's command matches.
    ("sleep 29.7", "Terminated", "was stopped with SIGTERM", "29.7"),
    ("trap '' TERM; sleep 31.3", "Killed", "was killed with SIGKILL", "31.3"),
])
def test_timeout_stops_the_command(cluster: Cluster, namespace: str, notifier_user: User,
                                   script: str, stopped: str, phrase: str, sleep: str) -> None:
    workdir = cluster.layout.exec_workdir
    annotations = declare(app=[exec_notifier("slow", script, timeout=TIMEOUT_SECONDS)])
    pod = cluster.deploy(namespace, "slow", annotations=annotations)[0]["metadata"]["name"]
    before = set(running_sleeps(workdir, sleep))  # normally none
    with cluster.client_for(notifier_user) as client:
        started = time.monotonic()
        response = notify(client, namespace, pod, "slow", wait=1)
        assert response.status_code in (201, 202), response.text
        wait_until(lambda: bool(set(running_sleeps(workdir, sleep)) - before),
                   "the notifier's sleep running", 5)
        record = notify_wait(client, response.json()["metadata"]["name"], namespace)
    elapsed = time.monotonic() - started
    assert not set(running_sleeps(workdir, sleep)) - before, "the command outlived its timeout"
    container = record["status"]["containers"][0]
    assert (record["status"]["reason"], container["reason"]) == ("Timeout", "Timeout")
    assert container["stopped"] == stopped, container
    assert phrase in container["message"]
    assert "container-notifier-pid" not in container.get("stdout", "")
    assert elapsed < TIMEOUT_SECONDS + GRACE_SECONDS + 5, elapsed
    print(f"{script!r}: {container['stopped']} after {elapsed:.1f}s: {container['message']}")


def test_a_missing_program_fails_127_through_the_wrapper(
        cluster: Cluster, namespace: str, notifier_user: User) -> None:
    annotations = declare(app=[{"name": "missing",
                                "action": {"exec": {"command": ["/no/such/program", "x"]}}}])
    pod = cluster.deploy(namespace, "missing", annotations=annotations)[0]["metadata"]["name"]
    with cluster.client_for(notifier_user) as client:
        status = notify(client, namespace, pod, "missing").json()["status"]
    (container,) = status["containers"]
    assert (container["reason"], container.get("exitCode")) == ("NonZeroExitCode", 127), container
    assert "/no/such/program" in container["stderr"] and "not found" in container["stderr"]
    assert container["stdout"] == "" and "stopped" not in container


def notify_wait(client: httpx.Client, name: str, namespace: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_SECONDS + GRACE_SECONDS + 20
    while True:
        response = client.get(f"/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/"
                              f"podnotifiers/{name}")
        assert response.status_code == 200, response.text
        record = response.json()
        if record["status"].get("phase") in ("Succeeded", "Failed"):
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.2)
