from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from apiserver.api.openapi import (
    accepts_json,
    openapi_v2,
    openapi_v3_discovery,
    openapi_v3_group_version,
)
from apiserver.handlers import notifications, notify, podnotifiers
from apiserver.handlers.watch_response import Watches

OURS = "io.x-k8s.notifier.v1alpha1"


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(document: dict[str, Any], reference: str) -> Any:
    assert reference.startswith("#/"), reference
    node: Any = document
    for part in reference[2:].split("/"):
        assert part in node, f"unresolvable $ref {reference}"
        node = node[part]
    return node


def test_v2_is_json_and_every_ref_resolves():
    document = json.loads(json.dumps(openapi_v2()))
    assert document["swagger"] == "2.0"
    found = refs(document)
    assert len(found) > 20
    for reference in found:
        assert reference.startswith("#/definitions/")
        assert isinstance(resolve(document, reference), dict)


def test_v3_is_json_and_every_ref_resolves():
    document = json.loads(json.dumps(openapi_v3_group_version()))
    assert document["openapi"].startswith("3.")
    found = refs(document)
    assert len(found) > 20
    for reference in found:
        assert reference.startswith("#/components/schemas/")
        assert isinstance(resolve(document, reference), dict)


def test_described_references_in_each_form():
    v3 = openapi_v3_group_version()["components"]["schemas"][f"{OURS}.PodNotifierSpec"]
    v2 = openapi_v2()["definitions"][f"{OURS}.PodNotifierSpec"]
    assert v3["properties"]["requestedBy"]["allOf"] == [
        {"$ref": f"#/components/schemas/{OURS}.RequestedBy"}]
    assert v2["properties"]["requestedBy"]["$ref"] == f"#/definitions/{OURS}.RequestedBy"
    assert v2["properties"]["requestedBy"]["description"] == v3["properties"]["requestedBy"][
        "description"] != ""
    assert "allOf" not in json.dumps(openapi_v2())


def test_kinds_carry_group_version_kind():
    for definitions in (openapi_v2()["definitions"],
                        openapi_v3_group_version()["components"]["schemas"]):
        for kind in ("PodNotifier", "PodNotifierList", "Notification", "NotificationList"):
            assert definitions[f"{OURS}.{kind}"]["x-kubernetes-group-version-kind"] == [
                {"group": "notifier.x-k8s.io", "version": "v1alpha1", "kind": kind}]
        gvk_kinds = [d for d in definitions.values() if "x-kubernetes-group-version-kind" in d]
        assert len(gvk_kinds) == 4


def test_schemas_have_the_contract_fields():
    schemas = openapi_v3_group_version()["components"]["schemas"]
    spec = schemas[f"{OURS}.PodNotifierSpec"]
    assert spec["required"] == ["notifier"]
    assert {"podName", "podUID", "notifier", "containers", "timeoutSeconds",
            "ttlSecondsAfterFinished", "requestedBy"} <= set(spec["properties"])
    status = schemas[f"{OURS}.PodNotifierStatus"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Running", "Succeeded", "Failed"]
    container = schemas[f"{OURS}.ContainerNotifierStatus"]["properties"]
    assert {"name", "containerID", "exitCode", "stdout", "stderr", "stdoutTruncated"} <= set(
        container)
    notification = schemas[f"{OURS}.NotificationSpec"]
    assert set(notification["required"]) == {"selector", "notifier"}
    assert notification["properties"]["policy"]["enum"] == ["PreExistingPods", "AllPods"]
    assert notification["properties"]["selector"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"}]


def test_paths_cover_the_operations():
    paths = openapi_v2()["paths"]
    notify = paths["/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/pods/{name}/notify"]
    assert notify["post"]["x-kubernetes-group-version-kind"]["kind"] == "PodNotifier"
    assert "201" in notify["post"]["responses"]
    assert set(paths["/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/podnotifiers"]) == {
        "parameters", "get", "delete"}
    operation_ids = [op["operationId"] for path in paths.values()
                     for key, op in path.items() if key != "parameters"]
    assert len(operation_ids) == len(set(operation_ids))


def api_routes(router: APIRouter) -> list[APIRoute]:
    """Every APIRoute of a router, through included routers (which carry no prefix here)."""
    found = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            found += api_routes(route.original_router)
    return found


def served_routes() -> APIRouter:
    """The resource routes as the server mounts them (no component is used to build them)."""
    router = APIRouter()
    router.include_router(notify.router(None, None, None, 600))  # type: ignore[arg-type]
    router.include_router(podnotifiers.router(None, Watches()))  # type: ignore[arg-type]
    router.include_router(notifications.router(  # type: ignore[arg-type]
        None, None, None, None, Watches(), max_parallelism=1, max_timeout_seconds=1))
    return router


def test_paths_match_the_served_routes():
    documented = {(method.upper(), path) for path, item in openapi_v2()["paths"].items()
                  for method in item if method != "parameters"}
    served = {(method, route.path.replace("{pod}", "{name}"))
              for route in api_routes(served_routes()) for method in route.methods}
    assert documented == served
    assert len(served) == 13


def test_v3_discovery_points_at_the_served_document_by_hash():
    discovery = openapi_v3_discovery()
    url = discovery["paths"]["apis/notifier.x-k8s.io/v1alpha1"]["serverRelativeURL"]
    path, _, query = url.partition("?hash=")
    assert path == "/openapi/v3/apis/notifier.x-k8s.io/v1alpha1"
    body = json.dumps(openapi_v3_group_version(), separators=(",", ":")).encode()
    assert query == hashlib.sha512(body).hexdigest().upper()


@pytest.mark.parametrize(("accept", "expected"), [
    (None, True),
    ("application/json", True),
    ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", False),
    ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0.5", True),
    ("*/*", True),
    ("application/json;q=0", False),
])
def test_accepts_json(accept, expected):
    assert accepts_json(accept) is expected
