"""The Helm chart's rendering (helm template, no cluster): each certificate mode, storage backend
and optional object; the values it refuses and why; apiservice/ equal to its output (the drift
check of make lint); docs/install.md listing every value and every command under a heading the
install test runs."""

from __future__ import annotations

import base64
import copy
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import render_manifests
import yaml

from localcluster.__main__ import build_binaries
from tests.support.doc_commands import console_commands
from tests.support.rbac import granted_to_others, holders

NAMESPACE = "container-notifier"
SERVING_SANS = ["container-notifier", "container-notifier.{ns}", "container-notifier.{ns}.svc",
                "container-notifier.{ns}.svc.cluster.local"]
BOOTSTRAP_FLAGS = [
    "--cert-dir=/var/run/container-notifier/serving-cert",
    "--serving-cert-secret=container-notifier-serving-cert",
    "--serving-cert-secret-namespace=$(POD_NAMESPACE)",
    "--serving-cert-service=container-notifier",
    "--apiservice-name=v1alpha1.notifier.x-k8s.io",
]
FILE_FLAGS = ["--tls-cert-file=/var/run/serving-cert/tls.crt",
              "--tls-private-key-file=/var/run/serving-cert/tls.key"]
INSTALL_TEST_HEADINGS = (
    "Helm, bootstrap certificates", "Helm, cert-manager certificates", "Upgrade with Helm",
    "Uninstall with Helm", "Remove everything", "kustomize, bootstrap certificates",
    "kustomize, cert-manager certificates", "Uninstall with kustomize")
"""The headings of docs/install.md whose commands tests/cluster/test_helm_install.py runs."""


@cache
def bins() -> Path:
    return build_binaries()


def render(*values: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """helm template with `values` after image.repository=render_manifests.IMAGE (the chart
    requires a repository)."""
    argv = [str(bins() / "helm"), "template", "container-notifier",
            str(render_manifests.CHART), f"--namespace={namespace}"]
    for value in (f"image.repository={render_manifests.IMAGE}", *values):
        argv += ["--set", value]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refusal(*values: str) -> str:
    """helm template's error for `values` (it must refuse them)."""
    argv = [str(bins() / "helm"), "template", "x", str(render_manifests.CHART)]
    for value in (f"image.repository={render_manifests.IMAGE}", *values):
        argv += ["--set", value]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode != 0, f"helm template accepted {values}"
    return done.stderr


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind
             and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def names(objects: list[dict[str, Any]], kind: str) -> set[str]:
    return {o["metadata"]["name"] for o in objects if o["kind"] == kind}


def server(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def volume(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == name)


def test_committed_manifests_equal_the_chart() -> None:
    assert render_manifests.drift(bins() / "helm", bins() / "kubectl") == []


def test_drift_reports_changed_missing_and_extra_objects() -> None:
    chart = render_manifests.objects((render_manifests.BASE / "service.yaml").read_text())
    changed = copy.deepcopy(chart)
    changed[0]["spec"]["ports"][0]["port"] = 444
    extra = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert render_manifests.differences("f", chart, changed) == [
        "f: Service/container-notifier/container-notifier differs from the chart's output"]
    assert render_manifests.differences("f", chart, []) == [
        "f: missing Service/container-notifier/container-notifier"]
    assert render_manifests.differences("f", chart, [*chart, extra]) == [
        "f: not in the chart's output: ConfigMap//x"]


def test_helm_only_labels_are_left_out_of_the_base() -> None:
    rendered = render_manifests.helm_template(bins() / "helm")
    assert "helm.sh/chart: container-notifier-" in rendered
    base = render_manifests.by_template(rendered)
    assert not any(label in text for text in base.values()
                   for label in render_manifests.HELM_ONLY_LABELS)
    assert render_manifests.differences("base", render_manifests.objects(rendered),
                                        render_manifests.objects("---\n".join(base.values()))
                                        ) == []


def test_bootstrap_mode_is_the_default() -> None:
    objects = render()
    args = server(objects)["args"]
    assert [a for a in args if a in BOOTSTRAP_FLAGS] == BOOTSTRAP_FLAGS
    assert not [a for a in args if a.startswith("--tls-")]
    assert volume(objects, "serving-cert") == {"name": "serving-cert",
                                               "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    apiservice = one(objects, "APIService")
    assert "caBundle" not in apiservice["spec"]
    assert "annotations" not in apiservice["metadata"]
    assert not names(objects, "Certificate")


def test_bootstrap_rbac_is_the_plan_s() -> None:
    objects = render()
    assert one(objects, "Role", "container-notifier:serving-cert")["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"],
         "resourceNames": ["container-notifier-serving-cert"],
         "verbs": ["get", "list", "watch", "update", "patch"]}]
    assert one(objects, "ClusterRole", "container-notifier:apiservice-ca-bundle")["rules"] == [
        {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
         "resourceNames": ["v1alpha1.notifier.x-k8s.io"],
         "verbs": ["get", "list", "watch", "update", "patch"]}]
    for kind, name in (("RoleBinding", "container-notifier:serving-cert"),
                       ("ClusterRoleBinding", "container-notifier:apiservice-ca-bundle")):
        binding = one(objects, kind, name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "container-notifier",
                                        "namespace": NAMESPACE}]


