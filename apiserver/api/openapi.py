"""OpenAPI documents: /openapi/v2 (Swagger 2.0) and /openapi/v3 (discovery + per group-version).

Both are built from the schemas derived from the definitions in types.py and from the resource
operations below, and are self-contained: every ``$ref`` points into the same document, as
``kubectl explain`` needs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from fastapi import APIRouter, Request, Response

from apiserver import errors
from apiserver.api.media import BODY_MEDIA_TYPES, JSON_MEDIA_TYPE, is_plain_json, parse_accept
from apiserver.api.patch import PATCH_MEDIA_TYPES
from apiserver.api.resources import (
    API_PATH,
    GROUP,
    GROUP_VERSION,
    NOTIFICATION_RELEASE,
    NOTIFICATIONS,
    NOTIFIER_PODS,
    POD_NOTIFY,
    PODNOTIFIER_RELEASE,
    PODNOTIFIERS,
    VERSION,
    Resource,
)
from apiserver.api.schema import Schema, ref
from apiserver.api.types import META, OURS, SCHEMAS

V3_GROUP_VERSION_PATH = f"apis/{GROUP_VERSION}"
_OPERATION_PREFIX = "NotifierXK8sIoV1alpha1"
JSON = JSON_MEDIA_TYPE
_NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"


@dataclass(frozen=True)
class _Param:
    name: str
    location: str
    type: str
    description: str
    required: bool = False


MAX_WAIT_SECONDS = 50
"""pods/notify's bound on waitSeconds (handlers/notify.py enforces it; a test keeps them equal)."""
_METADATA_FIELDS = ("metadata.name", "metadata.namespace")
"""Selectable on every kind; the kinds' own are those of registry/resources.py (a test checks)."""

_NAMESPACE = _Param("namespace", "path", "string", "object name and auth scope", True)
_NAME = _Param("name", "path", "string", "name of the object", True)
_DRY_RUN = _Param("dryRun", "query", "string", (
    "When present, nothing is stored or run: the request is authorized, decoded and "
    "validated, and answered as it would be (a create answers the object it would have "
    "created, named). The only valid value is All; any other is refused."))
_FIELD_MANAGER = _Param("fieldManager", "query", "string", (
    "Name of the actor making the change, as kubectl sends it (kubectl-create, "
    "kubectl-client-side-apply)."))
_FIELD_VALIDATION = _Param("fieldValidation", "query", "string", (
    "How unknown or duplicate fields in the body are treated: Strict, Warn or Ignore in "
    "Kubernetes. This server always decodes strictly, whatever the value: an unknown field "
    'is a 400 naming it (strict decoding error: unknown field "spec.colour").'))
_WRITE = (_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION)
"""The query of every request that creates or changes an object."""
_WAIT_SECONDS = _Param("waitSeconds", "query", "integer", (
    "Hold the answer until the run finishes (or, for a held notifier, is Held) or this many "
    f"seconds pass, from 0 to {MAX_WAIT_SECONDS} (kube-apiserver ends requests after 60 s). "
    "Default 0: answer at once with the Pending record. Either way the answer is 201 with the "
    "record as stored then."))
_FORCE = _Param("force", "query", "boolean", (
    "Apply patches only: take fields that other managers own instead of answering 409."))
_DELETE = (
    _DRY_RUN,
    _Param("gracePeriodSeconds", "query", "integer", (
        "Accepted and ignored: objects here are deleted at once (no grace period).")),
    _Param("propagationPolicy", "query", "string", (
        "Accepted and ignored: objects here have no dependents.")),
)
_SELECTORS = (
    _Param("labelSelector", "query", "string", "Restrict the list by labels. Default: all."),
    _Param("fieldSelector", "query", "string", "Restrict the list by fields: {fields}. "
           "Default: all."),
)
_LIST = (
    *_SELECTORS,
    _Param("watch", "query", "boolean", "Watch for changes instead of listing."),
    _Param("allowWatchBookmarks", "query", "boolean", "Ask for BOOKMARK watch events."),
    _Param("resourceVersion", "query", "string", (
        "List or watch from this version; a version older than the retained history is a "
        "410 Expired.")),
    _Param("limit", "query", "integer", (
        "Return at most this many items, with a continue token for the rest. Default: all.")),
    _Param("continue", "query", "string", "Continue a limited list."),
    _Param("timeoutSeconds", "query", "integer", "End a watch after this many seconds."),
)

