"""docs/troubleshooting.md, "The APIService is not Available", on a plane of its own: with both
server replicas stopped, the page's commands show the APIService Available=False with the
reason quoted, the group gone from discovery, and a namespace deleted meanwhile stuck
Terminating with NamespaceDeletionDiscoveryFailure; after the replicas start again the page's
waits end (Available, the namespace gone); with them stopped again, deleting the APIService (the
page's remedy when the server is gone for good) lets a stuck namespace finish."""

from __future__ import annotations

import time
from typing import Any

import pytest

from localcluster import plane
from tests.support.console import check_shown, run
from tests.support.doc_commands import console_commands, console_transcript
from tests.support.kube import Cluster, wait_until
from tests.support.planes import extra_plane

pytestmark = pytest.mark.cluster

PAGE = "docs/troubleshooting.md"
APISERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.notifier.x-k8s.io"


SECTIONS = ("Trust material", "See it", "What it does to discovery",
            "What it does to namespace deletion", "Recover", "If the server is gone for good")
"""The page's headings with commands, each run below."""


def test_the_test_below_runs_every_command_of_the_page() -> None:
    run_here = [command for heading in SECTIONS for command in console_commands(PAGE, heading)]
    assert sorted(run_here) == sorted(console_commands(PAGE))


def _section(cluster: Cluster, heading: str) -> None:
    for step in console_transcript(PAGE, heading):
        check_shown(run(cluster, step.command), step.output)


def _available(cluster: Cluster) -> str:
    with cluster.admin() as kube:
        conditions = kube.get(APISERVICE).json().get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == "Available"), "")


def _condition(cluster: Cluster, namespace: str, kind: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        found = kube.get(f"/api/v1/namespaces/{namespace}")
    if found.status_code != 200:
        return {}
    conditions = found.json().get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def _stop_replicas(cluster: Cluster) -> None:
    """Stop both replicas and wait until the APIService says so. kube-apiserver checks an
    APIService's availability when it changes and otherwise every 30 s: a changed annotation
    has it check at once, as its next periodic check would."""
    plane.stop_replicas(cluster.layout)
    with cluster.admin() as kube:
        kube.patch(APISERVICE, json={"metadata": {"annotations": {
            "test.notifier.x-k8s.io/replicas-stopped": str(time.time())}}},
                   headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
    wait_until(lambda: _available(cluster) == "False", "APIService Available=False", 90)


def _stuck_namespace(cluster: Cluster, name: str) -> None:
    """Create and delete `name`; return once it reports the discovery failure."""
    with cluster.admin() as kube:
        created = kube.post("/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        assert created.status_code == 201, created.text
    cluster.delete_namespace(name)
    wait_until(lambda: _condition(cluster, name, "NamespaceDeletionDiscoveryFailure").get(
        "status") == "True", f"{name}: NamespaceDeletionDiscoveryFailure", 90)


def _gone(cluster: Cluster, name: str) -> bool:
    with cluster.admin() as kube:
        return kube.get(f"/api/v1/namespaces/{name}").status_code == 404


def test_an_unavailable_apiservice_shows_and_recovers_as_the_page_says() -> None:
    with extra_plane("trouble") as cluster:
        _section(cluster, "Trust material")
        _stop_replicas(cluster)
        _section(cluster, "See it")
        _section(cluster, "What it does to discovery")

        _stuck_namespace(cluster, "shop")
        _section(cluster, "What it does to namespace deletion")
        condition = _condition(cluster, "shop", "NamespaceDeletionDiscoveryFailure")
        assert condition["reason"] == "DiscoveryFailed", condition

        plane.restart_replicas(cluster.layout)
        _section(cluster, "Recover")  # waits until Available and the namespace is gone
        assert _available(cluster) == "True" and _gone(cluster, "shop")

        _stop_replicas(cluster)
        _stuck_namespace(cluster, "orphaned")
        _section(cluster, "If the server is gone for good")
        wait_until(lambda: _gone(cluster, "orphaned"), "namespace orphaned gone", 120)
