"""A Notification create request, decoded and validated without I/O, and its selector.

The Notification definition (api/types.py) decides what is accepted, the defaults (policy
PreExistingPods, failurePolicy Abort, parallelism 1: like a Job, one pod at a time unless asked;
quiesce-before-snapshot users raise it knowingly) and how a wrong value is worded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver.api.decoding import Body, FieldValidation, decode, invalid
from apiserver.api.resources import NOTIFICATIONS
from apiserver.api.types import ABORT, ALL_PODS, Notification
from apiserver.registry.decoding import (
    Malformed,
    decoded,
    mapping,
    optional_integer,
    optional_listing,
    optional_mapping,
    optional_text,
    public_object,
    string_map,
    text,
)
from apiserver.registry.resources import NOTIFICATIONS as STORED_NOTIFICATIONS
from apiserver.registry.selectors import LabelSelector
from apiserver.registry.store import Object

KIND = Notification.KIND
RESOURCE = NOTIFICATIONS.name
__all__ = ["ABORT", "ALL_PODS", "KIND", "RESOURCE", "NotificationRequest", "decode_stored",
           "selector_string", "stored_spec", "validate"]
"""ABORT and ALL_PODS are the definition's, re-exported for the fan-out controller."""


@dataclass(frozen=True)
class NotificationRequest:
    metadata: dict[str, Any]
    spec: dict[str, Any]
    """With defaults filled in; requestedBy is set by the handler."""
    warnings: tuple[str, ...] = ()
    """For the answer's Warning headers (unknown or duplicate fields under Warn)."""


def selector_string(selector: dict[str, Any]) -> str:
    """spec.selector as a label selector string, for listing pods."""
    return str(LabelSelector.from_object(selector))


def validate(body: Body, namespace: str, *, max_parallelism: int, max_timeout_seconds: int,
             max_hold_seconds: int, field_validation: FieldValidation = FieldValidation.STRICT
             ) -> NotificationRequest:
    """The request, or an APIError (400 or 422) saying what is wrong and how to fix it.
    `max_hold_seconds` bounds spec.release's afterSeconds and maxHoldSeconds, and is the
    default of maxHoldSeconds (filled in, so the run keeps the bound it was created with)."""
    decoded = decode(Notification, body, namespace=namespace,
                     limits={"max_parallelism": max_parallelism,
                             "max_timeout_seconds": max_timeout_seconds,
                             "max_hold_seconds": max_hold_seconds},
                     field_validation=field_validation)
    if decoded.obj is None:
        raise invalid(Notification, body, decoded.errors)
    meta, spec = decoded.obj.metadata, decoded.obj.spec
    metadata: dict[str, Any] = {"namespace": namespace, "labels": dict(meta.labels or {})}
    if meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    if meta.name:
        metadata["name"] = meta.name
    else:
        metadata["generateName"] = meta.generate_name
    clean = spec.model_dump(by_alias=True, exclude_none=True)
    clean["selector"] = {"matchLabels": clean["selector"].get("matchLabels", {}),
                         "matchExpressions": clean["selector"].get("matchExpressions", [])}
    if "release" in clean:
        clean["release"].setdefault("maxHoldSeconds", max_hold_seconds)
    return NotificationRequest(metadata, clean, decoded.warnings)


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def decode_stored(obj: Object) -> Object:
    """The decoder of stored Notifications: ``MalformedObject`` unless the spec is what the
    fan-out reads (``stored_spec``) and the status, if any, an object."""

    def check(found: Object) -> Object:
        public_object(found)
        stored_spec(found.get("spec"), "spec")
        status = optional_mapping(found.get("status"), "status")
        optional_text(status.get("phase"), "status.phase")
        optional_listing(status.get("conditions"), "status.conditions")
        return found

    return decoded(STORED_NOTIFICATIONS, obj, check)


def stored_spec(value: object, path: str) -> dict[str, Any]:
    """A Notification's spec as stored (validated when it was created, but read back from a
    storage object anyone with write access may have changed): ``Malformed`` unless every field
    the fan-out reads has its type."""
    spec = mapping(value, path)
    text(spec.get("notifier"), f"{path}.notifier")
    selector = optional_mapping(spec.get("selector"), f"{path}.selector")
    string_map(selector.get("matchLabels"), f"{path}.selector.matchLabels")
    expressions = optional_listing(selector.get("matchExpressions"),
                                   f"{path}.selector.matchExpressions")
    for i, item in enumerate(expressions):
        where = f"{path}.selector.matchExpressions[{i}]"
        expression = mapping(item, where)
        text(expression.get("key"), f"{where}.key")
        if expression.get("operator") not in _OPERATORS:
            raise Malformed(f"{where}.operator must be one of {', '.join(_OPERATORS)}")
        for j, label in enumerate(optional_listing(expression.get("values"), f"{where}.values")):
            text(label, f"{where}.values[{j}]")
    for key in ("policy", "failurePolicy", "concurrencyPolicy"):
        optional_text(spec.get(key), f"{path}.{key}")
    for key in ("parallelism", "timeoutSeconds", "activeDeadlineSeconds"):
        optional_integer(spec.get(key), f"{path}.{key}")
    for j, container in enumerate(optional_listing(spec.get("containers"), f"{path}.containers")):
        text(container, f"{path}.containers[{j}]")
    for part in ("release", "rollback"):
        found = optional_mapping(spec.get(part), f"{path}.{part}")
        optional_text(found.get("notifier"), f"{path}.{part}.notifier")
        for key in ("afterSeconds", "maxHoldSeconds"):
            optional_integer(found.get(key), f"{path}.{part}.{key}")
    return dict(spec)
