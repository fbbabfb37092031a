"""Held notifiers against the real control plane: Held until released, the process gone after
release, release authorized like notify, HoldExpired, a release through the other replica, and
the takeover of a killed owner's hold.

kwok runs exec'd commands on this host, in its exec work directory: the held command is a host
process whose working directory is that directory, found through /proc. Each test sleeps a
duration no other test uses, so only its command matches.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import pytest

from apiserver.notifier.stopping import GRACE_SECONDS
from tests.support.extension import raw_direct
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import API, declare, notify
from tests.support.processes import running_sleeps

pytestmark = pytest.mark.cluster

NOTIFY = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]}
RELEASE = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers/release"],
           "verbs": ["create"]}
READ = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
        "verbs": ["get", "list", "watch"]}
TAKEOVER_BOUND_SECONDS = 45.0
"""A dead replica's runs end within its Lease duration plus the takeover interval, and slack."""


@pytest.fixture
def holder(cluster: Cluster, namespace: str) -> User:
    """May notify, release and read records."""
    user = cluster.user("hold-owner")
    cluster.grant(namespace, user, [NOTIFY, RELEASE, READ])
    return user


@pytest.fixture
def releaser_only(cluster: Cluster, namespace: str) -> User:
    """May create podnotifiers/release, but not pods/notify."""
    user = cluster.user("hold-stranger")
    cluster.grant(namespace, user, [RELEASE, READ])
    return user


def held_notifier(sleep: str, max_hold: int = 600) -> dict[str, Any]:
    return {"name": "lock", "timeoutSeconds": 10,
            "action": {"exec": {"command": ["/bin/sh", "-c", f"echo ready; exec sleep {sleep}"]}},
            "hold": {"readyLine": "ready", "maxHoldSeconds": max_hold}}


