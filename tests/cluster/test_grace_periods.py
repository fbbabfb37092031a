"""Per-notifier grace periods against the real control plane, through the aggregator.

A held command that takes 3 s to shut down once it is told to (here on SIGTERM: kwok never
closes a command's stdin, docs/api.md) ends Released and Terminated, with its shutdown's output,
when its terminationGracePeriodSeconds leaves it the time; with a grace shorter than its
shutdown it is killed first. A grace over the server's --max-grace-period-seconds is a 422
naming the field, and nothing is stored.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.test_hold import finished, holder, release_path  # noqa: F401 (the fixture)
from tests.support.kube import Cluster, User
from tests.support.notify import declare, notify
from tests.support.notify import records as list_records

pytestmark = pytest.mark.cluster

SLOW_SHUTDOWN = ("trap 'sleep 3; echo shut down; exit 0' TERM; echo ready; "
                 "while :; do sleep 1; done")
"""Ready at once; on SIGTERM, 3 s of shutdown, then a line and exit 0."""


def slow(termination_grace: int) -> dict[str, Any]:
    return {"name": "backup", "timeoutSeconds": 10,
            "terminationGracePeriodSeconds": termination_grace,
            "action": {"exec": {"command": ["/bin/sh", "-c", SLOW_SHUTDOWN]}},
            "hold": {"readyLine": "ready", "maxHoldSeconds": 600, "releaseGracePeriodSeconds": 1}}


def held_then_released(cluster: Cluster, namespace: str, user: User, app: str,
                       termination_grace: int) -> dict[str, Any]:
    pod = cluster.deploy(namespace, app, annotations=declare(app=[slow(termination_grace)])
                         )[0]["metadata"]["name"]
    with cluster.client_for(user) as client:
        response = notify(client, namespace, pod, "backup", wait=20)
        assert response.status_code == 201, response.text
        name = response.json()["metadata"]["name"]
        assert response.json()["status"]["phase"] == "Held", response.text
        released = client.post(release_path(namespace, name), json={})
        assert released.status_code == 200, released.text
    return finished(cluster, namespace, name, termination_grace + 30)["status"]


def test_a_shutdown_within_the_declared_grace_ends_released_and_terminated(
        cluster: Cluster, namespace: str, holder: User) -> None:  # noqa: F811
    status = held_then_released(cluster, namespace, holder, "patient", termination_grace=20)
    assert (status["phase"], status["reason"]) == ("Succeeded", "Released"), status
    (container,) = status["containers"]
    assert container["stopped"] == "Terminated", container
    assert container["exitCode"] == 0 and container["stdout"] == "ready\nshut down\n", container


def test_a_shutdown_longer_than_the_declared_grace_is_killed(
        cluster: Cluster, namespace: str, holder: User) -> None:  # noqa: F811
    status = held_then_released(cluster, namespace, holder, "hasty", termination_grace=1)
    (container,) = status["containers"]
    assert container["stopped"] == "Killed", container
    assert "did not exit within 1s of SIGTERM" in container["message"], container
    assert "shut down" not in container["stdout"], container


def test_a_grace_over_the_servers_bound_is_a_422_naming_the_field(
        cluster: Cluster, namespace: str, holder: User) -> None:  # noqa: F811
    pod = cluster.deploy(namespace, "greedy", annotations=declare(app=[slow(301)])
                         )[0]["metadata"]["name"]
    with cluster.client_for(holder) as client:
        response = notify(client, namespace, pod, "backup", wait=0)
    assert response.status_code == 422, response.text
    assert "terminationGracePeriodSeconds: Invalid value: 301: must be between 0 and 300 " \
           "seconds (the server's maximum, --max-grace-period-seconds)" in response.text
    assert list_records(cluster, namespace) == []
