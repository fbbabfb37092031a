"""Every resource the server stores has its storage CRD (apiservice/storage-crds.yaml) with the
names ``kube_store.storage_kind`` derives and the structural schema of the others, and the
server's RBAC (apiservice/rbac-server.yaml) covers it and its CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from apiserver.registry.kube_objects import DEFAULT_INSTANCE, STORAGE_GROUP, storage_kind
from apiserver.registry.layout_migration import layout_marker
from apiserver.server import STORED_RESOURCES

APISERVICE = Path(__file__).resolve().parents[2] / "apiservice"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((APISERVICE / name).read_text()) if d]


def test_every_stored_resource_has_its_crd() -> None:
    crds = {d["metadata"]["name"]: d for d in documents("storage-crds.yaml")}
    kinds = [storage_kind(resource) for resource in STORED_RESOURCES]
    assert sorted(crds) == sorted(kind.crd_name for kind in kinds)
    for kind in kinds:
        spec = crds[kind.crd_name]["spec"]
        assert (spec["group"], spec["scope"]) == (STORAGE_GROUP, "Namespaced")
        assert (spec["names"]["plural"], spec["names"]["kind"]) == (kind.plural, kind.kind)
        schema = spec["versions"][0]["schema"]["openAPIV3Schema"]
        assert schema["required"] == ["object"]
        assert schema["properties"]["object"]["x-kubernetes-preserve-unknown-fields"] is True
        assert schema["properties"]["sequence"]["type"] == "integer"


SERVER_NAMESPACE = "container-notifier"
WRITES = {"get", "list", "watch", "create", "update", "delete"}


def role(kind: str, name: str = "container-notifier:storage") -> dict[str, Any]:
    (found,) = [d for d in documents("rbac-server.yaml")
                if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_the_server_may_write_every_storage_resource_in_its_namespace_only() -> None:
    """Layout 2 (docs/storage.md): the storage verbs are a Role of the server's namespace, the
    storage namespace of the Deployment; cluster-wide the server may only read and delete
    (the CRD check and the move of layout-1 objects), never create or update."""
    kinds = [storage_kind(resource) for resource in STORED_RESOURCES]
    plurals = sorted(kind.plural for kind in kinds)
    namespaced = role("Role")
    assert namespaced["metadata"]["namespace"] == SERVER_NAMESPACE
    storage, create_marker, read_marker = namespaced["rules"]
    assert storage["apiGroups"] == [STORAGE_GROUP]
    assert sorted(storage["resources"]) == plurals
    assert WRITES <= set(storage["verbs"])
    assert (create_marker["resources"], create_marker["verbs"]) == (["configmaps"], ["create"])
    assert (read_marker["resources"], read_marker["resourceNames"], read_marker["verbs"]) == (
        ["configmaps"], [layout_marker(DEFAULT_INSTANCE)], ["get"])
    binding = role("RoleBinding")
    assert binding["metadata"]["namespace"] == SERVER_NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "container-notifier:storage"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "container-notifier",
                                    "namespace": SERVER_NAMESPACE}]

    cluster_storage, crds = role("ClusterRole")["rules"]
    assert cluster_storage["apiGroups"] == [STORAGE_GROUP]
    assert sorted(cluster_storage["resources"]) == plurals
    assert sorted(cluster_storage["verbs"]) == ["delete", "get", "list"]
    assert crds["apiGroups"] == ["apiextensions.k8s.io"]
    assert sorted(crds["resourceNames"]) == sorted(kind.crd_name for kind in kinds)

    (deployment,) = [d for d in documents("deployment.yaml") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--storage-namespace=$(POD_NAMESPACE)" in container["args"]
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.namespace"}}} in container["env"]
    assert deployment["metadata"]["namespace"] == SERVER_NAMESPACE


def test_no_other_role_grants_anything_on_the_storage_group() -> None:
    """Only the server's two storage roles name the storage group (docs/security.md, "Who can
    reach the storage"): no user role, aggregated or not, reaches it."""
    granting = sorted(
        (d["kind"], d["metadata"]["name"])
        for name in ("rbac-server.yaml", "rbac-users.yaml") for d in documents(name)
        if d["kind"] in ("Role", "ClusterRole")
        and any(STORAGE_GROUP in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])
                for rule in d.get("rules") or []))
    assert granting == [("ClusterRole", "container-notifier:storage"),
                        ("Role", "container-notifier:storage")]
