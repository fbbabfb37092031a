"""API discovery: /apis (APIGroupList, or aggregated APIGroupDiscoveryList v2), /apis/<group>
(APIGroup) and /apis/<group>/<version> (APIResourceList, which the aggregator checks for
availability)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from apiserver import errors
from apiserver.api.media import is_plain_json, parse_accept
from apiserver.api.resources import API_PATH, GROUP, GROUP_VERSION, RESOURCES, VERSION

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_V2_PARAMS = {"g": "apidiscovery.k8s.io", "v": "v2", "as": "APIGroupDiscoveryList"}
_GROUP_VERSION_ENTRY = {"groupVersion": GROUP_VERSION, "version": VERSION}


def api_resource_list() -> dict[str, Any]:
    resources = []
    for resource in RESOURCES:
        entry: dict[str, Any] = {
            "name": resource.name,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": list(resource.verbs),
        }
        if resource.short_names:
            entry["shortNames"] = list(resource.short_names)
        if resource.categories:
            entry["categories"] = list(resource.categories)
        resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
            "resources": resources}


def api_group() -> dict[str, Any]:
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
            "versions": [_GROUP_VERSION_ENTRY], "preferredVersion": _GROUP_VERSION_ENTRY}


def api_group_list() -> dict[str, Any]:
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def aggregated_discovery() -> dict[str, Any]:
    """APIGroupDiscoveryList (apidiscovery.k8s.io/v2). A subresource whose parent is not
    served here is nested under a parent with no kind or verbs, as kube-apiserver does."""
    scope = {True: "Namespaced", False: "Cluster"}
    top: dict[str, dict[str, Any]] = {}
    for resource in RESOURCES:
        parent, _, subresource = resource.name.partition("/")
        # Like kube-apiserver: group and version stay empty for this group-version's kinds.
        kind = {"group": "", "version": "", "kind": resource.kind}
        if not subresource:
            entry = top.setdefault(parent, {})
            entry.update({
                "resource": parent,
                "responseKind": kind,
                "scope": scope[resource.namespaced],
                "singularResource": resource.singular,
                "verbs": list(resource.verbs),
            })
            if resource.short_names:
                entry["shortNames"] = list(resource.short_names)
            if resource.categories:
                entry["categories"] = list(resource.categories)
            continue
        entry = top.setdefault(parent, {
            "resource": parent,
            "responseKind": {"group": "", "version": "", "kind": ""},
            "scope": scope[resource.namespaced],
            "singularResource": "",
            "verbs": [],
        })
        entry.setdefault("subresources", []).append(
            {"subresource": subresource, "responseKind": kind, "verbs": list(resource.verbs)})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [{
            "metadata": {"name": GROUP},
            "versions": [{"version": VERSION, "resources": [top[n] for n in sorted(top)],
                          "freshness": "Current"}],
        }],
    }


def wants_aggregated_discovery(accept: str | None) -> bool | None:
    """True for aggregated discovery v2, False for APIGroupList, None if neither is acceptable.

    Media ranges are tried by quality, then in the order given."""
    if not accept:
        return False
    for media_range in parse_accept(accept):
        if media_range.quality <= 0:
            continue
        if media_range.type == "application/json" and media_range.params == _V2_PARAMS:
            return True
        if is_plain_json(media_range):
            return False
    return None


router = APIRouter()


@router.get("/apis")
async def get_apis(request: Request) -> JSONResponse:
    choice = wants_aggregated_discovery(request.headers.get("accept"))
    if choice is None:
        raise errors.not_acceptable([AGGREGATED_V2, "application/json"])
    if choice:
        return JSONResponse(aggregated_discovery(), media_type=AGGREGATED_V2,
                            headers={"Vary": "Accept"})
    return JSONResponse(api_group_list(), headers={"Vary": "Accept"})


@router.get(f"/apis/{GROUP}")
async def get_api_group() -> dict[str, Any]:
    return api_group()


@router.get(API_PATH)
async def get_api_resources() -> dict[str, Any]:
    return api_resource_list()
