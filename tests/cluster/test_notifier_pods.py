"""The read-only pods of notifier.x-k8s.io (issue 23), with the real kubectl through the
aggregator, as users with real RBAC: what kubectl get shows (Table, -o wide, -o json), who
may read it, kubectl auth can-i about pods/notify, kubectl explain, and that plain pods stay
the core group's."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.support.kube import Cluster, User
from tests.support.notify import API, declare, exec_notifier, signal_notifier

pytestmark = pytest.mark.cluster

NOTIFIER_PODS = "pods.notifier.x-k8s.io"
READ_CORE_PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
READ_NOTIFIER_PODS = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods"],
                      "verbs": ["get", "list"]}
NOTIFY = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]}


def user_with(cluster: Cluster, namespace: str, prefix: str, *rules: dict) -> User:
    user = cluster.user(f"{prefix}-{uuid.uuid4().hex[:6]}")
    if rules:
        cluster.grant(namespace, user, list(rules))
    return user


@pytest.fixture
def db(cluster: Cluster, namespace: str) -> str:
    """A Deployment's pod declaring quiesce (db, side) and reload (side) in its template, so
    the owner's template vouches for it; and a bare pod declaring nothing."""
    annotations = declare(db=[exec_notifier("quiesce", "echo ok")],
                          side=[signal_notifier("reload", "SIGHUP"),
                                exec_notifier("quiesce", "echo ok")])
    cluster.create_pod(namespace, "plain")
    return cluster.deploy(namespace, "db", containers=("db", "side"),
                          annotations=annotations)[0]["metadata"]["name"]


def rows(output: str) -> dict[str, list[str]]:
    lines = output.splitlines()
    return {line.split()[0]: line.split() for line in lines}


def test_get_lists_each_pods_notifiers_and_which_the_caller_may_run(
        cluster: Cluster, namespace: str, db: str) -> None:
    operator = user_with(cluster, namespace, "operator", READ_CORE_PODS, READ_NOTIFIER_PODS,
                         NOTIFY)
    table = rows(cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, user=operator).stdout)
    assert table["NAME"] == ["NAME", "NOTIFIERS", "ALLOWED", "AGE"]
    assert table[db][1:3] == ["quiesce,reload", "quiesce,reload"]
    assert table["plain"][1:3] == ["<none>", "<none>"]
    wide = rows(cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, "-o", "wide",
                                user=operator).stdout)
    assert wide["NAME"] == ["NAME", "NOTIFIERS", "ALLOWED", "AGE", "CONTAINERS", "ACCESS"]
    assert wide[db][4:] == ["db=quiesce", "side=reload,quiesce", "OwnerTemplate"]

    one = json.loads(cluster.kubectl("get", NOTIFIER_PODS, db, "-n", namespace, "-o", "json",
                                     user=operator).stdout)
    assert (one["apiVersion"], one["kind"]) == ("notifier.x-k8s.io/v1alpha1", "NotifierPod")
    assert one["access"] == {"allowed": True, "rule": "OwnerTemplate"}
    assert [c["name"] for c in one["containers"]] == ["db", "side"]
    with cluster.admin() as kube:
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{db}").json()
    assert one["metadata"]["uid"] == pod["metadata"]["uid"]
    assert one["metadata"]["labels"] == pod["metadata"]["labels"]
    assert "annotations" not in one["metadata"]

    missing = cluster.kubectl("get", NOTIFIER_PODS, "nope", "-n", namespace, user=operator,
                              check=False)
    assert missing.returncode != 0
    assert 'Error from server (NotFound): pods.notifier.x-k8s.io "nope" not found' in (
        missing.stderr)

    selected = cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, "-l", "app=db",
                               "-o", "name", user=operator).stdout.split()
    assert selected == [f"notifierpod.notifier.x-k8s.io/{db}"]


def test_a_reader_without_notify_sees_the_notifiers_but_may_run_none(
        cluster: Cluster, namespace: str, db: str) -> None:
    reader = user_with(cluster, namespace, "reader", READ_CORE_PODS, READ_NOTIFIER_PODS)
    wide = rows(cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, "-o", "wide",
                                user=reader).stdout)
    assert wide[db][1:3] == ["quiesce,reload", "<none>"]
    assert wide[db][-1] == "Forbidden"
    one = json.loads(cluster.kubectl("get", NOTIFIER_PODS, db, "-n", namespace, "-o", "json",
                                     user=reader).stdout)
    assert one["access"]["message"].startswith(
        f'User "{reader.name}" cannot create resource "pods/notify" in API group '
        f'"notifier.x-k8s.io" in the namespace "{namespace}"')


