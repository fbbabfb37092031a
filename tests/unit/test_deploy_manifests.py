"""apiservice/ (the kustomize base) deploys a highly available server: two replicas sharing
Kubernetes storage, rolled one at a time, spread over nodes, kept available through drains."""

from __future__ import annotations

from typing import Any

import yaml

from apiserver.config import parse_duration
from apiserver.serving.server import GRACEFUL_SHUTDOWN_SECONDS
from localcluster.layout import REPO_ROOT
from tests.support.rbac import granted_to_others, holders

BASE = REPO_ROOT / "apiservice"
LABELS = {"app.kubernetes.io/name": "container-notifier"}


def _rendered() -> list[dict[str, Any]]:
    """The objects of every resource file kustomization.yaml lists (the base has no patches)."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources"}, (
        "the base grew patches or generators: render it with kubectl kustomize here")
    objects = []
    for resource in kustomization["resources"]:
        objects.extend(o for o in yaml.safe_load_all((BASE / resource).read_text()) if o)
    return objects


def _one(kind: str) -> dict[str, Any]:
    (found,) = [o for o in _rendered() if o["kind"] == kind]
    return found


def test_every_yaml_file_of_the_base_is_a_resource_of_it() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    assert {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"} == listed


def test_two_replicas_rolled_without_losing_one() -> None:
    spec = _one("Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_a_disruption_budget_keeps_one_replica() -> None:
    budget = _one("PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["namespace"] == _one("Deployment")["metadata"]["namespace"]
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": LABELS}}


def test_replicas_are_spread_over_nodes() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": LABELS}}]
    (preferred,) = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": LABELS}}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"][
        "podAntiAffinity"], "a required anti-affinity would block a rollout on one node"


def test_kubernetes_storage_and_no_persistent_volume() -> None:
    kinds = {o["kind"] for o in _rendered()}
    assert not kinds & {"PersistentVolumeClaim", "PersistentVolume", "StatefulSet"}
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    assert "--storage=kubernetes" in server["args"]
    assert all("persistentVolumeClaim" not in volume for volume in pod["volumes"])
    assert not [a for a in server["args"] if a.startswith("--data-dir=")], "no local state"
    assert [v["name"] for v in pod["volumes"]] == ["serving-cert"]


def test_a_replica_drains_before_it_stops_within_its_grace_period() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    (delay,) = [a.split("=", 1)[1] for a in server["args"]
                if a.startswith("--shutdown-delay-duration=")]
    assert parse_duration(delay) + GRACEFUL_SHUTDOWN_SECONDS < pod[
        "terminationGracePeriodSeconds"]
    assert "--leader-elect-resource-namespace=$(POD_NAMESPACE)" in server["args"]


def test_the_replica_knows_its_name_and_namespace_and_is_probed() -> None:
    (server,) = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in server["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/livez"
    for probe in ("readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["scheme"] == "HTTPS"


def test_the_service_selects_the_deployments_pods() -> None:
    service = _one("Service")
    template = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template.items()



def test_the_server_bootstraps_its_certificate_into_an_emptydir() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    args = server["args"]
    assert not [a for a in args if a.startswith(("--tls-cert-file", "--tls-private-key-file"))]
    assert "--serving-cert-secret-namespace=$(POD_NAMESPACE)" in args
    (cert_dir,) = [a.partition("=")[2] for a in args if a.startswith("--cert-dir=")]
    (mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == cert_dir]
    assert not mount.get("readOnly")
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert "caBundle" not in _one("APIService")["spec"]


def _role(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in _rendered() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_bootstrap_rbac_is_the_install_plans() -> None:
    assert _role("Role", "container-notifier:serving-cert")["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"],
         "resourceNames": ["container-notifier-serving-cert"],
         "verbs": ["get", "list", "watch", "update", "patch"]}]
    assert _role("ClusterRole", "container-notifier:apiservice-ca-bundle")["rules"] == [
        {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
         "resourceNames": ["v1alpha1.notifier.x-k8s.io"],
         "verbs": ["get", "list", "watch", "update", "patch"]}]
    for kind, name, role_kind in (
            ("RoleBinding", "container-notifier:serving-cert", "Role"),
            ("ClusterRoleBinding", "container-notifier:apiservice-ca-bundle", "ClusterRole")):
        binding = _role(kind, name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                      "kind": role_kind, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "container-notifier",
                                        "namespace": "container-notifier"}]


def test_nobody_but_the_server_holds_the_rights_over_its_serving_secret() -> None:
    """The base and the RBAC recipes grant nobody but the server the rights of
    docs/certificates.md's "Permissions" (tests/unit/test_chart.py checks the chart)."""
    recipes = [o for path in sorted((BASE / "recipes").glob("*.yaml"))
               for o in yaml.safe_load_all(path.read_text()) if o]
    objects = _rendered() + recipes
    assert set(holders(objects)) == {"ClusterRole/container-notifier:server",
                                     "Role/container-notifier:serving-cert",
                                     "ClusterRole/container-notifier:apiservice-ca-bundle"}
    assert granted_to_others(objects) == []


def test_the_check_finds_a_right_that_reaches_someone_else() -> None:
    role = {"kind": "ClusterRole", "metadata": {"name": "r", "labels": {
        "rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]},
                  {"apiGroups": ["*"], "resources": ["users"], "verbs": ["impersonate"]}]}
    binding = {"kind": "RoleBinding", "metadata": {"name": "b"},
               "roleRef": {"kind": "ClusterRole", "name": "r"},
               "subjects": [{"kind": "User", "name": "u"},
                            {"kind": "ServiceAccount", "name": "container-notifier",
                             "namespace": "container-notifier"}]}
    rights = ["get /secrets", "get /pods/exec", "impersonate */users"]
    assert holders([role, binding]) == {"ClusterRole/r": rights}
    assert granted_to_others([role, binding]) == [
        f"ClusterRole/r aggregates {rights} into other roles",
        f"RoleBinding/b grants {rights} to [{{'kind': 'User', 'name': 'u'}}]"]
