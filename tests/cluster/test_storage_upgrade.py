"""Upgrading from layout 1 (storage objects in the users' namespaces) on the real control plane
(issue 20, item 1; docs/storage.md, *Upgrading from layout 1*).

A plane of its own runs the previous release, the last commit of layout 1 taken from git, on both
replicas with that release's manifests. It stores finished records, a held quiesce and a
Notification in flight, all in the old layout. The upgrade is done as documented: the new
manifests first (the new RBAC), then each replica replaced by this version, one at a time. Then
every record and Notification (and a Notification's fan-out state) is in the storage namespace
with the same uid, nothing of them is left in the users' namespace, the held command is stopped
and its record ended, the Notification ends with every pod notified at most once, and the
finished records' commands did not run again (the lines they appended on the host). The previous
release's pod ledgers are left where they were: this version neither reads nor moves them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.registry.kube_objects import INSTANCE_LABEL, NAMESPACE_LABEL, STORAGE_API
from apiserver.registry.layout_migration import layout1_selector, layout_marker
from localcluster import notifier
from localcluster.layout import REPO_ROOT
from localcluster.pki import NOTIFIER_NAMESPACE
from tests.cluster.test_hold import held_notifier
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    API,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify,
    records,
    wait_finished,
)
from tests.support.planes import extra_plane
from tests.support.processes import running_sleeps
from tests.support.storage import stored

pytestmark = pytest.mark.cluster

LAYOUT_1_COMMIT = "34763da7eab1861ad983f3edd27c5d175b2e9efc"
"""The last commit of layout 1 (the release before the storage namespace)."""
PLURALS = ("storedpodnotifiers", "storednotifications", "storednotificationruns",
           "storednotificationpodsets")
LEDGERS = "storedpodledgers"
"""The previous release's pod ledgers (its CRD is in its manifests, not in this version's)."""
HELD_SLEEP = "3593.1"
BATCH = 4


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's server and manifests, from git."""
    root = tmp_path_factory.mktemp("layout1")
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify",
                             f"{LAYOUT_1_COMMIT}^{{commit}}"], capture_output=True, text=True)
    assert commit.returncode == 0, (
        f"commit {LAYOUT_1_COMMIT} (layout 1) is not in this clone: {commit.stderr}")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", LAYOUT_1_COMMIT,
                              "apiserver", "apiservice"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


@pytest.fixture(scope="module")
def plane() -> Iterator[Cluster]:
    with extra_plane("upgrade") as cluster:
        yield cluster


def old_argv(cluster: Cluster, replica: int, tree: Path) -> list[str]:
    """The previous release's replica: its code first on the path (-P: not the working
    directory), without the flags it does not know."""
    argv = [a for a in notifier.server_argv(cluster.layout, cluster.ports, replica)
            if not a.startswith("--storage-namespace=")]
    python = argv.index(sys.executable)
    return [*argv[:python], f"PYTHONPATH={tree}", sys.executable, "-P", *argv[python + 1:]]


def apply_manifests(cluster: Cluster, base: Path) -> None:
    """Apply the kustomize base `base` as the local plane applies its own (pointed at the
    replicas on the host)."""
    rendered = subprocess.run([str(cluster.bins / "kubectl"), "kustomize", str(base)],
                              check=True, capture_output=True, text=True).stdout
    objects = notifier.point_at_host(
        [o for o in yaml.safe_load_all(rendered)
         if o and o["kind"] not in notifier.IN_CLUSTER_ONLY_KINDS], cluster.ports.notifier)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input="\n---\n".join(json.dumps(o) for o in objects))


def layout1_objects(cluster: Cluster, plurals: tuple[str, ...] = PLURALS
                    ) -> dict[str, list[dict[str, Any]]]:
    with cluster.admin() as kube:
        found = {}
        for plural in plurals:
            response = kube.get(f"{STORAGE_API}/{plural}",
                                params={"labelSelector": layout1_selector("container-notifier")})
            assert response.status_code == 200, response.text
            found[plural] = response.json()["items"]
    return found


