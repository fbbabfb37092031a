from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from apiserver.api import resources
from apiserver.api.openapi import (
    _resource_operations,
    accepts_json,
    openapi_v2,
    openapi_v3_discovery,
    openapi_v3_group_version,
)
from apiserver.handlers import notifications, notifier_pods, notify, podnotifiers
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS

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
        kinds = ("PodNotifier", "PodNotifierList", "Notification", "NotificationList",
                 "NotifierPod", "NotifierPodList")
        for kind in kinds:
            assert definitions[f"{OURS}.{kind}"]["x-kubernetes-group-version-kind"] == [
                {"group": "notifier.x-k8s.io", "version": "v1alpha1", "kind": kind}]
        gvk_kinds = [d for d in definitions.values() if "x-kubernetes-group-version-kind" in d]
        assert len(gvk_kinds) == len(kinds)


def test_schemas_have_the_contract_fields():
    schemas = openapi_v3_group_version()["components"]["schemas"]
    spec = schemas[f"{OURS}.PodNotifierSpec"]
    assert spec["required"] == ["notifier"]
    assert {"podName", "podUID", "notifier", "containers", "timeoutSeconds",
            "ttlSecondsAfterFinished", "requestedBy"} <= set(spec["properties"])
    status = schemas[f"{OURS}.PodNotifierStatus"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Running", "Held", "Succeeded", "Failed"]
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
    router.include_router(podnotifiers.release_router(None, None, None))  # type: ignore[arg-type]
    router.include_router(notifications.router(  # type: ignore[arg-type]
        None, None, None, None, Watches(), max_parallelism=1, max_timeout_seconds=1,
        max_hold_seconds=3600))
    router.include_router(notifier_pods.router(None, None))  # type: ignore[arg-type]
    return router


def test_paths_match_the_served_routes():
    documented = {(method.upper(), path) for path, item in openapi_v2()["paths"].items()
                  for method in item if method != "parameters"}
    served = {(method, route.path.replace("{pod}", "{name}"))
              for route in api_routes(served_routes()) for method in route.methods}
    assert documented == served
    # the two release actions (issue 11) added one each, Notifications' deletecollection one,
    # the read-only pods (issue 23) get and two lists
    assert len(served) == 19


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


V3_PATHS = openapi_v3_group_version()["paths"]
WRITE_PARAMS = {"dryRun", "fieldManager", "fieldValidation"}


def operations(document_paths: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, item in document_paths.items()
            for method, op in item.items() if method != "parameters"]


def query_names(op: dict[str, Any]) -> set[str]:
    return {p["name"] for p in op["parameters"] if p["in"] == "query"}


@pytest.mark.parametrize("document", [openapi_v2, openapi_v3_group_version])
def test_every_write_takes_dry_run_and_creates_take_field_manager_and_validation(
        document: Any) -> None:
    """kubectl create sends fieldManager and fieldValidation; a server that does not advertise
    them makes kubectl fall back to listing CRDs."""
    writes = [(method, op) for method, _, op in operations(document()["paths"])
              if method in ("post", "patch", "delete")]
    assert {"post", "delete"} <= {method for method, _ in writes}
    for method, op in writes:
        assert "dryRun" in query_names(op), op["operationId"]
        if method in ("post", "patch"):
            assert WRITE_PARAMS <= query_names(op), op["operationId"]


def test_notify_documents_every_code_it_answers() -> None:
    item = V3_PATHS["/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/pods/{name}/notify"]
    responses = item["post"]["responses"]
    assert set(responses) == {"201", "400", "401", "403", "404", "409", "413", "415", "422",
                              "429", "500", "503"}
    assert responses["201"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{OURS}.PodNotifier"}
    status = {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status"}
    assert all(r["content"]["application/json"]["schema"] == status
               for code, r in responses.items() if code != "201")
    assert "SelfSubjectAccessReview" in responses["403"]["description"]
    wait = next(p for p in item["post"]["parameters"] if p["name"] == "waitSeconds")
    assert f"0 to {notify.MAX_WAIT_SECONDS}" in wait["description"]
    assert "Default 0" in wait["description"]


def test_create_notification_documents_already_exists_and_bodies() -> None:
    create = V3_PATHS["/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/notifications"][
        "post"]
    assert {"201", "400", "409", "413", "415", "422"} <= set(create["responses"])
    assert "AlreadyExists" in create["responses"]["409"]["description"]


def test_field_selectors_documented_are_the_selectable_ones() -> None:
    for resource in (PODNOTIFIERS, NOTIFICATIONS):
        listing = V3_PATHS[f"/apis/notifier.x-k8s.io/v1alpha1/{resource.plural}"]["get"]
        selector = next(p for p in listing["parameters"] if p["name"] == "fieldSelector")
        assert f"{', '.join(resource.selectable_fields)}." in selector["description"]


def test_a_patch_verb_gets_a_patch_operation_kubectl_can_verify() -> None:
    """kubectl's fieldValidation check reads only the PATCH operation of the kind: a resource
    whose discovery lists patch is documented with one, taking fieldValidation."""
    patched = replace(resources.NOTIFICATIONS, verbs=(*resources.NOTIFICATIONS.verbs, "patch"))
    (patch,) = [op for op in _resource_operations("Notification", patched, "metadata.name")
                if op.method == "patch"]
    assert patch.path.endswith("/notifications/{name}")
    assert WRITE_PARAMS <= {p.name for p in patch.params}
    assert "application/apply-patch+yaml" in patch.consumes
    assert patch.body == "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"


def test_explain_shows_conditions_and_reasons() -> None:
    schemas = openapi_v3_group_version()["components"]["schemas"]
    status = schemas[f"{OURS}.PodNotifierStatus"]["properties"]
    assert "kubectl wait --for=condition=Complete" in status["conditions"]["description"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    for reason in ("NonZeroExitCode", "Timeout", "Interrupted", "InternalError"):
        assert reason in status["reason"]["description"]
    condition = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.Condition"]["properties"]
    assert "Complete or Failed" in condition["type"]["description"]


def test_read_only_pods_are_documented_as_get_and_list_without_watch():
    """kubectl explain pods.notifier.x-k8s.io reads the NotifierPod schema; the list's query
    has no watch (405) and no resourceVersionMatch."""
    paths = openapi_v3_group_version()["paths"]
    listing = paths["/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/pods"]
    assert set(listing) == {"parameters", "get"}
    params = {p["name"] for p in listing["get"]["parameters"]}
    assert params == {"labelSelector", "fieldSelector", "resourceVersion", "limit", "continue"}
    assert listing["get"]["x-kubernetes-group-version-kind"]["kind"] == "NotifierPod"
    assert "410" not in listing["get"]["responses"]
    assert "core pods" in listing["get"]["responses"]["403"]["description"]
    schema = openapi_v3_group_version()["components"]["schemas"][f"{OURS}.NotifierPod"]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "containers",
                                         "access"}
