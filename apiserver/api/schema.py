"""OpenAPI schemas derived from the typed definitions (model.py, types.py).

A model's schema is an object whose description is the model's docstring and whose properties
are its fields under their JSON names: each with its field's description, its type (string,
integer int32 unless ``json_schema_extra`` says int64, boolean, array, map, or a reference to
another model's component), ``enum`` from ``OneOf``, ``minimum``/``maximum`` from ``Bounds``,
and ``required`` from ``Required`` or a field without a default. Top-level kinds get their
group-version-kind and a ``<Kind>List``.

Schemas are written in OpenAPI 3 form (``#/components/schemas/...`` references, a described
reference wrapped in ``allOf`` as kube-openapi does, since a $ref's siblings are ignored in
OpenAPI 3.0); openapi.py derives the Swagger 2.0 form.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from apiserver.api.model import APIModel, Bounds, OneOf, Required, SchemaRef
from apiserver.api.resources import GROUP, VERSION

Schema = dict[str, Any]


def ref(name: str, description: str = "") -> Schema:
    """A reference to a component; with a description, wrapped in allOf."""
    target = {"$ref": f"#/components/schemas/{name}"}
    return {"description": description, "allOf": [target]} if description else target


def description_of(model: type[APIModel]) -> str:
    """The model's docstring as one paragraph: the schema's description."""
    return " ".join(inspect.cleandoc(model.__doc__ or "").split())


def json_name(name: str, info: FieldInfo) -> str:
    return info.alias or name


def field_info(model: type[APIModel], *path: str) -> FieldInfo:
    """The field at a path of JSON names (e.g. "spec", "podName"); KeyError if there is none."""
    info: FieldInfo | None = None
    current: Any = model
    for part in path:
        if info is not None:
            current = model_in(info.annotation)
        fields = {json_name(name, f): f for name, f in current.model_fields.items()}
        info = fields[part]
    if info is None:
        raise KeyError(path)
    return info


def field_schema(model: type[APIModel], *path: str) -> Schema:
    """The schema of the field at a path of JSON names."""
    return _field_schema(field_info(model, *path))


def component_schemas(models: Iterable[type[APIModel]], *, extra: Mapping[str, Schema],
                      list_meta: str) -> dict[str, Schema]:
    """The components of ``models`` and of every model they reference, plus ``extra``
    (components that are not objects, e.g. metav1.Time); a ``<Kind>List`` per kind."""
    schemas: dict[str, Schema] = {}
    pending = list(models)
    while pending:
        model = pending.pop(0)
        if model.schema_name in schemas:
            continue
        schemas[model.schema_name] = object_schema(model)
        if model.KIND:
            schemas[f"{model.schema_name}List"] = _list_schema(model, list_meta)
        pending += [m for info in model.model_fields.values() for m in _models(info.annotation)]
    return {**dict(sorted(schemas.items())), **extra}


def object_schema(model: type[APIModel]) -> Schema:
    properties = {json_name(name, info): _field_schema(info)
                  for name, info in model.model_fields.items()}
    required = [json_name(name, info) for name, info in model.model_fields.items()
                if info.is_required() or _marker(info.metadata, Required)]
    schema: Schema = {"type": "object", "description": description_of(model)}
    if properties:
        schema["properties"] = properties
    if required:
        schema["required"] = required
    schema.update(model.schema_extra)
    if model.KIND:
        schema.update(_gvk(model.KIND))
    return schema


def _list_schema(model: type[APIModel], list_meta: str) -> Schema:
    kind = f"{model.KIND}List"
    item = model.model_fields
    return {
        "type": "object",
        "description": f"{kind} is a list of {model.KIND} objects.",
        "properties": {
            "apiVersion": _field_schema(item["api_version"]),
            "kind": _field_schema(item["kind"]),
            "metadata": ref(list_meta, "Standard list metadata."),
            "items": {"type": "array", "items": ref(model.schema_name),
                      "description": "The objects."},
        },
        "required": ["items"],
        **_gvk(kind),
    }


def _gvk(kind: str) -> Schema:
    return {"x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION,
                                                 "kind": kind}]}


def _field_schema(info: FieldInfo) -> Schema:
    schema = _type_schema(info.annotation, list(info.metadata))
    if info.description:
        if "$ref" in schema:
            schema = ref(schema["$ref"].rsplit("/", 1)[1], info.description)
        else:
            schema["description"] = info.description
    if info.default is not None and isinstance(info.default, str | int):
        schema["default"] = info.default
    if isinstance(info.json_schema_extra, dict):
        schema.update(info.json_schema_extra)
    return schema


def _type_schema(annotation: Any, metadata: list[Any]) -> Schema:
    annotation, more = _unwrap(annotation)
    metadata = metadata + more
    reference = _marker(metadata, SchemaRef)
    if reference is not None:
        return ref(reference.name)
    if isinstance(annotation, type) and issubclass(annotation, APIModel):
        return ref(annotation.schema_name)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], [])}
    if origin is dict:
        if args[1] is Any:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _type_schema(args[1], [])}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        schema: Schema = {"type": "integer", "format": "int32"}
        bounds = _marker(metadata, Bounds)
        if bounds is not None:
            schema["minimum"] = bounds.low
            if isinstance(bounds.high, int):
                schema["maximum"] = bounds.high
        return schema
    if annotation is str:
        choices = _marker(metadata, OneOf)
        return {"type": "string", **({"enum": list(choices.choices)} if choices else {})}
    raise TypeError(f"no OpenAPI schema for {annotation!r}")


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The type under Optional and Annotated, and the Annotated metadata met on the way."""
    metadata: list[Any] = []
    while True:
        if get_origin(annotation) is Annotated:
            metadata += list(annotation.__metadata__)
            annotation = annotation.__origin__
        elif get_origin(annotation) in (Union, types.UnionType):
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(options) != 1:
                raise TypeError(f"no OpenAPI schema for the union {annotation!r}")
            annotation = options[0]
        else:
            return annotation, metadata


def _models(annotation: Any) -> list[type[APIModel]]:
    """The models a field's type refers to (through Optional, lists and maps)."""
    annotation, _ = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, APIModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)]


def model_in(annotation: Any) -> type[APIModel]:
    """The one model a field's type refers to (e.g. ``Spec`` of ``Spec | None``)."""
    found = _models(annotation)
    if len(found) != 1:
        raise KeyError(f"{annotation!r} is not one model")
    return found[0]


def _marker(metadata: Iterable[Any], kind: type[Any]) -> Any:
    return next((item for item in metadata if isinstance(item, kind)), None)
