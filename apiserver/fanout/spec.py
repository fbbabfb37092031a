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
from apiserver.registry.selectors import LabelSelector

KIND = Notification.KIND
RESOURCE = NOTIFICATIONS.name
__all__ = ["ABORT", "ALL_PODS", "KIND", "RESOURCE", "NotificationRequest", "selector_string",
           "validate"]
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