SERVER_ROLES = {"ClusterRole/container-notifier:server",
                "Role/container-notifier:serving-cert",
                "ClusterRole/container-notifier:apiservice-ca-bundle"}
"""The roles granting rights that must stay with the server (docs/certificates.md,
"Permissions"): exec for the notifiers, the serving Secret, the APIService's caBundle."""


@pytest.mark.parametrize("values", [
    (), ("certificates.mode=cert-manager",), ("storage.backend=sqlite", "replicas=1"),
    ("metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true",
     "networkPolicy.apiserver.cidrs={10.0.0.0/24}"),
])
def test_only_the_server_holds_the_rights_over_its_serving_secret(values: tuple[str, ...]
                                                                  ) -> None:
    """No role the chart renders lets anyone but the server read or write Secrets, create
    pods or workloads, exec, mint tokens, impersonate or write the APIService: each role that
    grants one is the server's, aggregates into no other role and is bound to the server's
    ServiceAccount alone."""
    objects = render(*values)
    assert set(holders(objects)) <= SERVER_ROLES
    assert "Role/container-notifier:serving-cert" in holders(objects) or (
        "certificates.mode=cert-manager" in values)
    assert granted_to_others(objects) == []


def test_cert_manager_mode() -> None:
    objects = render("certificates.mode=cert-manager", namespace="ops")
    args = server(objects)["args"]
    assert FILE_FLAGS == [a for a in args if a.startswith("--tls-")]
    assert not set(BOOTSTRAP_FLAGS) & set(args)
    assert volume(objects, "serving-cert")["secret"] == {
        "secretName": "container-notifier-serving-cert"}
    assert one(objects, "APIService")["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "ops/container-notifier-serving-cert"}
    assert "caBundle" not in one(objects, "APIService")["spec"]
    serving = one(objects, "Certificate", "container-notifier-serving-cert")["spec"]
    assert serving["secretName"] == "container-notifier-serving-cert"
    assert serving["dnsNames"] == [n.format(ns="ops") for n in SERVING_SANS]
    assert serving["issuerRef"] == {"kind": "Issuer", "name": "container-notifier-ca"}
    ca = one(objects, "Certificate", "container-notifier-ca")["spec"]
    assert ca["isCA"] is True
    assert ca["issuerRef"] == {"kind": "Issuer", "name": "container-notifier-selfsigned"}
    assert one(objects, "Issuer", "container-notifier-ca")["spec"] == {
        "ca": {"secretName": ca["secretName"]}}
    assert one(objects, "Issuer", "container-notifier-selfsigned")["spec"] == {"selfSigned": {}}
    assert not names(objects, "Role") & {"container-notifier:serving-cert"}
    assert not names(objects, "ClusterRole") & {"container-notifier:apiservice-ca-bundle"}


def test_secret_mode() -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()
    objects = render("certificates.mode=secret", "certificates.secret.name=mine",
                     f"certificates.secret.caBundle={bundle}")
    assert volume(objects, "serving-cert")["secret"] == {"secretName": "mine"}
    assert one(objects, "APIService")["spec"]["caBundle"] == bundle
    assert FILE_FLAGS == [a for a in server(objects)["args"] if a.startswith("--tls-")]
    assert "set certificates.secret.name" in refusal("certificates.mode=secret")
    assert "set certificates.secret.caBundle" in refusal(
        "certificates.mode=secret", "certificates.secret.name=mine")


AUTHENTICATION_READER = "container-notifier:extension-apiserver-authentication-reader"


def test_every_namespaced_object_is_in_the_release_namespace() -> None:
    objects = render("metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true",
                     "networkPolicy.apiserver.cidrs={10.0.0.0/24}", namespace="ops")
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                      "APIService"}
    for obj in objects:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["metadata"]
        elif obj["metadata"]["name"] != AUTHENTICATION_READER:  # kube-system's ConfigMap
            assert obj["metadata"]["namespace"] == "ops", obj["metadata"]
    for obj in objects:
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "ops"
    assert one(objects, "APIService")["spec"]["service"]["namespace"] == "ops"
    monitor = one(objects, "ServiceMonitor")["spec"]
    assert monitor["namespaceSelector"] == {"matchNames": ["ops"]}
    assert monitor["endpoints"][0]["tlsConfig"]["serverName"] == "container-notifier.ops.svc"


