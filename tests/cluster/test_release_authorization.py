"""Releasing is authorized alike everywhere (issue 20), against the real control plane through
the aggregator, as real users with RBAC: ending a Notification's quiesce window
(notifications/NAME/release) needs `create pods/notify` on every pod of the window, as
releasing one held record (podnotifiers/NAME/release) needs it on the record's pod."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.cluster.test_notifications_window import (
    RULES,
    make_pods,
    status_of,
    tally,
    wait_done,
    wait_quiesced,
    window,
)
from tests.support.extension import scrape
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import API, create_notification

WINDOW_READS = "container_notifier_window_reads_total"
pytestmark = pytest.mark.cluster

GROUP = "notifier.x-k8s.io"


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("window-operator")
    cluster.grant(namespace, user, RULES)
    return user


def releasing_rules(pods: list[str]) -> list[dict]:
    """`create notifications/release`, and `create pods/notify` on `pods` only."""
    return [{"apiGroups": [GROUP], "resources": ["notifications/release"], "verbs": ["create"]},
            {"apiGroups": [GROUP], "resources": ["pods/notify"], "verbs": ["create"],
             "resourceNames": pods}]


def post_release(cluster: Cluster, user: User, namespace: str, name: str, query: str = ""
                 ) -> httpx.Response:
    with cluster.client_for(user) as client:
        return client.post(f"{API}/namespaces/{namespace}/notifications/{name}/release{query}",
                           json={})


def test_a_window_is_released_only_by_who_may_notify_every_pod_of_it(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    names = make_pods(cluster, namespace, tmp_path, 3)
    with cluster.client_for(operator) as client:
        assert create_notification(client, namespace, window("snap")).status_code == 201
    wait_quiesced(cluster, namespace, "snap")

    releaser = cluster.user("window-releaser")
    cluster.grant(namespace, releaser, releasing_rules(names[:2]), name="window-releaser")
    for query in ("?dryRun=All", ""):
        refused = post_release(cluster, releaser, namespace, "snap", query)
        assert refused.status_code == 403, (query, refused.text)
        assert refused.json()["message"].startswith(
            f'notifications.notifier.x-k8s.io "snap" is forbidden: releasing a quiesce window '
            f'needs create pods/notify on its pod "{names[2]}": User "window-releaser" cannot '
            f'create resource "pods/notify" in API group "{GROUP}" in the namespace '
            f'"{namespace}"'), refused.text
    # The leader reads the held window's run (for a release request) every second: once it
    # has read it three times since the refusals, a read that began after them found no
    # release, or the loop that reads would have returned and the count stopped (timeout).
    reads = scrape(cluster).get(WINDOW_READS, 0)
    wait_until(lambda: scrape(cluster).get(WINDOW_READS, 0) >= reads + 3,
               "the leader to read the held window again", 30)
    status = status_of(cluster, namespace, "snap")
    assert status["phase"] == "Running"
    assert "releaseRequestedTime" not in status["window"]
    assert tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 0)

    cluster.grant(namespace, releaser, releasing_rules(names[2:]), name="window-releaser-2")
    answers: list[httpx.Response] = []

    def released() -> bool:  # until the server's cached denial (10 s) expires
        answers.append(post_release(cluster, releaser, namespace, "snap"))
        return answers[-1].status_code == 200

    wait_until(released, "the release to be allowed once every pod may be notified", 30,
               interval=1)
    assert {answer.status_code for answer in answers} <= {200, 403}
    status = wait_done(cluster, namespace, "snap")
    assert (status["phase"], status["window"]["releaseReason"]) == ("Succeeded",
                                                                    "ReleaseRequested")
    assert tally(tmp_path, names, "unquiesce") == dict.fromkeys(names, 1)
