"""The options of a request: ListOptions (query), DeleteOptions (body and query) and the
``fieldValidation`` of a create.

Values are checked as kube-apiserver checks them, with its wording: a malformed one is a 400
(or a 422 for an unsupported ``dryRun`` or ``fieldValidation``) naming the parameter and what it
accepts. Integers are read as Go's strconv.ParseInt reads them (ASCII digits, an optional sign,
64 bits), so that no value can reach a conversion that raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from apiserver import errors
from apiserver.api import json_input
from apiserver.api.decoding import FieldValidation
from apiserver.api.field_errors import FieldError, show
from apiserver.api.media import JSON_MEDIA_TYPE
from apiserver.handlers.body import by_size, media_type, read_limited

MAX_DELETE_OPTIONS_BYTES = 64 * 1024
MAX_INT64 = 2**63 - 1
_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("0", "f", "F", "false", "FALSE", "False")
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
FIELD_VALIDATION = "fieldValidation"
_FIELD_VALIDATION_VALUES = ("", *sorted(FieldValidation))


@dataclass(frozen=True)
class ListOptions:
    """The query of a list, watch or deletecollection."""

    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""
    watch: bool = False
    timeout_seconds: int = 0
    send_initial_events: bool = False

    @classmethod
    def from_request(cls, request: Request) -> ListOptions:
        query = request.query_params
        return cls(
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
            limit=_integer(query, "limit"),
            continue_token=query.get("continue", ""),
            resource_version=query.get("resourceVersion", ""),
            resource_version_match=query.get("resourceVersionMatch", ""),
            watch=_boolean(query, "watch"),
            timeout_seconds=_integer(query, "timeoutSeconds"),
            send_initial_events=_boolean(query, "sendInitialEvents"),
        )

    @property
    def consistent(self) -> bool:
        """A list of the latest state: no resourceVersion, resourceVersionMatch or continue
        token (kube-apiserver's consistent read). ``resourceVersion=0`` (any) and a
        resourceVersion (not older than) are served from this replica's cache as it is; a
        continue token's page comes from its list's snapshot."""
        return not (self.resource_version or self.resource_version_match
                    or self.continue_token)


def consistent_get(request: Request) -> bool:
    """A get without a resourceVersion: of the latest state (kube-apiserver's consistent
    read); with one (``0``: any), from this replica's cache as it is."""
    return not request.query_params.get("resourceVersion")


def field_validation(request: Request) -> FieldValidation:
    """The ``fieldValidation`` of a create: Strict when unset (this API's default), else as
    given; another value is 422 as kube-apiserver words it."""
    text = request.query_params.get(FIELD_VALIDATION, "")
    if text not in _FIELD_VALIDATION_VALUES:
        error = FieldError.not_supported(FIELD_VALIDATION, text, _FIELD_VALIDATION_VALUES)
        raise errors.invalid("CreateOptions", "meta.k8s.io", "", [error.as_cause()])
    return FieldValidation(text) if text else FieldValidation.STRICT


def _integer(query: Mapping[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    value = int(text) if _INTEGER.fullmatch(text) else None
    if value is None or value > MAX_INT64:
        raise errors.bad_request(
            f"invalid {name} {show(text)}: must be an integer of at most {MAX_INT64}")
    if value < 0:
        raise errors.bad_request(f"{name} must not be negative, got {value}")
    return value


def _boolean(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name, "")
    if text in _TRUE:
        return True
    if text in _FALSE or text == "":
        return False
    raise errors.bad_request(f"invalid {name} {show(text)}: must be true or false")


@dataclass(frozen=True)
class DeleteOptions:
    """The preconditions and dry run of a delete or deletecollection."""

    uid: str = ""
    resource_version: str = ""
    dry_run: bool = False

    @classmethod
    async def from_request(cls, request: Request) -> DeleteOptions:
        """DeleteOptions from the body (JSON) and the ``dryRun`` query parameter.

        Only preconditions and dryRun mean anything here: nothing has finalizers, dependents
        or a grace period, so propagationPolicy and gracePeriodSeconds are accepted and ignored.
        """
        body = await read_limited(request, MAX_DELETE_OPTIONS_BYTES, "the DeleteOptions body")
        dry_run = _dry_run(request.query_params.getlist("dryRun"))
        if not body.strip():
            return cls(dry_run=dry_run)
        if media_type(request) not in (JSON_MEDIA_TYPE, ""):
            raise errors.unsupported_media_type([JSON_MEDIA_TYPE])
        options = (await by_size(len(body), json_input.read, body,
                                 what="the DeleteOptions body")).value
        if not isinstance(options, dict):
            raise errors.bad_request("the body must be a DeleteOptions object")
        if options.get("kind", "DeleteOptions") != "DeleteOptions":
            raise errors.bad_request(
                f'the body must be a DeleteOptions, not a {show(options.get("kind"))}')
        _check_types(options)
        preconditions = options.get("preconditions") or {}
        body_dry_run = options.get("dryRun") or []
        return cls(uid=preconditions.get("uid") or "",
                   resource_version=preconditions.get("resourceVersion") or "",
                   dry_run=dry_run or _dry_run(body_dry_run))


_DELETE_OPTION_TYPES: dict[str, type] = {
    "apiVersion": str, "kind": str, "gracePeriodSeconds": int, "orphanDependents": bool,
    "propagationPolicy": str, "dryRun": list, "preconditions": dict,
}
"""The DeleteOptions members a body may set, by type (each may also be null). Unknown members
are ignored: kube-apiserver does not decode DeleteOptions strictly."""
_TYPE_NAMES = {str: "string", int: "64-bit integer", bool: "boolean", list: "list",
               dict: "object"}


def _check_types(options: Mapping[str, Any]) -> None:
    """400 for a member of the wrong type (Go's decoding into DeleteOptions would fail)."""
    for key, wanted in _DELETE_OPTION_TYPES.items():
        value = options.get(key)
        wrong_int = wanted is int and isinstance(value, bool)  # bool is an int in Python
        if value is not None and (not isinstance(value, wanted) or wrong_int):
            raise errors.bad_request(
                f"the DeleteOptions body is invalid: {key} must be a {_TYPE_NAMES[wanted]}, "
                f"not {show(value)}")
    preconditions = options.get("preconditions") or {}
    if not all(isinstance(preconditions.get(key), str | None)
               for key in ("uid", "resourceVersion")):
        raise errors.bad_request(
            "preconditions must be an object with string uid and resourceVersion")


def _dry_run(values: list[Any]) -> bool:
    for value in values:
        if value != "All":
            problem = f'Unsupported value: {show(value)}: supported values: "All"'
            raise errors.Invalid(f"dryRun: {problem}", causes=[
                errors.Cause("FieldValueNotSupported", problem, "dryRun")])
    return bool(values)
