"""Strict decoding of create request bodies into the typed definitions of types.py.

Errors follow kube-apiserver: a body that is not a JSON object, or whose apiVersion/kind are
wrong, or whose metadata or spec is not an object, or whose namespace disagrees with the URL, is
400 BadRequest; unknown fields are 400 with the strict-decoding wording kubectl users know
(``strict decoding error: unknown field "spec.x"``); wrong values are field errors, which the
caller answers as 422 Invalid once it has made its own 400 checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from apiserver import errors
from apiserver.api.field_errors import FieldError
from apiserver.api.model import FIELD_ERRORS, UNKNOWN_FIELD, APIModel, Limits
from apiserver.api.resources import GROUP_VERSION
from apiserver.errors import Cause

API_VERSION = GROUP_VERSION
_OBJECTS = ("metadata", "spec")
"""Members a body may leave out or null: they decode as empty objects."""

Kind = TypeVar("Kind", bound=APIModel)


@dataclass(frozen=True)
class Decoded(Generic[Kind]):
    """A decoded body: the object, or (``obj`` None) the field errors of its values."""

    obj: Kind | None
    errors: list[FieldError]


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise errors.bad_request(f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def decode(model: type[Kind], body: Mapping[str, Any], *, namespace: str, limits: Limits
           ) -> Decoded[Kind]:
    """``body`` as a ``model`` (a kind) created in ``namespace``; ``limits`` are the bounds the
    server is configured with. Raises 400 (BadRequest) for the envelope, returns field errors
    for the values."""
    if body.get("apiVersion") != API_VERSION or body.get("kind") != model.KIND:
        raise errors.bad_request(
            f'the body must be a {model.KIND} with apiVersion "{API_VERSION}"; got kind '
            f'{json.dumps(body.get("kind"))} and apiVersion {json.dumps(body.get("apiVersion"))}')
    document = {**body, **{key: body.get(key) or {} for key in _OBJECTS}}
    try:
        obj = model.model_validate(document, context=limits)
    except ValidationError as error:
        details = error.errors(include_url=False)
        _refuse_unknown_fields(details)
        for detail in details:
            if len(detail["loc"]) == 1 and detail["type"] == "model_type":
                raise errors.bad_request(f"{detail['loc'][0]} must be a JSON object") from None
        _check_namespace(document, namespace)
        return Decoded(None, [found for detail in details for found in _field_errors(detail)])
    _check_namespace(document, namespace)
    return Decoded(obj, [])


def path_of(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a Kubernetes field path: ``spec.containers[1]``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else part
    return path


def _refuse_unknown_fields(details: list[ErrorDetails]) -> None:
    unknown = [path_of(detail["loc"]) for detail in details if detail["type"] == UNKNOWN_FIELD]
    if unknown:
        raise errors.BadRequest(
            "strict decoding error: " + ", ".join(f'unknown field "{path}"' for path in unknown),
            causes=[Cause("FieldValueInvalid", f'unknown field "{path}"', path)
                    for path in unknown])


def _check_namespace(document: Mapping[str, Any], namespace: str) -> None:
    given = document["metadata"].get("namespace")
    if given not in (None, "", namespace):
        raise errors.bad_request(
            f'metadata.namespace "{given}" does not match the namespace "{namespace}" in the '
            "URL; leave it empty or make them equal")


def _field_errors(detail: ErrorDetails) -> list[FieldError]:
    path = path_of(detail["loc"])
    if detail["type"] == FIELD_ERRORS:
        return [problem.at_path(path, detail["input"])
                for problem in (detail.get("ctx") or {})["problems"]]
    # A value no marker words (a definition without an Invalid marker): pydantic's message.
    return [FieldError.invalid(path, detail["input"], detail["msg"])]