def test_sqlite_storage() -> None:
    assert "set replicas=1 (it is 2)" in refusal("storage.backend=sqlite")
    objects = render("storage.backend=sqlite", "replicas=1")
    deployment = one(objects, "Deployment")["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"] == {"type": "Recreate"}
    args = server(objects)["args"]
    assert "--storage=sqlite" in args and "--data-dir=/var/lib/container-notifier" in args
    assert volume(objects, "data")["persistentVolumeClaim"] == {
        "claimName": "container-notifier-data"}
    claim = one(objects, "PersistentVolumeClaim", "container-notifier-data")
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert not names(objects, "PodDisruptionBudget")
    ephemeral = render("storage.backend=sqlite", "replicas=1",
                       "storage.sqlite.persistence=false")
    assert volume(ephemeral, "data") == {"name": "data", "emptyDir": {}}
    assert not names(ephemeral, "PersistentVolumeClaim")


def test_kubernetes_storage_defaults() -> None:
    objects = render()
    assert "--storage=kubernetes" in server(objects)["args"]
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert not names(render("replicas=1"), "PodDisruptionBudget")
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_network_policy() -> None:
    assert "set networkPolicy.apiserver.cidrs" in refusal("networkPolicy.enabled=true")
    assert not names(render(), "NetworkPolicy")
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"component": "kube-apiserver"}}}
    objects = render("networkPolicy.enabled=true",
                     "networkPolicy.apiserver.cidrs={10.0.0.0/24,192.168.1.10/32}",
                     "networkPolicy.apiserver.peers[0].namespaceSelector.matchLabels."
                     "kubernetes\\.io/metadata\\.name=kube-system",
                     "networkPolicy.apiserver.peers[0].podSelector.matchLabels."
                     "component=kube-apiserver")
    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["podSelector"] == {"matchLabels": {"app.kubernetes.io/name":
                                                     "container-notifier"}}
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{
        "ports": [{"protocol": "TCP", "port": "https"}],
        "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "192.168.1.10/32"}},
                 peer,
                 {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": "monitoring"}},
                  "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]}]
    alone = render("networkPolicy.enabled=true", "networkPolicy.apiserver.cidrs={10.0.0.0/24}",
                   "networkPolicy.prometheus.enabled=false")
    assert one(alone, "NetworkPolicy")["spec"]["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}}]


def test_without_an_image_repository_the_chart_says_to_build_and_push_one() -> None:
    """No image is published: the chart has no default repository to pull."""
    done = subprocess.run([str(bins() / "helm"), "template", "x", str(render_manifests.CHART)],
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert ("image.repository is required: no container-notifier image is published; build "
            "yours and push it (make image IMAGE=<registry>/container-notifier, docs/image.md)"
            ) in done.stderr


def test_image_and_scheduling_values() -> None:
    digest = "sha256:" + "a" * 64
    assert server(render("image.repository=r.example/cn", f"image.digest={digest}"))[
        "image"] == f"r.example/cn@{digest}"
    assert server(render("image.tag=1.2.3"))["image"] == "container-notifier:1.2.3"
    assert server(render())["image"] == "container-notifier:0.1.0"
    pod = one(render("priorityClassName=system-cluster-critical", "nodeSelector.pool=infra",
                     "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
                     "extraArgs={--log-level=debug}"), "Deployment")["spec"]["template"]
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["nodeSelector"] == {"pool": "infra"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["spec"]["containers"][0]["args"][-1] == "--log-level=debug"


@pytest.mark.parametrize("values, message", [
    (("certificates.mode=self",), "value must be one of 'bootstrap', 'cert-manager', 'secret'"),
    (("storage.backend=etcd",), "value must be one of 'kubernetes', 'sqlite'"),
    (("replicas=0",), "minimum"),
    (("image.digest=latest",), "image/digest"),
    (("replica=2",), "additional properties 'replica' not allowed"),
])
def test_schema_refuses(values: tuple[str, ...], message: str) -> None:
    assert message in refusal(*values)


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the values the docs table lists: maps of settings are descended into;
    free-form maps (labels, selectors, affinity) and lists are leaves."""
    free_form = {"resources", "affinity", "nodeSelector", "podAnnotations", "labels", "ca",
                 "namespaceSelector", "podSelector", "annotations"}
    found = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in free_form:
            found += _leaves(value, f"{name}.")
        else:
            found.append(name)
    return found


def test_docs_list_every_value() -> None:
    values = yaml.safe_load((render_manifests.CHART / "values.yaml").read_text())
    page = (render_manifests.REPO_ROOT / "docs" / "install.md").read_text()
    section = page.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    table = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
    assert set(_leaves(values)) == table


def test_install_test_runs_every_command_of_the_docs() -> None:
    page = "docs/install.md"
    under_tested_headings = [c for heading in INSTALL_TEST_HEADINGS
                             for c in console_commands(page, heading)]
    assert sorted(console_commands(page)) == sorted(under_tested_headings)


def test_chart_readme_commands_are_the_docs_ones() -> None:
    readme = render_manifests.CHART.relative_to(render_manifests.REPO_ROOT) / "README.md"
    assert set(console_commands(readme)) <= set(console_commands("docs/install.md"))
