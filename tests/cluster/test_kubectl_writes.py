"""The writes kubectl users make, with the real kubectl through the aggregator (issue 12,
deliverable 2): label, annotate, patch (merge, JSON, strategic), edit, apply twice, server-side
apply twice (managed fields, conflicts), diff, and the 405s that say what to do instead."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml

from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import declare, notify, signal_notifier, wait_finished

pytestmark = pytest.mark.cluster

KIND = "notification"
TARGET = "fleet-target"


@pytest.fixture
def editor(cluster: Cluster, namespace: str) -> User:
    """A user bound to the aggregated `edit` ClusterRole in the namespace, as a team member
    would be."""
    user = cluster.user(f"editor-{uuid.uuid4().hex[:6]}")
    cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": user.name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user.name}]})
    return user


@pytest.fixture(autouse=True)
def target(cluster: Cluster, namespace: str) -> None:
    """The pod the manifest's Notification selects: it declares both notifiers (a
    Notification no pod declares is refused), as signals, so a run ends at once."""
    cluster.deploy(namespace, TARGET, annotations=declare(
        app=[signal_notifier("quiesce", "SIGHUP"), signal_notifier("reload", "SIGHUP")]))


def manifest(namespace: str, name: str = "fleet", labels: dict[str, str] | None = None,
             notifier: str = "quiesce") -> str:
    """A Notification of the one `target` pod, as YAML."""
    return yaml.safe_dump({
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"team": "a"}},
        "spec": {"selector": {"matchLabels": {"app": TARGET}}, "notifier": notifier},
    })


def created(cluster: Cluster, user: User, *args: str, namespace: str) -> Any:
    """kubectl that creates the manifest's Notification, once it has finished (its status no
    longer changes, so resourceVersions compare)."""
    done = kubectl(cluster, user, *args, stdin=manifest(namespace))
    wait_finished(cluster, namespace, "fleet")
    return done


def kubectl(cluster: Cluster, user: User, *args: str, stdin: str | None = None,
            check: bool = True) -> Any:
    return cluster.kubectl(*args, user=user, input=stdin, check=check)


def live(cluster: Cluster, user: User, namespace: str, name: str = "fleet") -> dict[str, Any]:
    return json.loads(kubectl(cluster, user, "-n", namespace, "get", KIND, name, "-o", "json",
                              "--show-managed-fields").stdout)


def settled_version(cluster: Cluster, user: User, namespace: str) -> str:
    """The Notification's resourceVersion once every replica serves the same one: each replica
    reads from its own cache, which follows kube-apiserver a moment behind, and kubectl's
    connections go to either (docs/storage.md)."""
    seen: list[str] = []

    def agreed() -> bool:
        seen.append(live(cluster, user, namespace)["metadata"]["resourceVersion"])
        return len(seen) >= 2 * cluster.replicas and len(set(seen[-2 * cluster.replicas:])) == 1

    wait_until(agreed, "the replicas to serve one resourceVersion", 15, interval=0.1)
    return seen[-1]


def managers(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(entry["manager"], entry["operation"]): entry["fieldsV1"]
            for entry in obj["metadata"].get("managedFields") or []}


def test_label_annotate_and_patch(cluster: Cluster, namespace: str, editor: User) -> None:
    created(cluster, editor, "create", "-f", "-", namespace=namespace)
    ns = ("-n", namespace)
    assert "labeled" in kubectl(cluster, editor, *ns, "label", KIND, "fleet", "tier=db").stdout
    assert "annotated" in kubectl(cluster, editor, *ns, "annotate", KIND, "fleet",
                                  "example.com/owner=dba").stdout
    kubectl(cluster, editor, *ns, "patch", KIND, "fleet", "--type", "merge",
            "-p", '{"metadata": {"labels": {"merged": "yes"}}}')
    kubectl(cluster, editor, *ns, "patch", KIND, "fleet", "--type", "json",
            "-p", '[{"op": "add", "path": "/metadata/labels/json", "value": "yes"},'
                  ' {"op": "test", "path": "/spec/notifier", "value": "quiesce"}]')
    kubectl(cluster, editor, *ns, "patch", KIND, "fleet",
            "-p", '{"metadata": {"labels": {"strategic": "yes"}}}')
    kubectl(cluster, editor, *ns, "label", KIND, "fleet", "team-")
    obj = live(cluster, editor, namespace)
    assert obj["metadata"]["labels"] == {"tier": "db", "merged": "yes", "json": "yes",
                                         "strategic": "yes"}
    assert obj["metadata"]["annotations"] == {"example.com/owner": "dba"}
    owners = managers(obj)
    assert owners[("kubectl-label", "Update")] == {"f:metadata": {"f:labels": {"f:tier": {}}}}
    assert owners[("kubectl-annotate", "Update")] == {
        "f:metadata": {"f:annotations": {"f:example.com/owner": {}}}}

    refused = kubectl(cluster, editor, *ns, "patch", KIND, "fleet", "--type", "merge",
                      "-p", '{"spec": {"notifier": "reload"}}', check=False)
    assert refused.returncode != 0
    assert "is invalid" in refused.stderr and "spec.notifier" in refused.stderr
    assert "field is immutable" in refused.stderr
    failed_test = kubectl(cluster, editor, *ns, "patch", KIND, "fleet", "--type", "json",
                          "-p", '[{"op": "test", "path": "/spec/notifier", "value": "reload"}]',
                          check=False)
    assert failed_test.returncode != 0 and "test failed" in failed_test.stderr
    assert live(cluster, editor, namespace)["spec"]["notifier"] == "quiesce"


def test_edit_changes_labels_and_keeps_the_spec(cluster: Cluster, namespace: str, editor: User,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    created(cluster, editor, "create", "-f", "-", namespace=namespace)
    ns = ("-n", namespace)
    monkeypatch.setenv("KUBE_EDITOR", "sed -i -e s/team:\\ a/team:\\ edited/")
    assert "edited" in kubectl(cluster, editor, *ns, "edit", KIND, "fleet").stdout
    assert live(cluster, editor, namespace)["metadata"]["labels"] == {"team": "edited"}
    monkeypatch.setenv("KUBE_EDITOR", "sed -i -e s/notifier:\\ quiesce/notifier:\\ reload/")
    refused = kubectl(cluster, editor, *ns, "edit", KIND, "fleet", check=False)
    assert refused.returncode != 0 and "is invalid" in refused.stderr
    assert live(cluster, editor, namespace)["spec"]["notifier"] == "quiesce"


def test_client_side_apply_twice_and_diff(cluster: Cluster, namespace: str,
                                          editor: User) -> None:
    first = created(cluster, editor, "apply", "-f", "-", namespace=namespace)
    assert "created" in first.stdout
    again = kubectl(cluster, editor, "apply", "-f", "-", stdin=manifest(namespace))
    assert "unchanged" in again.stdout
    assert kubectl(cluster, editor, "diff", "-f", "-",
                   stdin=manifest(namespace)).returncode == 0

    changed = manifest(namespace, labels={"team": "b"})
    diff = kubectl(cluster, editor, "diff", "-f", "-", stdin=changed, check=False)
    assert diff.returncode == 1, diff.stderr
    assert "-    team: a" in diff.stdout and "+    team: b" in diff.stdout
    assert live(cluster, editor, namespace)["metadata"]["labels"] == {"team": "a"}
    assert "configured" in kubectl(cluster, editor, "apply", "-f", "-", stdin=changed).stdout
    obj = live(cluster, editor, namespace)
    assert obj["metadata"]["labels"] == {"team": "b"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]

    spec_change = kubectl(cluster, editor, "apply", "-f", "-", check=False,
                          stdin=manifest(namespace, labels={"team": "b"}, notifier="reload"))
    assert spec_change.returncode != 0 and "field is immutable" in spec_change.stderr


def test_server_side_apply_twice_with_managed_fields_and_conflicts(
        cluster: Cluster, namespace: str, editor: User) -> None:
    ssa = ("apply", "--server-side", "-f", "-")
    assert "serverside-applied" in created(cluster, editor, *ssa, namespace=namespace).stdout
    obj = live(cluster, editor, namespace)
    assert obj["spec"]["requestedBy"]["username"] == editor.name
    assert managers(obj)[("kubectl", "Apply")] == {"f:metadata": {"f:labels": {"f:team": {}}}}
    version = settled_version(cluster, editor, namespace)
    assert "serverside-applied" in kubectl(cluster, editor, *ssa,
                                           stdin=manifest(namespace)).stdout
    assert settled_version(cluster, editor, namespace) == version, "a no-op apply wrote"

    kubectl(cluster, editor, "-n", namespace, "label", KIND, "fleet", "team=z", "--overwrite")
    conflict = kubectl(cluster, editor, *ssa, stdin=manifest(namespace), check=False)
    assert conflict.returncode != 0
    assert 'conflict with "kubectl-label"' in conflict.stderr
    assert ".metadata.labels.team" in conflict.stderr
    diff = kubectl(cluster, editor, "diff", "--server-side", "--force-conflicts", "-f", "-",
                   stdin=manifest(namespace), check=False)
    assert diff.returncode == 1 and "+    team: a" in diff.stdout
    kubectl(cluster, editor, *ssa, "--force-conflicts", stdin=manifest(namespace))
    obj = live(cluster, editor, namespace)
    assert obj["metadata"]["labels"] == {"team": "a"}
    assert ("kubectl-label", "Update") not in managers(obj)

    # A label the configuration no longer holds is removed.
    kubectl(cluster, editor, *ssa, stdin=manifest(namespace, labels={"tier": "db"}))
    assert live(cluster, editor, namespace)["metadata"]["labels"] == {"tier": "db"}


def test_podnotifier_records_take_labels_and_refuse_create_with_a_hint(
        cluster: Cluster, namespace: str, editor: User) -> None:
    (pod,) = cluster.deploy(namespace, "db", annotations=declare(
        app=[signal_notifier("reload", "SIGHUP")]))
    with cluster.admin() as client:
        response = notify(client, namespace, pod["metadata"]["name"], "reload")
    assert response.status_code == 201, response.text
    name = response.json()["metadata"]["name"]
    kubectl(cluster, editor, "-n", namespace, "label", "podnotifier", name, "reviewed=yes")
    record = json.loads(kubectl(cluster, editor, "-n", namespace, "get", "podnotifier", name,
                                "-o", "json").stdout)
    assert record["metadata"]["labels"]["reviewed"] == "yes"

    podnotifier = yaml.safe_dump({
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "metadata": {"name": "by-hand", "namespace": namespace},
        "spec": {"podName": pod["metadata"]["name"], "notifier": "reload"}})
    created = cluster.kubectl("create", "-f", "-", input=podnotifier, check=False)
    assert created.returncode != 0
    assert "MethodNotAllowed" in created.stderr
    assert "/namespaces/NAMESPACE/pods/POD/notify" in created.stderr
    replaced = cluster.kubectl("-n", namespace, "replace", "-f", "-", check=False,
                               input=manifest(namespace))
    assert replaced.returncode != 0 and "PUT (update) is not served" in replaced.stderr
