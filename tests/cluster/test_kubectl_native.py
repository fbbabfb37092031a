"""kubectl against the served API as a user bound to the built-in ``edit`` ClusterRole (which
the shipped container-notifier:aggregate-to-edit role extends): create -f, wait for a
condition, get with its columns, error wording, and how to check notify access (issue 12)."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from apiserver.api.status import NOTIFY_ACCESS_HINT
from tests.support.kube import Cluster, User
from tests.support.notify import API, declare, exec_notifier, notification, notify_path

pytestmark = pytest.mark.cluster

PODNOTIFIER = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier"}


def bound(cluster: Cluster, namespace: str, prefix: str, cluster_role: str) -> User:
    """A new user bound to ``cluster_role`` in the namespace, and to nothing else."""
    user = cluster.user(f"{prefix}-{uuid.uuid4().hex[:6]}")
    cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": user.name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user.name}]})
    return user


@pytest.fixture
def editor(cluster: Cluster, namespace: str) -> User:
    """A user with only the built-in edit role in the namespace: it may not list CRDs."""
    return bound(cluster, namespace, "editor", "edit")


@pytest.fixture
def two_container_pod(cluster: Cluster, namespace: str) -> str:
    """db exits 7 on "mixed", side succeeds; both succeed on "quiesce"."""
    annotations = declare(
        db=[exec_notifier("quiesce", "echo ok"), exec_notifier("mixed", "exit 7")],
        side=[exec_notifier("quiesce", "echo ok"), exec_notifier("mixed", "echo fine")])
    return cluster.deploy(namespace, "db", containers=("db", "side"),
                          annotations=annotations)[0]["metadata"]["name"]


def kubectl_notify(cluster: Cluster, user: User, namespace: str, pod: str, notifier: str,
                   **spec: object) -> dict:
    """Run a notifier with kubectl create --raw and wait for it; the record."""
    body = json.dumps({**PODNOTIFIER, "spec": {"notifier": notifier, **spec}})
    result = cluster.kubectl("create", "--raw", f"{notify_path(namespace, pod)}?waitSeconds=20",
                             "-f", "-", user=user, input=body)
    return json.loads(result.stdout)


def test_create_notification_from_a_file_validates_without_listing_crds(
        cluster: Cluster, namespace: str, editor: User, two_container_pod: str) -> None:
    """kubectl validates client-side only when the OpenAPI of the kind lacks fieldValidation
    on its PATCH operation, and then lists CRDs, which edit may not: it must not get there."""
    with cluster.admin() as kube:
        document = kube.get(f"/openapi/v3{API}").json()
    patches = [item["patch"] for item in document["paths"].values() if "patch" in item
               and item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Notification"]
    assert patches, "kubectl reads fieldValidation support from the PATCH operation only"
    manifest = notification("snap", "quiesce", {"app": "db"})
    result = cluster.kubectl("create", "-f", "-", "-n", namespace, "-v=6", user=editor,
                             input=json.dumps(manifest), check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "notification.notifier.x-k8s.io/snap created" in result.stdout
    assert "customresourcedefinitions" not in result.stderr
    assert re.search(r'verb="POST" url="[^"]*/notifications\?[^"]*fieldValidation=Strict',
                     result.stderr), result.stderr[-2000:]


def test_wait_for_complete_and_failed_conditions(
        cluster: Cluster, namespace: str, editor: User, two_container_pod: str) -> None:
    ok = kubectl_notify(cluster, editor, namespace, two_container_pod, "quiesce")
    failed = kubectl_notify(cluster, editor, namespace, two_container_pod, "mixed")

    for record, condition in ((ok, "Complete"), (failed, "Failed")):
        name = record["metadata"]["name"]
        result = cluster.kubectl("wait", f"--for=condition={condition}", f"podnotifier/{name}",
                                 "-n", namespace, "--timeout=30s", user=editor)
        assert f"podnotifier.notifier.x-k8s.io/{name} condition met" in result.stdout
    (condition,) = failed["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Failed", "True", "NonZeroExitCode")
    assert condition["lastTransitionTime"] == failed["status"]["completionTime"]
    unmet = cluster.kubectl("wait", "--for=condition=Complete",
                            f"podnotifier/{failed['metadata']['name']}", "-n", namespace,
                            "--timeout=2s", user=editor, check=False)
    assert unmet.returncode != 0


def test_get_shows_milliseconds_and_the_failing_exit_code(
        cluster: Cluster, namespace: str, editor: User, two_container_pod: str) -> None:
    first = kubectl_notify(cluster, editor, namespace, two_container_pod, "quiesce")
    second = kubectl_notify(cluster, editor, namespace, two_container_pod, "mixed")

    table = cluster.kubectl("get", "podnotifiers", "-n", namespace,
                            "--sort-by=.status.startTime", user=editor).stdout.splitlines()
    assert table[0].split() == ["NAME", "POD", "NOTIFIER", "PHASE", "EXIT", "DURATION", "AGE"]
    rows = [line.split() for line in table[1:]]
    assert [row[0] for row in rows] == [first["metadata"]["name"], second["metadata"]["name"]]
    assert rows[0][3:5] == ["Succeeded", "2/2"]
    assert rows[1][3:5] == ["Failed", "7"]
    for row in rows:
        assert re.fullmatch(r"\d{1,3}ms|\d(\.\d)?s", row[5]), row

    (db,) = [c for c in second["status"]["containers"] if c["name"] == "db"]
    assert db["exitCode"] == 7
    assert "Internal error occurred" not in db["message"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                        second["metadata"]["creationTimestamp"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", second["status"]["startTime"])


def test_invalid_request_names_the_kind_and_the_field_once(
        cluster: Cluster, namespace: str, editor: User, two_container_pod: str) -> None:
    body = json.dumps({**PODNOTIFIER, "metadata": {"generateName": "nightly-"},
                       "spec": {"notifier": "quiesce", "timeoutSeconds": 0}})
    result = cluster.kubectl("create", "--raw", notify_path(namespace, two_container_pod),
                             "-f", "-", user=editor, input=body, check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == (
        'The PodNotifier "nightly-" is invalid: spec.timeoutSeconds: Invalid value: 0: must be '
        "between 1 and 600, inclusive")


def test_checking_notify_access(cluster: Cluster, namespace: str, two_container_pod: str
                                ) -> None:
    """Plain "pods/notify" is the core group's to kubectl auth can-i (and "notify" is read as
    the pod's name): it says no to a user of the shipped notify-only role. Named with the group
    (pods.notifier.x-k8s.io, which discovery lists since issue 23) it answers right, as a
    SelfSubjectAccessReview sent with kubectl create does."""
    notifier = bound(cluster, namespace, "notify-only", "container-notifier:notifier")
    can_i = cluster.kubectl("auth", "can-i", "create", "pods/notify", "-n", namespace,
                            user=notifier, check=False)
    assert can_i.stdout.strip() == "no"
    qualified = cluster.kubectl("auth", "can-i", "create", "pods.notifier.x-k8s.io",
                                "--subresource=notify", "-n", namespace, user=notifier,
                                check=False)
    assert qualified.stdout.strip() == "yes", qualified.stderr

    def review(user: User) -> bool:
        ssar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {
                    "namespace": namespace, "verb": "create", "group": "notifier.x-k8s.io",
                    "resource": "pods", "subresource": "notify", "name": two_container_pod}}}
        result = cluster.kubectl("create", "--validate=false", "-o",
                                 "jsonpath={.status.allowed}", "-f", "-", user=user,
                                 input=json.dumps(ssar))
        return result.stdout.strip() == "true"

    assert review(notifier)
    assert not review(cluster.user(f"nobody-{uuid.uuid4().hex[:6]}"))
    rules = cluster.kubectl("auth", "can-i", "--list", "-n", namespace, user=notifier).stdout
    assert re.search(r"^pods\.notifier\.x-k8s\.io/notify\s.*\[create\]", rules, re.MULTILINE)


def test_notification_creator_without_notify_is_told_how_to_check(
        cluster: Cluster, namespace: str) -> None:
    """The namespace-wide pods/notify check is this server's own (kube-apiserver authorized
    create notifications): its 403 says how to check access."""
    creator = cluster.user(f"creator-{uuid.uuid4().hex[:6]}")
    cluster.grant(namespace, creator, [{"apiGroups": ["notifier.x-k8s.io"],
                                        "resources": ["notifications"], "verbs": ["create"]}])
    result = cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-",
                             user=creator, check=False,
                             input=json.dumps(notification("snap", "quiesce", {"app": "db"})))
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f'Error from server (Forbidden): error when creating "STDIN": '
        f'pods.notifier.x-k8s.io is forbidden: User '
        f'"{creator.name}" cannot create resource "pods/notify" in API group '
        f'"notifier.x-k8s.io" in the namespace "{namespace}"{NOTIFY_ACCESS_HINT}')


def test_a_yaml_body_is_accepted_through_the_aggregator(
        cluster: Cluster, namespace: str, editor: User, two_container_pod: str) -> None:
    """kube-apiserver reads application/yaml wherever it reads JSON; so does this API."""
    body = ("apiVersion: notifier.x-k8s.io/v1alpha1\nkind: PodNotifier\n"
            "spec:\n  notifier: quiesce\n")
    with cluster.client_for(editor) as client:
        created = client.post(f"{notify_path(namespace, two_container_pod)}?waitSeconds=20",
                              content=body, headers={"Content-Type": "application/yaml"})
        assert created.status_code == 201, created.text
        assert created.json()["status"]["phase"] == "Succeeded"
        duplicated = client.post(notify_path(namespace, two_container_pod),
                                 content=body + "  notifier: mixed\n",
                                 headers={"Content-Type": "application/yaml"})
    assert duplicated.status_code == 400, duplicated.text
    assert 'duplicate field "spec.notifier"' in duplicated.json()["message"]


def _cell(table: str, row_name: str, column: str) -> str:
    """The cell of `column` in the row named `row_name` of kubectl's table output (columns
    start where their header does)."""
    header, *rows = table.splitlines()
    start = header.index(column)
    following = [m.start() for m in re.finditer(r"\S+", header) if m.start() > start]
    end = following[0] if following else None
    (row,) = [line for line in rows if line.split()[0] == row_name]
    return row[start:end].strip()


def test_get_notifications_shows_the_quiesce_window(
        cluster: Cluster, namespace: str, editor: User) -> None:
    cluster.deploy(namespace, "win", annotations=declare(app=[
        exec_notifier("quiesce", "echo quiesced"), exec_notifier("unquiesce", "echo back")]))
    windowed = notification("snap", "quiesce", {"app": "win"}, release={"notifier": "unquiesce"})
    plain = notification("plain", "quiesce", {"app": "win"})
    cluster.kubectl("create", "-f", "-", "-n", namespace, user=editor,
                    input=json.dumps(windowed))
    cluster.kubectl("wait", "--for=condition=Quiesced", "notification/snap", "-n", namespace,
                    "--timeout=60s", user=editor)
    table = cluster.kubectl("get", "notif", "-n", namespace, user=editor).stdout
    assert table.splitlines()[0].split() == [
        "NAME", "NOTIFIER", "PHASE", "SUCCEEDED/TOTAL", "FAILED", "WINDOW", "AGE"], table
    assert re.fullmatch(r"open \d+s", _cell(table, "snap", "WINDOW")), table

    cluster.kubectl("create", "--raw",
                    f"{API}/namespaces/{namespace}/notifications/snap/release", "-f",
                    "/dev/null", user=editor)
    cluster.kubectl("wait", "--for=condition=Complete", "notification/snap", "-n", namespace,
                    "--timeout=60s", user=editor)
    cluster.kubectl("create", "-f", "-", "-n", namespace, user=editor, input=json.dumps(plain))
    cluster.kubectl("wait", "--for=condition=Complete", "notification/plain", "-n", namespace,
                    "--timeout=60s", user=editor)
    table = cluster.kubectl("get", "notifications", "-n", namespace, user=editor).stdout
    assert re.fullmatch(r"closed \d+s", _cell(table, "snap", "WINDOW")), table
    assert _cell(table, "plain", "WINDOW") == "", table


def test_notif_is_the_short_name_and_no_built_in_resource_has_it(
        cluster: Cluster, namespace: str, editor: User) -> None:
    resources = cluster.kubectl("api-resources", "--no-headers").stdout.splitlines()
    having = [line.split()[0] for line in resources if "notif" in re.split(r"[\s,]+", line)]
    assert having == ["notifications"], resources
    ours = cluster.kubectl("api-resources", "--api-group=notifier.x-k8s.io").stdout
    assert re.search(r"^notifications\s+notif\s+notifier\.x-k8s\.io/v1alpha1\s+true\s+"
                     r"Notification$", ours, re.MULTILINE), ours
    listed = cluster.kubectl("get", "notif", "-n", namespace, user=editor, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "No resources found" in listed.stderr


def test_explain_gives_the_defaults_and_the_phases_of_each_kind(cluster: Cluster) -> None:
    parallelism = cluster.kubectl("explain", "notifications.spec.parallelism").stdout
    assert "Default 1; at most the server's" in parallelism, parallelism
    ttl = cluster.kubectl("explain", "podnotifiers.spec.ttlSecondsAfterFinished").stdout
    assert "Default: the server's --default-ttl-seconds-after-finished (3600" in " ".join(
        ttl.split()), ttl

    def enum(field: str) -> list[str]:
        explained = cluster.kubectl("explain", field).stdout
        block = explained.split("ENUM:", 1)[1].split("DESCRIPTION:", 1)[0]
        return block.split()

    assert enum("notifications.status.phase") == ["Pending", "Running", "Succeeded", "Failed"]
    assert "Held" in enum("podnotifiers.status.phase")
    assert "Held" not in cluster.kubectl("explain", "notifications.status.phase").stdout
