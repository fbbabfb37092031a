"""The options of a collection request: ListOptions (query) and DeleteOptions (body and query).

Values are checked as kube-apiserver checks them, with its wording: a malformed one is a 400
(or a 422 for an unsupported ``dryRun``) naming the parameter and what it accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from apiserver import errors
from apiserver.handlers.negotiation import JSON_MEDIA_TYPE

MAX_DELETE_OPTIONS_BYTES = 64 * 1024
_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("0", "f", "F", "false", "FALSE", "False")


@dataclass(frozen=True)
class ListOptions:
    """The query of a list, watch or deletecollection."""

    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
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
            watch=_boolean(query, "watch"),
            timeout_seconds=_integer(query, "timeoutSeconds"),
            send_initial_events=_boolean(query, "sendInitialEvents"),
        )


def _integer(query: Mapping[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'invalid {name} "{text}": must be an integer') from None
    if value < 0:
        raise errors.bad_request(f"{name} must not be negative, got {value}")
    return value


def _boolean(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name, "")
    if text in _TRUE:
        return True
    if text in _FALSE or text == "":
        return False
    raise errors.bad_request(f'invalid {name} "{text}": must be true or false')


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
        body = await _read_body(request)
        dry_run = _dry_run(request.query_params.getlist("dryRun"))
        if not body.strip():
            return cls(dry_run=dry_run)
        content_type = request.headers.get("content-type", JSON_MEDIA_TYPE)
        if content_type.split(";")[0].strip().lower() not in (JSON_MEDIA_TYPE, ""):
            raise errors.unsupported_media_type([JSON_MEDIA_TYPE])
        try:
            options = json.loads(body)
        except ValueError as error:
            raise errors.bad_request(f"the body is not valid JSON DeleteOptions: {error}"
                                     ) from None
        if not isinstance(options, dict):
            raise errors.bad_request("the body must be a DeleteOptions object")
        if options.get("kind", "DeleteOptions") != "DeleteOptions":
            raise errors.bad_request(
                f'the body must be a DeleteOptions, not a {options.get("kind")!r}')
        preconditions = options.get("preconditions") or {}
        if not isinstance(preconditions, dict) or not all(
                isinstance(preconditions.get(key, ""), str | None)
                for key in ("uid", "resourceVersion")):
            raise errors.bad_request(
                "preconditions must be an object with string uid and resourceVersion")
        body_dry_run = options.get("dryRun") or []
        if not isinstance(body_dry_run, list):
            raise errors.bad_request("dryRun must be a list")
        return cls(uid=preconditions.get("uid") or "",
                   resource_version=preconditions.get("resourceVersion") or "",
                   dry_run=dry_run or _dry_run(body_dry_run))


def _dry_run(values: list[Any]) -> bool:
    for value in values:
        if value != "All":
            problem = f'Unsupported value: "{value}": supported values: "All"'
            raise errors.Invalid(f"dryRun: {problem}", causes=[
                errors.Cause("FieldValueNotSupported", problem, "dryRun")])
    return bool(values)


async def _read_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_DELETE_OPTIONS_BYTES:
            raise errors.request_entity_too_large(
                f"DeleteOptions larger than {MAX_DELETE_OPTIONS_BYTES} bytes")
    return bytes(body)