def test_reading_needs_get_and_list_on_the_core_pods(
        cluster: Cluster, namespace: str, db: str) -> None:
    """Granted the notifier group's pods and pods/notify but not the core pods: 403, saying
    which right is missing, and not whether the pod exists."""
    no_pods = user_with(cluster, namespace, "no-pods", READ_NOTIFIER_PODS, NOTIFY)
    listed = cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, user=no_pods, check=False)
    assert listed.returncode != 0
    assert (f'Error from server (Forbidden): pods.notifier.x-k8s.io is forbidden: reading '
            f'pods.notifier.x-k8s.io needs list on the core pods too: User "{no_pods.name}" '
            f'cannot list resource "pods" in API group "" in the namespace "{namespace}"'
            ) in listed.stderr
    for name in (db, "no-such-pod"):
        got = cluster.kubectl("get", NOTIFIER_PODS, name, "-n", namespace, user=no_pods,
                              check=False)
        assert got.returncode != 0
        assert (f'pods.notifier.x-k8s.io "{name}" is forbidden: reading pods.notifier.x-k8s.io '
                f'needs get on the core pods too') in got.stderr
    outsider = user_with(cluster, namespace, "outsider", READ_CORE_PODS)
    refused = cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, user=outsider,
                              check=False)
    assert refused.returncode != 0
    assert (f'User "{outsider.name}" cannot list resource "pods" in API group '
            f'"notifier.x-k8s.io"') in refused.stderr


def test_plain_pods_stay_the_core_groups(cluster: Cluster, namespace: str, db: str) -> None:
    core = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", "-v=6")
    listed = json.loads(core.stdout)
    assert {item["apiVersion"] for item in listed["items"]} == {"v1"}
    assert {item["kind"] for item in listed["items"]} == {"Pod"}
    assert re.search(rf'url="[^"]*/api/v1/namespaces/{namespace}/pods\?', core.stderr)
    one = cluster.kubectl("get", "pod", db, "-n", namespace, "-o", "jsonpath={.kind}").stdout
    assert one == "Pod"
    ours = cluster.kubectl("get", NOTIFIER_PODS, "-n", namespace, "-v=6")
    assert re.search(rf'url="[^"]*{API}/namespaces/{namespace}/pods\?', ours.stderr)


def test_auth_can_i_asks_about_notify_in_the_notifier_group(
        cluster: Cluster, namespace: str, db: str) -> None:
    """The review kube-apiserver gets is of group notifier.x-k8s.io: the user granted only
    that group's pods/notify is told yes, one granted the core group's pods/notify no."""
    notify_only = user_with(cluster, namespace, "notify-only", NOTIFY)
    core_notify = user_with(cluster, namespace, "core-notify",
                            {"apiGroups": [""], "resources": ["pods/notify"],
                             "verbs": ["create"]})
    one_pod = user_with(cluster, namespace, "one-pod", {**NOTIFY, "resourceNames": [db]})

    def can_i(user: User, *name: str) -> str:
        result = cluster.kubectl("auth", "can-i", "create", f"{NOTIFIER_PODS}{''.join(name)}",
                                 "--subresource=notify", "-n", namespace, user=user,
                                 check=False)
        assert "doesn't have a resource type" not in result.stderr, result.stderr
        return result.stdout.strip()

    assert can_i(notify_only) == "yes"
    plain = cluster.kubectl("auth", "can-i", "create", "pods", "--subresource=notify", "-n",
                            namespace, user=notify_only, check=False)
    assert plain.stdout.strip() == "no", "plain pods are the core group's"
    assert can_i(core_notify) == "no"
    assert can_i(one_pod) == "no"
    assert can_i(one_pod, f"/{db}") == "yes"
    assert can_i(one_pod, "/other") == "no"


def test_explain_describes_the_kind(cluster: Cluster, db: str) -> None:
    """kubectl explain names a group with --api-version: it reads "pods.notifier.x-k8s.io" as
    field notifier... of the core pods (it splits at the first dot), so docs give the flag."""
    ours = ("--api-version=notifier.x-k8s.io/v1alpha1",)
    explained = cluster.kubectl("explain", "pods", *ours).stdout
    assert re.search(r"^KIND:\s+NotifierPod$", explained, re.MULTILINE), explained
    assert re.search(r"^GROUP:\s+notifier.x-k8s.io$", explained, re.MULTILINE), explained
    assert "access" in explained and "containers" in explained
    access = cluster.kubectl("explain", "pods.access.reason", *ours).stdout
    assert "NotReviewed" in access
    assert re.search(r"^KIND:\s+Pod$", cluster.kubectl("explain", "pods").stdout, re.MULTILINE)


def test_watch_is_refused_and_only_cache_reads_are_served(
        cluster: Cluster, namespace: str, db: str) -> None:
    with cluster.admin() as kube:
        path = f"{API}/namespaces/{namespace}/pods"
        watch = kube.get(path, params={"watch": "true"})
        assert watch.status_code == 405, watch.text
        assert watch.json()["reason"] == "MethodNotAllowed"
        exact = kube.get(path, params={"resourceVersion": "5"})
        assert exact.status_code == 400, exact.text
        assert "resourceVersion" in exact.json()["message"]
        first = kube.get(path, params={"limit": "1"}).json()
        rest = kube.get(path, params={"limit": "5",
                                      "continue": first["metadata"]["continue"]}).json()
        names = [item["metadata"]["name"] for item in first["items"] + rest["items"]]
        assert sorted(names) == sorted([db, "plain"])
        assert "continue" not in rest["metadata"]
