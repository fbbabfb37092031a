"""Content negotiation of a collection's answers, and rendering in the representation chosen.

The Accept header picks plain JSON, a ``meta.k8s.io/v1`` Table (``kubectl get``) or
``PartialObjectMetadata(List)`` (the metadata client of the garbage collector and the namespace
controller). An Accept that allows none of these (e.g. protobuf only) gets 406.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastapi import Request

from apiserver import errors
from apiserver.api.media import JSON_MEDIA_TYPE, parse_accept
from apiserver.api.resources import VERSION
from apiserver.api.tables import (
    META_GROUP_VERSION,
    IncludeObject,
    TableConvertor,
    partial_object_metadata,
)
from apiserver.registry.resources import ResourceType

SERVED_MEDIA_TYPES = (
    JSON_MEDIA_TYPE,
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
)


class Output(Enum):
    JSON = "json"
    TABLE = "Table"
    METADATA = "PartialObjectMetadata"


OBJECT = "PartialObjectMetadata"
LIST = "PartialObjectMetadataList"
"""The ``as=`` metadata kind an endpoint converts to: OBJECT for get and watch, LIST for list."""


def negotiate(accept: str | None, metadata_kind: str) -> Output:
    """The representation the Accept header asks for, best quality first; 406 if none.

    Ranges for protobuf, YAML, other Table versions or ``as=`` kinds that do not fit the
    endpoint (e.g. PartialObjectMetadataList on a get) are skipped, as kube-apiserver does.
    """
    if not accept or not accept.strip():
        return Output.JSON
    for media_range in parse_accept(accept):
        if media_range.quality <= 0 or media_range.type not in (
                JSON_MEDIA_TYPE, "application/*", "*/*"):
            continue
        params = media_range.params
        kind = params.get("as")
        if kind is None:
            return Output.JSON
        if params.get("g") != "meta.k8s.io" or params.get("v") != "v1":
            continue
        if kind == "Table":
            return Output.TABLE
        if kind == metadata_kind:
            return Output.METADATA
    raise errors.NotAcceptable(
        "406: Not Acceptable\n\nAvailable representations: " + ", ".join(SERVED_MEDIA_TYPES))


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion`` of ``obj``, or ``""``."""
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _list_meta(version: str, continue_token: str = "") -> dict[str, str]:
    meta = {}
    if version:
        meta["resourceVersion"] = version
    if continue_token:
        meta["continue"] = continue_token
    return meta


@dataclass(frozen=True)
class Renderer:
    """Objects and lists of one resource, in one negotiated representation."""

    resource: ResourceType
    table: TableConvertor
    output: Output
    include: IncludeObject = IncludeObject.METADATA

    @classmethod
    def for_request(cls, resource: ResourceType, table: TableConvertor, request: Request,
                    metadata_kind: str) -> Renderer:
        """The renderer the request's Accept (and ``includeObject``) ask for; 406 or 400."""
        output = negotiate(request.headers.get("accept"), metadata_kind)
        include = IncludeObject.METADATA
        if output is Output.TABLE:
            include = IncludeObject.parse(request.query_params.get("includeObject"))
        return cls(resource, table, output, include)

    @property
    def api_version(self) -> str:
        return f"{self.resource.group}/{VERSION}"

    def typed(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``obj`` (top level only) with the resource's apiVersion and kind."""
        rest = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind")}
        return {"apiVersion": self.api_version, "kind": self.resource.kind, **rest}

    def object(self, obj: Mapping[str, Any], *, headers: bool = True) -> dict[str, Any]:
        """One object; as a Table, ``headers`` says whether it has columnDefinitions."""
        if self.output is Output.TABLE:
            return self.table.table([self.typed(obj)], resource_version=resource_version(obj),
                                    include=self.include, headers=headers)
        if self.output is Output.METADATA:
            return partial_object_metadata(obj)
        return self.typed(obj)

    def list(self, items: list[dict[str, Any]], version: str,
             continue_token: str = "") -> dict[str, Any]:
        """A list of ``items`` at resourceVersion ``version``."""
        if self.output is Output.TABLE:
            return self.table.table([self.typed(obj) for obj in items],
                                    resource_version=version, continue_token=continue_token,
                                    include=self.include)
        meta = _list_meta(version, continue_token)
        if self.output is Output.METADATA:
            return {"kind": "PartialObjectMetadataList", "apiVersion": META_GROUP_VERSION,
                    "metadata": meta, "items": [partial_object_metadata(o) for o in items]}
        return {"apiVersion": self.api_version, "kind": f"{self.resource.kind}List",
                "metadata": meta, "items": [self.typed(obj) for obj in items]}

    def bookmark(self, version: str, annotations: dict[str, str]) -> dict[str, Any]:
        """The object of a BOOKMARK event: only a resourceVersion (and annotations)."""
        meta: dict[str, Any] = {"resourceVersion": version}
        if annotations:
            meta["annotations"] = annotations
        if self.output is Output.TABLE:
            return {"kind": "Table", "apiVersion": META_GROUP_VERSION, "metadata": meta,
                    "columnDefinitions": None, "rows": []}
        if self.output is Output.METADATA:
            return {"kind": "PartialObjectMetadata", "apiVersion": META_GROUP_VERSION,
                    "metadata": meta}
        return {"apiVersion": self.api_version, "kind": self.resource.kind, "metadata": meta}
