"""Every resource the server stores has its storage CRD (apiservice/storage-crds.yaml) with the
names ``kube_store.storage_kind`` derives and the structural schema of the others, and the
server's RBAC (apiservice/rbac-server.yaml) covers it and its CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from apiserver.registry.kube_store import STORAGE_GROUP, storage_kind
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


def test_the_server_may_write_every_storage_resource() -> None:
    (role,) = [d for d in documents("rbac-server.yaml") if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "container-notifier:storage"]
    storage, crds = role["rules"]
    kinds = [storage_kind(resource) for resource in STORED_RESOURCES]
    assert storage["apiGroups"] == [STORAGE_GROUP]
    assert sorted(storage["resources"]) == sorted(kind.plural for kind in kinds)
    assert {"get", "list", "watch", "create", "update", "delete"} <= set(storage["verbs"])
    assert sorted(crds["resourceNames"]) == sorted(kind.crd_name for kind in kinds)