def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("upgrade-operator")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"],
         "resources": ["notifications", "pods/notify", "podnotifiers", "podnotifiers/release"],
         "verbs": ["create", "get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}])
    return user


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_upgrade_moves_every_object_and_runs_nothing_twice(
        plane: Cluster, old_tree: Path, tmp_path: Path) -> None:
    cluster = plane
    # The previous release, on the old manifests, with the storage as it left it.
    apply_manifests(cluster, old_tree / "apiservice")
    with cluster.admin() as kube:
        kube.delete(f"/api/v1/namespaces/{NOTIFIER_NAMESPACE}/configmaps/"
                    f"{layout_marker('container-notifier')}")
    for replica in range(cluster.replicas):
        cluster.replace_replica(replica, old_argv(cluster, replica, old_tree))

    namespace = cluster.create_namespace("upgrade")
    user = operator(cluster, namespace)
    q = shlex.quote
    web = [f"w{i}" for i in range(2)]
    for pod in web:
        cluster.create_pod(namespace, pod, annotations=declare(app=[exec_notifier(
            "quiesce", f"echo quiesced >> {q(str(tmp_path / pod))}.web")]))
    finished_names = []
    with cluster.client_for(user) as client:
        for pod in web:
            done = notify(client, namespace, pod, "quiesce")
            assert done.status_code == 201 and done.json()["status"]["phase"] == "Succeeded", (
                done.text)
            finished_names.append(done.json()["metadata"]["name"])
    db = cluster.deploy(namespace, "db", annotations=declare(app=[held_notifier(HELD_SLEEP)]))
    with cluster.client_for(user) as client:
        held = notify(client, namespace, db[0]["metadata"]["name"], "lock", wait=20)
    assert held.status_code == 201 and held.json()["status"]["phase"] == "Held", held.text
    held_name = held.json()["metadata"]["name"]

    with cluster.admin() as kube:
        for i in range(BATCH):
            pod = f"b{i}"
            log = q(str(tmp_path / pod))
            script = f"echo start >> {log}; sleep 3; echo done >> {log}"
            response = kube.post(f"/api/v1/namespaces/{namespace}/pods", json={
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {"set": "batch"},
                             "annotations": declare(app=[exec_notifier("flush", script)])},
                "spec": {"containers": [{"name": "app", "image": "fake.example/app:1"}]}})
            assert response.status_code == 201, response.text
    cluster.wait_running_pods(namespace, "set=batch", BATCH)
    with cluster.client_for(user) as client:
        created = create_notification(client, namespace, notification(
            "batch", "flush", {"set": "batch"}, parallelism=1, failurePolicy="Continue"))
    assert created.status_code == 201, created.text
    notification_uid = created.json()["metadata"]["uid"]
    wait_until(lambda: len(lines(tmp_path / "b0")) >= 1, "the first pod of the batch", 60)

    before = {r["metadata"]["name"]: r for r in records(cluster, namespace)}
    old = layout1_objects(cluster)
    assert {o["metadata"]["name"] for o in old["storedpodnotifiers"]} >= {
        *finished_names, held_name}, "the previous release did not store layout 1"
    assert [o["metadata"]["name"] for o in old["storednotifications"]] == ["batch"]
    assert old["storednotificationruns"]
    old_ledgers = layout1_objects(cluster, (LEDGERS,))[LEDGERS]
    assert old_ledgers, "the previous release kept no pod ledgers"
    assert running_sleeps(cluster.layout.exec_workdir, HELD_SLEEP)

    # The upgrade: the new manifests (RBAC first), then each replica in turn.
    started = time.monotonic()
    apply_manifests(cluster, REPO_ROOT / "apiservice")
    for replica in range(cluster.replicas):
        cluster.replace_replica(replica, notifier.server_argv(cluster.layout, cluster.ports,
                                                              replica))
    upgraded = time.monotonic() - started

    assert layout1_objects(cluster) == {plural: [] for plural in PLURALS}
    left = layout1_objects(cluster, (LEDGERS,))[LEDGERS]  # not read, not moved
    assert {o["metadata"]["uid"] for o in left} <= {o["metadata"]["uid"] for o in old_ledgers}
    with cluster.admin() as kube:
        marker = kube.get(f"/api/v1/namespaces/{NOTIFIER_NAMESPACE}/configmaps/"
                          f"{layout_marker('container-notifier')}")
        assert marker.status_code == 200 and marker.json()["data"] == {"layout": "2"}
        moved = stored(kube, "storedpodnotifiers", namespace)
    assert all(o["metadata"]["namespace"] == NOTIFIER_NAMESPACE
               and o["metadata"]["labels"][INSTANCE_LABEL] == "container-notifier"
               and o["metadata"]["labels"][NAMESPACE_LABEL] == namespace for o in moved)

    after = {r["metadata"]["name"]: r for r in records(cluster, namespace)}
    assert set(before) <= set(after), f"records lost: {set(before) - set(after)}"
    for name, record in before.items():
        for key in ("uid", "creationTimestamp"):
            assert after[name]["metadata"][key] == record["metadata"][key], (name, key)
    for name in finished_names:
        assert after[name]["status"] == before[name]["status"], name

    held_after = wait_until_finished(cluster, namespace, held_name, 60)
    assert (held_after["phase"], held_after["reason"]) == ("Failed", "Interrupted"), held_after
    wait_until(lambda: not running_sleeps(cluster.layout.exec_workdir, HELD_SLEEP),
               "the held command to stop", 30)
    assert [r for r in after.values() if r["spec"]["notifier"] == "lock"] == [after[held_name]]

    done = wait_finished(cluster, namespace, "batch", timeout=120)
    assert done["metadata"]["uid"] == notification_uid
    counts = done["status"]["counts"]
    assert counts["total"] == BATCH and counts["succeeded"] + counts["failed"] == BATCH, counts
    starts = {f"b{i}": [x for x in lines(tmp_path / f"b{i}") if x == "start"]
              for i in range(BATCH)}
    assert all(len(s) <= 1 for s in starts.values()), f"a pod notified twice: {starts}"
    interrupted = {r["spec"]["podName"] for r in records(
        cluster, namespace, labelSelector="notifier.x-k8s.io/notification=batch")
        if r["status"].get("reason") == "Interrupted"}
    assert {p for p, s in starts.items() if not s} <= interrupted, (starts, interrupted)
    assert counts["failed"] == len(interrupted), (counts, interrupted)
    for pod in web:
        assert lines(tmp_path / f"{pod}.web") == ["quiesced"], pod

    with cluster.client_for(user) as client:
        again = notify(client, namespace, web[0], "quiesce")
    assert again.status_code == 201 and again.json()["status"]["phase"] == "Succeeded"
    print(f"\nupgrade: {sum(len(v) for v in old.values())} layout-1 objects moved; both "
          f"replicas replaced in {upgraded:.1f} s; the Notification ended {done['status']['phase']}"
          f" {counts}; the held run ended {held_after['reason']}")


def wait_until_finished(cluster: Cluster, namespace: str, name: str, timeout: float
                        ) -> dict[str, Any]:
    def current() -> dict[str, Any]:
        with cluster.admin() as kube:
            response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{name}")
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()["status"]
        return status

    wait_until(lambda: current()["phase"] in ("Succeeded", "Failed"), f"{name} to end", timeout)
    return current()