_CACHE_READ = _Param("resourceVersion", "query", "string", (
    "Unset or 0: both read the server's pod cache (milliseconds behind kube-apiserver); any "
    "other value is a 400."))
_NOTIFIER_POD_LIST = (
    *_SELECTORS,
    _CACHE_READ,
    _Param("limit", "query", "integer", (
        "Return at most this many items, with a continue token for the rest. Default: all.")),
    _Param("continue", "query", "string", (
        "Continue a limited list after the previous page's last pod (pages are read as the "
        "cache is then).")),
)
"""A NotifierPod list's query: no watch (405), no resourceVersionMatch."""
_NOTIFIER_POD_FORBIDDEN = (
    "Forbidden: the caller may not get (list) pods.notifier.x-k8s.io, or may not get (list) "
    "the core pods as well")

_RESPONSES = {
    200: "OK",
    201: "Created",
    400: ("BadRequest: a malformed query parameter or body, or an unknown field in the body; "
          "the message names it"),
    401: "Unauthorized: no valid credentials",
    403: "Forbidden: RBAC denies the request",
    404: "NotFound",
    406: "NotAcceptable: the Accept header allows nothing served (JSON, Table)",
    409: "Conflict",
    410: "Expired: the resourceVersion or continue token is older than the retained history",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType: the Content-Type is not one the operation reads",
    422: "Invalid: a field's value is wrong; details.causes name each field",
    429: "TooManyRequests: retry after the Retry-After header's seconds",
    500: "InternalError: the server failed; the message holds a request id for its log",
    503: ("ServiceUnavailable: kube-apiserver (authentication, authorization, pods) or the "
          "storage cannot be reached; retry later"),
}
_ALWAYS = (401, 403, 500, 503)
"""What any request may be answered: delegated authentication and authorization fail closed."""
_READ = (406,)
_BODY = (400, 413, 415, 422)

_NOTIFY_RESPONSES = {
    400: ("BadRequest: waitSeconds outside 0..50, dryRun other than All, a body that is not a "
          "PodNotifier, an unknown field, or spec.podName or metadata.namespace unlike the "
          "URL's"),
    403: ("Forbidden: the caller may not create pods/notify on the pod, or neither trust rule "
          "vouches for the pod's notifiers (the message names the rule that failed). Check with "
          "a SelfSubjectAccessReview of resource pods, subresource notify, group "
          "notifier.x-k8s.io, or kubectl auth can-i create pods.notifier.x-k8s.io "
          "--subresource=notify"),
    404: ("NotFound: the pod does not exist, or no selected container declares the notifier "
          "(the message names the declared ones)"),
    409: "Conflict: the same notifier is unfinished on the pod (the message names the record)",
    413: "RequestEntityTooLarge: a body over 1 MiB",
    422: ("Invalid: a field out of range, or the pod's notifier annotation invalid, or "
          "spec.containers naming a container the pod lacks or that does not declare the "
          "notifier; details.causes name each field"),
    429: ("TooManyRequests: the server already runs its maximum of notifiers, or the pod has "
          "its maximum of unfinished records; retry after Retry-After seconds"),
}


_RELEASE_RESPONSES = {
    403: ("Forbidden: the caller may not create podnotifiers/release, or may not create "
          "pods/notify on the record's pod (the message names what is missing)"),
    404: "NotFound: no such PodNotifier",
    409: "Conflict: the record is not a held notifier's (status.maxHoldSeconds is unset)",
}


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
    success: int = 200
    path_params: tuple[_Param, ...] = field(default=(_NAMESPACE,))
    failures: tuple[int, ...] = ()
    """The failure codes it answers besides ``_ALWAYS``."""
    consumes: tuple[str, ...] = (JSON,)
    explained: Mapping[int, str] = field(default_factory=dict)
    """Descriptions of codes that say more than ``_RESPONSES``."""

    def responses(self) -> dict[int, str]:
        codes = sorted({self.success, *self.failures, *_ALWAYS})
        return {code: self.explained.get(code, _RESPONSES[code]) for code in codes}




