"""Validation of the body of POST .../pods/{pod}/notify (a PodNotifier), without I/O.

Errors follow kube-apiserver: a body that is not a JSON object, or whose apiVersion/kind are
wrong, or whose names disagree with the URL, is 400 BadRequest; unknown fields are 400 with the
strict-decoding wording kubectl users know; out-of-range values are 422 Invalid with
`details.causes[].field`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from apiserver import errors
from apiserver.definitions import qualified_name_errors
from apiserver.errors import Cause
from apiserver.notifier.records import API_VERSION, KIND

GROUP = "notifier.x-k8s.io"
RESOURCE = "podnotifiers"

ALLOWED_FIELDS: dict[str, Any] = {
    "apiVersion": None,
    "kind": None,
    "metadata": {"name": None, "generateName": None, "namespace": None, "labels": None,
                 "annotations": None},
    "spec": {"podName": None, "podUID": None, "notifier": None, "containers": None,
             "timeoutSeconds": None, "ttlSecondsAfterFinished": None, "requestedBy": None},
    "status": None,
}
"""Fields a client may send. podUID, requestedBy and status are accepted and ignored: the
server sets them (kube-apiserver likewise drops status on create)."""

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_TTL_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class NotifyRequest:
    name: str
    generate_name: str
    labels: dict[str, str]
    notifier: str
    containers: list[str] | None
    timeout_seconds: int | None
    ttl_seconds_after_finished: int | None


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise errors.bad_request(f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object (a PodNotifier)")
    return body


def unknown_fields(body: dict[str, Any], allowed: dict[str, Any], prefix: str = "") -> list[str]:
    unknown = []
    for key, value in body.items():
        path = f"{prefix}{key}"
        if key not in allowed:
            unknown.append(path)
        elif isinstance(allowed[key], dict) and isinstance(value, dict):
            unknown += unknown_fields(value, allowed[key], f"{path}.")
    return unknown


def envelope(body: dict[str, Any], *, kind: str, allowed: dict[str, Any], namespace: str
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, spec) of a body that is a `kind` of this group, has no unknown fields and
    names the URL's namespace (if any); else 400, as kube-apiserver answers."""
    if body.get("apiVersion") != API_VERSION or body.get("kind") != kind:
        raise errors.bad_request(
            f'the body must be a {kind} with apiVersion "{API_VERSION}"; got kind '
            f'{json.dumps(body.get("kind"))} and apiVersion {json.dumps(body.get("apiVersion"))}')
    unknown = unknown_fields(body, allowed)
    if unknown:
        raise errors.BadRequest("strict decoding error: " + ", ".join(
            f'unknown field "{path}"' for path in unknown), causes=[
            Cause("FieldValueInvalid", f'unknown field "{path}"', path) for path in unknown])
    metadata = _object(body, "metadata")
    spec = _object(body, "spec")
    if metadata.get("namespace") not in (None, "", namespace):
        raise errors.bad_request(
            f'metadata.namespace "{metadata["namespace"]}" does not match the namespace '
            f'"{namespace}" in the URL; leave it empty or make them equal')
    return metadata, spec


def validate(body: dict[str, Any], namespace: str, pod: str, max_timeout_seconds: int
             ) -> NotifyRequest:
    """The request, or a StatusError (400 or 422) saying what is wrong and how to fix it."""
    metadata, spec = envelope(body, kind=KIND, allowed=ALLOWED_FIELDS, namespace=namespace)
    if spec.get("podName") not in (None, "", pod):
        raise errors.bad_request(
            f'spec.podName "{spec["podName"]}" does not match the pod "{pod}" in the URL; '
            f"leave it empty or make them equal")

    causes: list[Cause] = []
    name = _string(metadata, "name", "metadata.name", causes)
    generate_name = _string(metadata, "generateName", "metadata.generateName", causes)
    if name and (len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name)):
        causes.append(invalid_cause("metadata.name", name,
                               "a lowercase RFC 1123 subdomain must consist of lower case "
                               "alphanumeric characters, '-' or '.', and must start and end "
                               "with an alphanumeric character (e.g. 'example.com')"))
    if generate_name and (len(generate_name) > 248
                          or not DNS1123_SUBDOMAIN.fullmatch(generate_name.rstrip("-"))):
        causes.append(invalid_cause("metadata.generateName", generate_name,
                               "must be a lowercase RFC 1123 subdomain prefix"))
    labels = validate_labels(metadata.get("labels"), causes)

    notifier = spec.get("notifier")
    if not notifier:
        causes.append(Cause("FieldValueRequired", "spec.notifier: Required value: name the "
                            "notifier to run, as the pod declares it", "spec.notifier"))
    elif not isinstance(notifier, str):
        causes.append(invalid_cause("spec.notifier", notifier, "must be a string"))
    else:
        causes += [invalid_cause("spec.notifier", notifier, problem)
                   for problem in qualified_name_errors(notifier)]
    containers = _containers(spec.get("containers"), causes)
    timeout = _bounded_int(spec, "timeoutSeconds", 1, max_timeout_seconds, causes)
    ttl = _bounded_int(spec, "ttlSecondsAfterFinished", 0, MAX_TTL_SECONDS, causes)
    if causes:
        raise errors.invalid(RESOURCE, GROUP, name or pod, causes)
    return NotifyRequest(name=name, generate_name=generate_name, labels=labels,
                         notifier=str(notifier), containers=containers,
                         timeout_seconds=timeout, ttl_seconds_after_finished=ttl)


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise errors.bad_request(f"{key} must be a JSON object")
    return value


def invalid_cause(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"{field}: Invalid value: {json.dumps(value)}: {detail}",
                 field)


def _string(obj: dict[str, Any], key: str, field: str, causes: list[Cause]) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        causes.append(invalid_cause(field, value, "must be a string"))
        return ""
    return value


def validate_labels(value: Any, causes: list[Cause]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        causes.append(invalid_cause("metadata.labels", value, "must be a map of strings"))
        return {}
    labels = {}
    for key, item in value.items():
        field = f"metadata.labels[{key}]"
        problems = qualified_name_errors(key)
        if not isinstance(item, str) or len(item) > 63 or not _LABEL_VALUE.fullmatch(item):
            problems.append("a label value must be 63 characters or less, alphanumeric, '-', "
                            "'_' or '.', starting and ending with an alphanumeric character")
        if key.startswith("notifier.x-k8s.io/"):
            problems.append("the notifier.x-k8s.io/ label prefix is reserved for the server")
        causes += [invalid_cause(field, item, problem) for problem in problems]
        if not problems:
            labels[key] = item
    return labels


def _containers(value: Any, causes: list[Cause]) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        causes.append(invalid_cause("spec.containers", value,
                               "must be a list of container names (or left out for all)"))
        return None
    return list(dict.fromkeys(value))


def _bounded_int(spec: dict[str, Any], key: str, low: int, high: int, causes: list[Cause]
                 ) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    field = f"spec.{key}"
    if isinstance(value, bool) or not isinstance(value, int):
        causes.append(invalid_cause(field, value, "must be a whole number"))
        return None
    if not low <= value <= high:
        causes.append(invalid_cause(field, value, f"must be between {low} and {high}, inclusive"))
        return None
    return value
