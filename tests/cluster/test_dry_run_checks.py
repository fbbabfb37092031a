"""A dry run makes every check the real request makes (issue 20), against the real control
plane through the aggregator: the size cap of the stored object (413 for a PodNotifier record
or a Notification over 256 KiB, where a dry run said 201) and a pod's bounds (409 while the
same notifier runs)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.kube import Cluster, User
from tests.support.notify import (
    API,
    body,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify_path,
    records,
)

pytestmark = pytest.mark.cluster

GROUP = "notifier.x-k8s.io"
LABELS = {f"label-{i:04}": "v" * 63 for i in range(3600)}
"""Valid labels, about 280 KB of them: a body well under the 1 MiB request limit whose object is
over the 256 KiB size cap of a stored object."""


@pytest.fixture
def pod(cluster: Cluster, namespace: str) -> str:
    cluster.create_pod(namespace, "db-0", annotations=declare(app=[
        exec_notifier("quiesce", "echo quiesced"), exec_notifier("slow", "sleep 6", timeout=30)]),
        labels={"app": "db"})
    return "db-0"


@pytest.fixture
def caller(cluster: Cluster, namespace: str) -> User:
    """May notify (and exec, so that the bare pod's declaration is trusted: rule 2) and create
    Notifications."""
    user = cluster.user("dry-runner")
    cluster.grant(namespace, user, [
        {"apiGroups": [GROUP], "resources": ["pods/notify", "notifications"],
         "verbs": ["create", "get", "list"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}])
    return user


def without_generated_name(message: str) -> str:
    return re.sub(r'"db-0-quiesce-\w{5}"', '"NAME"', message)


def notify(client: httpx.Client, namespace: str, obj: dict[str, Any], *, dry: bool
           ) -> httpx.Response:
    params = {"waitSeconds": "0", **({"dryRun": "All"} if dry else {})}
    return client.post(notify_path(namespace, "db-0"), params=params, json=obj)


def test_a_record_over_the_size_cap_is_413_in_a_dry_run_as_in_the_real_request(
        cluster: Cluster, namespace: str, pod: str, caller: User) -> None:
    big = body("quiesce")
    big["metadata"] = {"labels": LABELS}
    with cluster.client_for(caller) as client:
        dry = notify(client, namespace, big, dry=True)
        real = notify(client, namespace, big, dry=False)
        assert (dry.status_code, real.status_code) == (413, 413), dry.text[:300]
        assert dry.json()["reason"] == real.json()["reason"] == "RequestEntityTooLarge"
        assert without_generated_name(dry.json()["message"]) == without_generated_name(
            real.json()["message"])
        assert re.match(r'podnotifiers\.notifier\.x-k8s\.io "NAME" is too large: \d+ bytes, '
                        r"the limit is 262144", without_generated_name(dry.json()["message"]))
        assert records(cluster, namespace) == []
        assert notify(client, namespace, body("quiesce"), dry=True).status_code == 201


def test_a_dry_run_is_refused_while_the_same_notifier_runs(
        cluster: Cluster, namespace: str, pod: str, caller: User) -> None:
    with cluster.client_for(caller) as client:
        running = notify(client, namespace, body("slow"), dry=False)
        assert running.status_code == 201, running.text
        dry = notify(client, namespace, body("slow"), dry=True)
        assert dry.status_code == 409, dry.text
        assert running.json()["metadata"]["name"] in dry.json()["message"]
    assert len(records(cluster, namespace)) == 1


def test_a_notification_over_the_size_cap_is_413_in_a_dry_run_as_in_the_real_create(
        cluster: Cluster, namespace: str, pod: str, caller: User) -> None:
    big = notification("big", "quiesce", {"app": "db"})
    big["metadata"]["labels"] = LABELS
    with cluster.client_for(caller) as client:
        dry = client.post(f"{API}/namespaces/{namespace}/notifications",
                          params={"dryRun": "All"}, json=big)
        real = create_notification(client, namespace, big)
        assert (dry.status_code, real.status_code) == (413, 413), dry.text[:300]
        assert dry.json() == real.json()
        assert dry.json()["message"].startswith(
            'notifications.notifier.x-k8s.io "big" is too large: ')
        listed = client.get(f"{API}/namespaces/{namespace}/notifications")
    assert listed.json()["items"] == []
