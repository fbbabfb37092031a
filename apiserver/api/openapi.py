"""OpenAPI documents: /openapi/v2 (Swagger 2.0) and /openapi/v3 (discovery + per group-version).

Both are built from the schemas derived from the definitions in types.py and from the resource
operations below, and are self-contained: every ``$ref`` points into the same document, as
``kubectl explain`` needs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from fastapi import APIRouter, Request, Response

from apiserver import errors
from apiserver.api.media import is_plain_json, parse_accept
from apiserver.api.patch import PATCH_MEDIA_TYPES
from apiserver.api.resources import API_PATH, GROUP, GROUP_VERSION, VERSION
from apiserver.api.schema import Schema, ref
from apiserver.api.types import META, OURS, SCHEMAS

V3_GROUP_VERSION_PATH = f"apis/{GROUP_VERSION}"
_OPERATION_PREFIX = "NotifierXK8sIoV1alpha1"
_NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"


@dataclass(frozen=True)
class _Param:
    name: str
    location: str
    type: str
    description: str
    required: bool = False


_NAMESPACE = _Param("namespace", "path", "string", "object name and auth scope", True)
_NAME = _Param("name", "path", "string", "name of the object", True)
_DRY_RUN = _Param("dryRun", "query", "string", "All: validate and authorize, but run and store "
                  "nothing.")
_LIST = (
    _Param("labelSelector", "query", "string", "Restrict the list by labels."),
    _Param("fieldSelector", "query", "string", "Restrict the list by fields: spec.podName, "
           "spec.notifier, status.phase, metadata.name."),
    _Param("watch", "query", "boolean", "Watch for changes instead of listing."),
    _Param("allowWatchBookmarks", "query", "boolean", "Ask for BOOKMARK watch events."),
    _Param("resourceVersion", "query", "string", "List or watch from this version."),
    _Param("limit", "query", "integer", "Return at most this many items."),
    _Param("continue", "query", "string", "Continue a limited list."),
    _Param("timeoutSeconds", "query", "integer", "End a watch after this many seconds."),
)


_PATCH_PARAMS = (
    _DRY_RUN,
    _Param("fieldManager", "query", "string", "Name of the actor making the change; required "
           "for apply (application/apply-patch+yaml), recorded in metadata.managedFields."),
    _Param("force", "query", "boolean", "Apply only: take over fields another manager owns "
           "instead of answering 409 Conflict."),
    _Param("fieldValidation", "query", "string", "Ignore, Warn or Strict; patches here may only "
           "change metadata.labels and metadata.annotations, so unknown fields are always "
           "refused."),
)
_PATCH_BODY = f"{META}.Patch"
_PATCH_SCHEMA = {"type": "object", "description": "A patch of the object's metadata.labels and "
                 "metadata.annotations: a JSON merge patch, a JSON patch, a strategic merge patch "
                 "(applied as a merge patch) or an apply configuration, per the Content-Type."}
_COMPONENTS = {**SCHEMAS, _PATCH_BODY: _PATCH_SCHEMA}


@dataclass(frozen=True)
class _Operation:
    method: str
    path: str
    action: str
    """x-kubernetes-action: get, list, post, patch, delete, deletecollection."""
    operation_id: str
    kind: str
    response: str
    description: str
    params: tuple[_Param, ...] = ()
    body: str = ""
    success: str = "200"
    path_params: tuple[_Param, ...] = field(default=(_NAMESPACE,))
    consumes: tuple[str, ...] = ("application/json",)


def _operations() -> tuple[_Operation, ...]:
    status = f"{META}.Status"
    ops: list[_Operation] = [
        _Operation("post", f"{_NAMESPACED}/pods/{{name}}/notify", "post",
                   f"create{_OPERATION_PREFIX}NamespacedPodNotify", "PodNotifier",
                   f"{OURS}.PodNotifier", "Run a notifier that the pod declares.",
                   (_DRY_RUN, _Param("waitSeconds", "query", "integer", "Hold the response up to "
                                     "this many seconds (0-50) until the notifier finishes.")),
                   body=f"{OURS}.PodNotifier", success="201", path_params=(_NAMESPACE, _NAME)),
    ]
    for kind, plural, verbs in (("PodNotifier", "podnotifiers", ("delete", "deletecollection")),
                                ("Notification", "notifications", ("create", "delete"))):
        item, items = f"{OURS}.{kind}", f"{OURS}.{kind}List"
        ops += [
            _Operation("get", f"{_NAMESPACED}/{plural}", "list",
                       f"list{_OPERATION_PREFIX}Namespaced{kind}", kind, items,
                       f"List or watch {kind} objects in a namespace.", _LIST),
            _Operation("get", f"{API_PATH}/{plural}", "list",
                       f"list{_OPERATION_PREFIX}{kind}ForAllNamespaces", kind, items,
                       f"List or watch {kind} objects in all namespaces.", _LIST, path_params=()),
            _Operation("get", f"{_NAMESPACED}/{plural}/{{name}}", "get",
                       f"read{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                       f"Read a {kind}.", path_params=(_NAMESPACE, _NAME)),
            _Operation("delete", f"{_NAMESPACED}/{plural}/{{name}}", "delete",
                       f"delete{_OPERATION_PREFIX}Namespaced{kind}", kind, status,
                       f"Delete a {kind}.", (_DRY_RUN,), path_params=(_NAMESPACE, _NAME)),
            _Operation("patch", f"{_NAMESPACED}/{plural}/{{name}}", "patch",
                       f"patch{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                       f"Change the labels and annotations of a {kind} (the rest is "
                       "immutable)." + (" A server-side apply of a missing one creates it."
                                        if "create" in verbs else ""),
                       _PATCH_PARAMS, body=_PATCH_BODY, path_params=(_NAMESPACE, _NAME),
                       consumes=PATCH_MEDIA_TYPES),
        ]
        if "deletecollection" in verbs:
            ops.append(_Operation("delete", f"{_NAMESPACED}/{plural}", "deletecollection",
                                  f"deletecollection{_OPERATION_PREFIX}Namespaced{kind}", kind,
                                  status, f"Delete a collection of {kind} objects.",
                                  (_DRY_RUN, *_LIST[:2])))
        if "create" in verbs:
            ops.append(_Operation("post", f"{_NAMESPACED}/{plural}", "post",
                                  f"create{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                                  f"Create a {kind}.", (_DRY_RUN,), body=item, success="201"))
    return tuple(ops)


def _gvk(kind: str) -> dict[str, str]:
    return {"group": GROUP, "version": VERSION, "kind": kind}


def _v2_ref(schema: Any) -> Any:
    """The schema in Swagger 2.0 form: references point into #/definitions/, and a described
    reference is ``{$ref, description}`` rather than OpenAPI 3's allOf wrapper."""
    if isinstance(schema, list):
        return [_v2_ref(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return {**schema, "$ref": schema["$ref"].replace("#/components/schemas/",
                                                         "#/definitions/")}
    if set(schema) == {"allOf", "description"} and len(schema["allOf"]) == 1:
        return {**_v2_ref(schema["allOf"][0]), "description": schema["description"]}
    return {key: _v2_ref(value) for key, value in schema.items()}


@cache
def openapi_v2() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in _operations():
        entry = paths.setdefault(op.path, {})
        entry["parameters"] = [_v2_param(p) for p in op.path_params]
        parameters = [_v2_param(p) for p in op.params]
        if op.body:
            parameters.insert(0, {"name": "body", "in": "body", "required": True,
                                  "schema": _v2_ref(ref(op.body))})
        entry[op.method] = {
            "description": op.description,
            "operationId": op.operation_id,
            "consumes": list(op.consumes),
            "produces": ["application/json"],
            "schemes": ["https"],
            "tags": ["notifierXK8sIo_v1alpha1"],
            "parameters": parameters,
            "responses": {
                op.success: {"description": "OK" if op.success == "200" else "Created",
                             "schema": _v2_ref(ref(op.response))},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": _gvk(op.kind),
        }
    return {
        "swagger": "2.0",
        "info": {"title": "container-notifier", "version": VERSION},
        "paths": paths,
        "definitions": _v2_ref(_COMPONENTS),
    }


def _v2_param(param: _Param) -> dict[str, Any]:
    result: dict[str, Any] = {"name": param.name, "in": param.location, "type": param.type,
                              "description": param.description}
    if param.required:
        result["required"] = True
    return result


def _v3_param(param: _Param) -> dict[str, Any]:
    result: dict[str, Any] = {"name": param.name, "in": param.location,
                              "description": param.description,
                              "schema": {"type": param.type}}
    if param.required:
        result["required"] = True
    return result


def _v3_content(schema: Schema, media_types: tuple[str, ...] = ("application/json",)
                ) -> dict[str, Any]:
    return {media_type: {"schema": schema} for media_type in media_types}


@cache
def openapi_v3_group_version() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in _operations():
        entry = paths.setdefault(op.path, {})
        entry["parameters"] = [_v3_param(p) for p in op.path_params]
        operation: dict[str, Any] = {
            "description": op.description,
            "operationId": op.operation_id,
            "parameters": [_v3_param(p) for p in op.params],
            "responses": {
                op.success: {"description": "OK" if op.success == "200" else "Created",
                             "content": _v3_content(ref(op.response))},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": _gvk(op.kind),
        }
        if op.body:
            operation["requestBody"] = {"content": _v3_content(ref(op.body), op.consumes),
                                        "required": True}
        entry[op.method] = operation
    return {
        "openapi": "3.0.0",
        "info": {"title": "container-notifier", "version": VERSION},
        "paths": paths,
        "components": {"schemas": _COMPONENTS},
    }


@cache
def _encoded(document: str) -> tuple[bytes, str]:
    """The JSON bytes of a document and their hash (upper-case hex SHA-512, as kube-openapi)."""
    builder = {"v2": openapi_v2, "v3": openapi_v3_group_version}[document]
    body = json.dumps(builder(), separators=(",", ":")).encode()
    return body, hashlib.sha512(body).hexdigest().upper()


def openapi_v3_discovery() -> dict[str, Any]:
    _, digest = _encoded("v3")
    return {"paths": {V3_GROUP_VERSION_PATH: {
        "serverRelativeURL": f"/openapi/v3/{V3_GROUP_VERSION_PATH}?hash={digest}"}}}


router = APIRouter()


def accepts_json(accept: str | None) -> bool:
    """Whether an Accept header allows application/json (kubectl asks /openapi/v2 for
    protobuf only, which this server does not produce)."""
    return not accept or any(is_plain_json(r) for r in parse_accept(accept))


def _document_response(document: str, request: Request) -> Response:
    if not accepts_json(request.headers.get("accept")):
        raise errors.not_acceptable(["application/json"])
    body, digest = _encoded(document)
    immutable = request.query_params.get("hash") == digest
    headers = {
        "ETag": f'"{digest}"',
        "Cache-Control": "public, immutable" if immutable else "no-cache, private",
    }
    if request.headers.get("if-none-match") == headers["ETag"]:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


@router.get("/openapi/v2")
async def get_openapi_v2(request: Request) -> Response:
    return _document_response("v2", request)


@router.get("/openapi/v3")
async def get_openapi_v3() -> dict[str, Any]:
    return openapi_v3_discovery()


@router.get(f"/openapi/v3/{V3_GROUP_VERSION_PATH}")
async def get_openapi_v3_group_version(request: Request) -> Response:
    return _document_response("v3", request)