def _resource_operations(kind: str, resource: Resource, fields: str,
                         list_params: tuple[_Param, ...] = _LIST,
                         explained: Mapping[int, str] | None = None) -> list[_Operation]:
    """The operations of a collection, from the verbs its discovery entry lists; a list's
    query is `list_params`, `explained` describes codes beyond ``_RESPONSES``."""
    plural, verbs = resource.name, resource.verbs
    item, items = f"{OURS}.{kind}", f"{OURS}.{kind}List"
    named = (_NAMESPACE, _NAME)
    listing = tuple(replace(p, description=p.description.format(fields=fields))
                    for p in list_params)
    watched = "watch" in verbs
    reading = "List or watch" if watched else "List"
    list_failures = (400, 406, 410) if watched else (400, 406)
    more = dict(explained or {})
    ops: list[_Operation] = []
    if "list" in verbs:
        ops += [
            _Operation("get", f"{_NAMESPACED}/{plural}", "list",
                       f"list{_OPERATION_PREFIX}Namespaced{kind}", kind, items,
                       f"{reading} {kind} objects in a namespace.", listing,
                       failures=list_failures, explained=more),
            _Operation("get", f"{API_PATH}/{plural}", "list",
                       f"list{_OPERATION_PREFIX}{kind}ForAllNamespaces", kind, items,
                       f"{reading} {kind} objects in all namespaces.", listing,
                       path_params=(), failures=list_failures, explained=more),
        ]
    if "get" in verbs:
        ops.append(_Operation("get", f"{_NAMESPACED}/{plural}/{{name}}", "get",
                              f"read{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                              f"Read a {kind}.",
                              () if watched else (_CACHE_READ,), path_params=named,
                              failures=(404, 406) if watched else (400, 404, 406),
                              explained=more))
    if "create" in verbs:
        ops.append(_Operation("post", f"{_NAMESPACED}/{plural}", "post",
                              f"create{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                              f"Create a {kind}.", _WRITE, body=item, success=201,
                              failures=(*_BODY, 409), consumes=BODY_MEDIA_TYPES, explained={
                                  409: f"AlreadyExists: a {kind} of that name exists"}))
    if "patch" in verbs:
        ops.append(_Operation("patch", f"{_NAMESPACED}/{plural}/{{name}}", "patch",
                              f"patch{_OPERATION_PREFIX}Namespaced{kind}", kind, item,
                              f"Partially update a {kind}: metadata labels and annotations "
                              "(spec is immutable: a change is a 422 naming the field).",
                              (*_WRITE, _FORCE), body=f"{META}.Patch", path_params=named,
                              failures=(*_BODY, 404, 409), consumes=PATCH_MEDIA_TYPES))
    if "delete" in verbs:
        ops.append(_Operation("delete", f"{_NAMESPACED}/{plural}/{{name}}", "delete",
                              f"delete{_OPERATION_PREFIX}Namespaced{kind}", kind, _STATUS,
                              f"Delete a {kind}; the answer is a Status of Success.", _DELETE,
                              path_params=named, failures=(*_BODY, 404, 406, 409), explained={
                                  409: "Conflict: the preconditions (uid, resourceVersion) "
                                       "do not match",
                                  413: "RequestEntityTooLarge: DeleteOptions over 64 KiB"}))
    if "deletecollection" in verbs:
        ops.append(_Operation("delete", f"{_NAMESPACED}/{plural}", "deletecollection",
                              f"deletecollection{_OPERATION_PREFIX}Namespaced{kind}", kind,
                              items, f"Delete a collection of {kind} objects; the answer is "
                              "the list of deleted objects.",
                              (*_DELETE, *listing[:2]), failures=(*_BODY, 406), explained={
                                  413: "RequestEntityTooLarge: DeleteOptions over 64 KiB"}))
    return ops


