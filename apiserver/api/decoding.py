"""Strict decoding of create request bodies into the typed definitions of types.py.

Errors follow kube-apiserver: a body that is not UTF-8 JSON within json_input's bounds, not a
JSON object, or whose apiVersion/kind are wrong, or whose metadata or spec is not an object, or
whose namespace disagrees with the URL, is 400 BadRequest. Unknown and duplicate fields follow
the ``fieldValidation`` query parameter as kube-apiserver applies it to a custom resource, with
``Strict`` the default here: under ``Strict`` they are 400 with the strict-decoding wording
kubectl users know (``strict decoding error: duplicate field "spec.x", unknown field
"spec.y"``); under ``Warn`` each is a warning (a ``Warning`` header) and under ``Ignore``
nothing, an unknown field being dropped and the last of duplicates winning. Wrong values are
field errors, which the caller answers as 422 Invalid once it has made its own 400 checks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from apiserver import errors
from apiserver.api import json_input, yaml_input
from apiserver.api.field_errors import FieldError, show
from apiserver.api.media import JSON_MEDIA_TYPE, YAML_MEDIA_TYPE
from apiserver.api.model import FIELD_ERRORS, UNKNOWN_FIELD, APIModel, Limits
from apiserver.api.resources import GROUP, GROUP_VERSION
from apiserver.errors import Cause, quoted

API_VERSION = GROUP_VERSION
_OBJECTS = ("metadata", "spec")
"""Members a body may leave out or null (they decode as empty objects); else objects."""

Kind = TypeVar("Kind", bound=APIModel)


class FieldValidation(StrEnum):
    """What to do with unknown and duplicate fields (the ``fieldValidation`` query
    parameter)."""

    STRICT = "Strict"
    WARN = "Warn"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class Body:
    """A request body read as a JSON object: its members, and the field paths of the keys it
    gave more than once (their last values are in ``members``)."""

    members: dict[str, Any]
    duplicates: tuple[str, ...] = ()
    size: int | None = field(default=None, compare=False)
    """The bytes it was read from (what decoding and validating it cost grows with); None if
    it was not read from bytes (a server-side apply's configuration)."""


@dataclass(frozen=True)
class Decoded(Generic[Kind]):
    """A decoded body: the object, or (``obj`` None) the field errors of its values; and the
    warnings (``Warning`` headers) the request's answer carries."""

    obj: Kind | None
    errors: list[FieldError]
    warnings: tuple[str, ...] = ()


def parse_body(raw: bytes, media_type: str = JSON_MEDIA_TYPE) -> Body:
    """The request body (JSON, or YAML as kube-apiserver also reads) as a JSON object, or 400
    (json_input says what is refused; a YAML body is converted to JSON text first)."""
    what = "the request body"
    text = yaml_input.to_json(raw, what=what) if media_type == YAML_MEDIA_TYPE else raw
    document = json_input.read(text, what=what)
    if not isinstance(document.value, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return Body(document.value, document.duplicates, len(raw))


def invalid(model: type[APIModel], body: Body, field_errors: Sequence[FieldError]
            ) -> errors.Invalid:
    """The 422 of a body whose values do not validate, naming the kind and the object as
    kube-apiserver does: ``metadata.name``, else ``generateName``, if it is printable text."""
    meta = body.members.get("metadata") or {}  # decode checked: an object or null
    names = (meta.get(key) for key in ("name", "generateName"))
    name = next((found for found in names
                 if isinstance(found, str) and found and found.isprintable()), "")
    return errors.invalid(model.KIND, GROUP, name, [error.as_cause() for error in field_errors])


def decode(model: type[Kind], body: Body, *, namespace: str, limits: Limits,
           field_validation: FieldValidation = FieldValidation.STRICT) -> Decoded[Kind]:
    """``body`` as a ``model`` (a kind) created in ``namespace``; ``limits`` are the bounds the
    server is configured with. Raises 400 (BadRequest) for the envelope and, under ``Strict``,
    for unknown or duplicate fields; returns field errors for the values."""
    members = body.members
    if members.get("apiVersion") != API_VERSION or members.get("kind") != model.KIND:
        raise errors.bad_request(
            f'the body must be a {model.KIND} with apiVersion "{API_VERSION}"; got kind '
            f'{show(members.get("kind"))} and apiVersion {show(members.get("apiVersion"))}')
    document = dict(members)
    for key in _OBJECTS:
        if document.get(key) is None:
            document[key] = {}
        elif not isinstance(document[key], dict):
            raise errors.bad_request(f"{key} must be a JSON object")
    obj, details = _validate(model, document, limits)
    unknown = [detail["loc"] for detail in details if detail["type"] == UNKNOWN_FIELD]
    strict = ([("duplicate", path) for path in body.duplicates]
              + [("unknown", path_of(loc)) for loc in unknown])
    problems = [f'{kind} field "{path}"' for kind, path in strict]
    if strict and field_validation is FieldValidation.STRICT:
        raise errors.BadRequest(
            "strict decoding error: " + ", ".join(problems),
            causes=[Cause("FieldValueInvalid", problem, path)
                    for problem, (_, path) in zip(problems, strict, strict=True)])
    if unknown:  # Warn or Ignore: decode without them
        document = _without(document, unknown)
        obj, details = _validate(model, document, limits)
    warnings = tuple(problems) if field_validation is FieldValidation.WARN else ()
    _check_namespace(document, namespace)
    if obj is None:
        return Decoded(None, [found for detail in details for found in _field_errors(detail)],
                       warnings)
    return Decoded(obj, [], warnings)


def _validate(model: type[Kind], document: dict[str, Any], limits: Limits
              ) -> tuple[Kind | None, list[ErrorDetails]]:
    try:
        return model.model_validate(document, context=limits), []
    except ValidationError as error:
        return None, error.errors(include_url=False)


def _without(document: dict[str, Any], locations: Sequence[tuple[int | str, ...]]
             ) -> dict[str, Any]:
    """A copy of ``document`` without the members at ``locations`` (pydantic locations)."""
    pruned = copy.deepcopy(document)
    for loc in locations:
        parent: Any = pruned
        for part in loc[:-1]:
            parent = parent[part]
        del parent[loc[-1]]
    return pruned


def path_of(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a Kubernetes field path: ``spec.containers[1]`` (a key that is
    not printable text JSON-escaped)."""
    return json_input.field_path(loc)


def _check_namespace(document: Mapping[str, Any], namespace: str) -> None:
    given = document["metadata"].get("namespace")
    if isinstance(given, str) and given not in ("", namespace):
        raise errors.bad_request(
            f"metadata.namespace {quoted(given)} does not match the namespace "
            f'"{namespace}" in the URL; leave it empty or make them equal')


def _field_errors(detail: ErrorDetails) -> list[FieldError]:
    path = path_of(detail["loc"])
    if detail["type"] == FIELD_ERRORS:
        return [problem.at_path(path, detail["input"])
                for problem in (detail.get("ctx") or {})["problems"]]
    # A value no marker words (a definition without an Invalid marker): pydantic's message.
    return [FieldError.invalid(path, detail["input"], detail["msg"])]