def record(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{name}")
    assert response.status_code == 200, response.text
    return response.json()


def release_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/podnotifiers/{name}/release"


def hold(cluster: Cluster, namespace: str, user: User, sleep: str, max_hold: int = 600
         ) -> tuple[str, dict[str, Any]]:
    """Deploy a pod declaring the held notifier and run it: (record name, record once
    Held)."""
    pod = cluster.deploy(namespace, "db", annotations=declare(
        app=[held_notifier(sleep, max_hold)]))[0]["metadata"]["name"]
    with cluster.client_for(user) as client:
        response = notify(client, namespace, pod, "lock", wait=20)
    assert response.status_code == 201, response.text
    held = response.json()
    assert held["status"]["phase"] == "Held", held["status"]  # waitSeconds returns on Held
    return held["metadata"]["name"], held


def finished(cluster: Cluster, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The record once it has ended. A 503 while waiting (the aggregator reached a replica that
    was just killed, before the load balancer took it out) is waited through."""

    def ended() -> bool:
        with cluster.admin() as kube:
            response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{name}")
        if response.status_code == 503:
            return False
        assert response.status_code == 200, response.text
        return response.json()["status"]["phase"] in ("Succeeded", "Failed")

    wait_until(ended, f"{name} to finish", timeout)
    return record(cluster, namespace, name)


def test_a_held_notifier_stays_held_until_released_and_its_process_is_gone(
        cluster: Cluster, namespace: str, holder: User, releaser_only: User) -> None:
    workdir, sleep = cluster.layout.exec_workdir, "3599.7"
    name, held = hold(cluster, namespace, holder, sleep)
    status = held["status"]
    (container,) = status["containers"]
    assert status["heldTime"] and status["maxHoldSeconds"] == 600
    assert container["phase"] == "Held" and container["pid"] > 0, container

    with cluster.client_for(releaser_only) as client:
        denied = client.post(release_path(namespace, name), json={})
    assert denied.status_code == 403, denied.text
    assert "pods/notify" in denied.json()["message"], denied.text
    again = record(cluster, namespace, name)["status"]  # a refused release ends nothing
    assert (again["phase"], again["heldTime"]) == ("Held", status["heldTime"])
    assert running_sleeps(workdir, sleep), "the held command is not running"

    with cluster.client_for(holder) as client:
        released_at = time.monotonic()
        answer = client.post(release_path(namespace, name))
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"]["releaseRequestedBy"] == holder.name
        done = finished(cluster, namespace, name, GRACE_SECONDS + 15)
        took = time.monotonic() - released_at
        again = client.post(release_path(namespace, name), json={})
    assert again.status_code == 200 and again.json()["status"]["phase"] == "Succeeded"
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Released"), status
    assert status["releasedBy"] == holder.name and status["releasedTime"]
    (container,) = status["containers"]
    assert container["reason"] == "Released" and container["stopped"] in (
        "Terminated", "Killed", "Exited"), container
    assert not running_sleeps(workdir, sleep), "the held command outlived its release"
    assert took < GRACE_SECONDS + 10, took
    print(f"\nhold: released {took:.1f}s after the request: {container['message']}")


def test_notifying_a_held_pod_again_is_a_409_that_says_how_to_release_it(
        cluster: Cluster, namespace: str, holder: User) -> None:
    """The 409 names the held record and gives the release command, the plugin's and the raw
    request's; the raw one, run as it is printed (real kubectl), ends the hold."""
    name, held = hold(cluster, namespace, holder, "3595.3")
    with cluster.client_for(holder) as client:
        again = notify(client, namespace, held["spec"]["podName"], "lock", wait=0)
    assert again.status_code == 409, again.text
    answer = again.json()
    assert (answer["reason"], answer["details"]["name"]) == ("Conflict", name), answer
    message = answer["message"]
    assert f'is held on pod "{held["spec"]["podName"]}" by podnotifiers.notifier.x-k8s.io ' \
           f'"{name}"' in message
    assert f"kubectl notify -n {namespace} release podnotifier/{name}" in message
    raw = message.split("(or: ", 1)[1].rstrip(")")
    argv = shlex.split(raw)
    assert argv[:3] == ["kubectl", "create", "--raw"], raw
    cluster.kubectl(*argv[1:], user=holder)
    done = finished(cluster, namespace, name, GRACE_SECONDS + 15)
    assert (done["status"]["phase"], done["status"]["reason"]) == ("Succeeded", "Released")


def test_a_hold_nobody_releases_expires_and_its_process_is_gone(
        cluster: Cluster, namespace: str, holder: User) -> None:
    workdir, sleep = cluster.layout.exec_workdir, "3598.3"
    name, _ = hold(cluster, namespace, holder, sleep, max_hold=3)
    assert running_sleeps(workdir, sleep)
    done = finished(cluster, namespace, name, 3 + GRACE_SECONDS + 15)
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "HoldExpired"), status
    assert not running_sleeps(workdir, sleep), "the held command outlived maxHoldSeconds"


def test_a_release_through_the_other_replica_reaches_the_owner(
        cluster: Cluster, namespace: str, holder: User) -> None:
    """The record is held by whichever replica ran it; the release goes to the other one."""
    workdir, sleep = cluster.layout.exec_workdir, "3597.1"
    name, _ = hold(cluster, namespace, holder, sleep)
    owner = owner_replica(cluster, namespace, name)
    other = 1 - owner
    answer = raw_direct(cluster, holder, "POST", release_path(namespace, name), {},
                        replica=other)
    assert answer.status == 200, answer.body
    done = finished(cluster, namespace, name, GRACE_SECONDS + 15)
    assert done["status"]["reason"] == "Released", done["status"]
    assert not running_sleeps(workdir, sleep)


def test_a_killed_owners_hold_is_taken_over_and_its_process_stopped(
        cluster: Cluster, namespace: str, holder: User) -> None:
    workdir, sleep = cluster.layout.exec_workdir, "3596.9"
    name, _ = hold(cluster, namespace, holder, sleep)
    owner = owner_replica(cluster, namespace, name)
    cluster.kill_replica(owner)
    try:
        killed = time.monotonic()
        done = finished(cluster, namespace, name, TAKEOVER_BOUND_SECONDS)
        status = done["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
        assert "held command" in status["message"], status
        wait_until(lambda: not running_sleeps(workdir, sleep), "the held command to be stopped", 10)
        print(f"\nhold: the killed owner's hold ended {time.monotonic() - killed:.1f}s after "
              f"SIGKILL: {status['message']}")
    finally:
        cluster.restart_replica(owner)


def owner_replica(cluster: Cluster, namespace: str, name: str) -> int:
    """The replica whose runner holds the record (its ``status.replica`` names it)."""
    replica = record(cluster, namespace, name)["status"]["replica"]
    return int(str(replica).rsplit("-", 1)[1])