@cache
def _operations() -> tuple[_Operation, ...]:
    notify = _Operation(
        "post", f"{_NAMESPACED}/pods/{{name}}/notify", "post",
        f"create{_OPERATION_PREFIX}NamespacedPodNotify", POD_NOTIFY.kind,
        f"{OURS}.PodNotifier",
        "Run a notifier that the pod declares, in every container that declares it (or those "
        "of spec.containers); the answer is the PodNotifier record of the run.",
        (*_WRITE, _WAIT_SECONDS), body=f"{OURS}.PodNotifier", success=201,
        path_params=(_NAMESPACE, _NAME), failures=(*_BODY, 404, 409, 429),
        consumes=BODY_MEDIA_TYPES, explained=_NOTIFY_RESPONSES)
    record_release = _Operation(
        "post", f"{_NAMESPACED}/podnotifiers/{{name}}/release", "post",
        f"create{_OPERATION_PREFIX}NamespacedPodNotifierRelease", PODNOTIFIER_RELEASE.kind,
        f"{OURS}.PodNotifier",
        "Release a held notifier: the request is stored on the record, and the replica that "
        "holds the command stops it (stdin closed, then SIGTERM); the record then ends "
        "Succeeded with reason Released. The body may be empty or any object. A finished "
        "record is answered unchanged; a record not yet Held is released once it is.",
        _WRITE, path_params=(_NAMESPACE, _NAME), failures=(400, 404, 409, 413, 415),
        consumes=BODY_MEDIA_TYPES, explained=_RELEASE_RESPONSES)
    notification_release = _Operation(
        "post", f"{_NAMESPACED}/notifications/{{name}}/release", "post",
        f"create{_OPERATION_PREFIX}NamespacedNotificationRelease", NOTIFICATION_RELEASE.kind,
        f"{OURS}.Notification",
        "End the quiesce window of a Notification with spec.release: every quiesced pod is "
        "released (once). Idempotent; any body is ignored. The answer is the Notification "
        "with status.window.releaseRequestedTime (a finished one as it is).", _WRITE,
        path_params=(_NAMESPACE, _NAME), failures=(404, 409), explained={
            409: "Conflict: the Notification has no spec.release, or no recorded run yet"})
    return (
        notify,
        record_release,
        notification_release,
        *_resource_operations(PODNOTIFIERS.kind, PODNOTIFIERS, ", ".join(
            (*_METADATA_FIELDS, "spec.podName", "spec.notifier", "status.phase"))),
        *_resource_operations(NOTIFICATIONS.kind, NOTIFICATIONS, ", ".join(
            (*_METADATA_FIELDS, "spec.notifier", "status.phase"))),
        *_resource_operations(NOTIFIER_PODS.kind, NOTIFIER_PODS, ", ".join(_METADATA_FIELDS),
                              _NOTIFIER_POD_LIST, {403: _NOTIFIER_POD_FORBIDDEN}),
    )


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


def _answer(op: _Operation, code: int) -> str:
    """The component a response of ``op`` with ``code`` holds: the object, or a Status."""
    return op.response if code == op.success else _STATUS


_STATUS = f"{META}.Status"


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
            "produces": [JSON],
            "schemes": ["https"],
            "tags": ["notifierXK8sIo_v1alpha1"],
            "parameters": parameters,
            "responses": {str(code): {"description": text,
                                      "schema": _v2_ref(ref(_answer(op, code)))}
                          for code, text in op.responses().items()},
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": _gvk(op.kind),
        }
    return {
        "swagger": "2.0",
        "info": {"title": "container-notifier", "version": VERSION},
        "paths": paths,
        "definitions": _v2_ref(SCHEMAS),
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


def _v3_content(schema: Schema, media_types: tuple[str, ...] = (JSON,)) -> dict[str, Any]:
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
            "responses": {str(code): {"description": text,
                                      "content": _v3_content(ref(_answer(op, code)))}
                          for code, text in op.responses().items()},
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
        "components": {"schemas": SCHEMAS},
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
        raise errors.not_acceptable([JSON_MEDIA_TYPE])
    body, digest = _encoded(document)
    immutable = request.query_params.get("hash") == digest
    headers = {
        "ETag": f'"{digest}"',
        "Cache-Control": "public, immutable" if immutable else "no-cache, private",
    }
    if request.headers.get("if-none-match") == headers["ETag"]:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=JSON_MEDIA_TYPE, headers=headers)


@router.get("/openapi/v2")
async def get_openapi_v2(request: Request) -> Response:
    return _document_response("v2", request)


@router.get("/openapi/v3")
async def get_openapi_v3() -> dict[str, Any]:
    return openapi_v3_discovery()


@router.get(f"/openapi/v3/{V3_GROUP_VERSION_PATH}")
async def get_openapi_v3_group_version(request: Request) -> Response:
    return _document_response("v3", request)
