"""Validation of a Notification create request, without I/O.

Defaults: policy PreExistingPods, failurePolicy Abort, parallelism 1 (like a Job: one pod at a
time unless asked; quiesce-before-snapshot users raise it knowingly).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from apiserver import errors
from apiserver.definitions import qualified_name_errors
from apiserver.errors import Cause
from apiserver.notifier.request import (
    DNS1123_SUBDOMAIN,
    GROUP,
    envelope,
    invalid_cause,
    validate_labels,
)

KIND = "Notification"
RESOURCE = "notifications"
PRE_EXISTING_PODS, ALL_PODS = "PreExistingPods", "AllPods"
ABORT, CONTINUE = "Abort", "Continue"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_VALUE_PROBLEM = ("must be a label value: 63 characters or less, alphanumeric, '-', '_' "
                        "or '.', starting and ending with an alphanumeric character")


def _is_label_value(value: Any) -> bool:
    """A valid label value: selector_string() writes values unquoted, so a ',' or ' ' in one
    would change what the selector means."""
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.fullmatch(value))

ALLOWED_FIELDS: dict[str, Any] = {
    "apiVersion": None,
    "kind": None,
    "metadata": {"name": None, "generateName": None, "namespace": None, "labels": None,
                 "annotations": None},
    "spec": {"selector": {"matchLabels": None, "matchExpressions": None}, "notifier": None,
             "containers": None, "policy": None, "parallelism": None, "failurePolicy": None,
             "rollback": {"notifier": None}, "timeoutSeconds": None,
             "activeDeadlineSeconds": None, "requestedBy": None},
    "status": None,
}


@dataclass(frozen=True)
class NotificationRequest:
    metadata: dict[str, Any]
    spec: dict[str, Any]
    """With defaults filled in; requestedBy is set by the handler."""
    label_selector: str
    """spec.selector as a label selector string for listing pods."""


def selector_string(selector: dict[str, Any]) -> str:
    parts = [f"{key}={value}" for key, value in sorted(selector.get("matchLabels", {}).items())]
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = ",".join(expression.get("values", []))
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[operator])
    return ",".join(parts)


def _selector(value: Any, causes: list[Cause]) -> dict[str, Any]:
    field = "spec.selector"
    if value is None:
        causes.append(Cause("FieldValueRequired", f"{field}: Required value: a label selector "
                            "of the pods to notify, e.g. {\"matchLabels\": {\"app\": \"db\"}}",
                            field))
        return {}
    if not isinstance(value, dict):
        causes.append(invalid_cause(field, value, "must be a label selector object"))
        return {}
    match_labels = value.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        causes.append(invalid_cause(f"{field}.matchLabels", match_labels,
                                    "must be a map of strings"))
        match_labels = {}
    for key, item in match_labels.items():
        problems = qualified_name_errors(key)
        if not _is_label_value(item):
            problems.append(_LABEL_VALUE_PROBLEM)
        causes += [invalid_cause(f"{field}.matchLabels[{key}]", item, p) for p in problems]
    expressions = value.get("matchExpressions") or []
    if not isinstance(expressions, list):
        causes.append(invalid_cause(f"{field}.matchExpressions", expressions, "must be a list"))
        expressions = []
    for index, expression in enumerate(expressions):
        path = f"{field}.matchExpressions[{index}]"
        if not isinstance(expression, dict) or not isinstance(expression.get("key"), str):
            causes.append(invalid_cause(path, expression, "must be {key, operator, values}"))
            continue
        causes += [invalid_cause(f"{path}.key", expression["key"], p)
                   for p in qualified_name_errors(expression["key"])]
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            causes.append(Cause("FieldValueNotSupported",
                                f"{path}.operator: Unsupported value: {json.dumps(operator)}: "
                                f"supported values: {', '.join(SELECTOR_OPERATORS)}",
                                f"{path}.operator"))
        elif (not isinstance(values, list) or (operator in ("In", "NotIn")) != bool(values)
              or not all(v and _is_label_value(v) for v in values)):
            causes.append(invalid_cause(f"{path}.values", values,
                                   "must be a non-empty list of label values for In and NotIn, "
                                   "and empty for Exists and DoesNotExist"))
    return {"matchLabels": match_labels, "matchExpressions": expressions}


def _choice(spec: dict[str, Any], key: str, choices: tuple[str, ...], causes: list[Cause]
            ) -> str:
    value = spec.get(key, choices[0])
    if value not in choices:
        causes.append(Cause("FieldValueNotSupported",
                            f"spec.{key}: Unsupported value: {json.dumps(value)}: supported "
                            f"values: {', '.join(choices)}", f"spec.{key}"))
    return str(value)


def _integer(spec: dict[str, Any], key: str, low: int, high: int, causes: list[Cause],
             default: int | None = None) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        causes.append(invalid_cause(f"spec.{key}", value,
                               f"must be a whole number between {low} and {high}, inclusive"))
        return None
    return value


def _qualified(value: Any, field: str, causes: list[Cause]) -> str:
    if not value:
        causes.append(Cause("FieldValueRequired", f"{field}: Required value: name the notifier "
                            "the pods declare", field))
        return ""
    if not isinstance(value, str):
        causes.append(invalid_cause(field, value, "must be a string"))
        return ""
    causes += [invalid_cause(field, value, problem) for problem in qualified_name_errors(value)]
    return value


def validate(body: dict[str, Any], namespace: str, *, max_parallelism: int,
             max_timeout_seconds: int) -> NotificationRequest:
    metadata, spec = envelope(body, kind=KIND, allowed=ALLOWED_FIELDS, namespace=namespace)
    causes: list[Cause] = []
    name, generate_name = metadata.get("name") or "", metadata.get("generateName") or ""
    if not name and not generate_name:
        causes.append(Cause("FieldValueRequired", "metadata.name: Required value: name or "
                            "generateName is required", "metadata.name"))
    for field, value, limit in (("metadata.name", name, 253),
                                ("metadata.generateName", generate_name.rstrip("-"), 248)):
        if value and (not isinstance(value, str) or len(value) > limit
                      or not DNS1123_SUBDOMAIN.fullmatch(value)):
            causes.append(invalid_cause(field, value, "must be a lowercase RFC 1123 subdomain"))
    labels = validate_labels(metadata.get("labels"), causes)
    selector = _selector(spec.get("selector"), causes)
    clean: dict[str, Any] = {
        "selector": selector,
        "notifier": _qualified(spec.get("notifier"), "spec.notifier", causes),
        "policy": _choice(spec, "policy", (PRE_EXISTING_PODS, ALL_PODS), causes),
        "failurePolicy": _choice(spec, "failurePolicy", (ABORT, CONTINUE), causes),
        "parallelism": _integer(spec, "parallelism", 1, max_parallelism, causes, default=1),
    }
    containers = spec.get("containers")
    if containers is not None:
        if not isinstance(containers, list) or not all(isinstance(c, str) and c
                                                       for c in containers):
            causes.append(invalid_cause("spec.containers", containers, "must be a list of names"))
        else:
            clean["containers"] = list(dict.fromkeys(containers))
    rollback = spec.get("rollback")
    if rollback is not None:
        if not isinstance(rollback, dict):
            causes.append(invalid_cause("spec.rollback", rollback, "must be {\"notifier\": NAME}"))
        else:
            clean["rollback"] = {"notifier": _qualified(rollback.get("notifier"),
                                                        "spec.rollback.notifier", causes)}
    for key, high in (("timeoutSeconds", max_timeout_seconds),
                      ("activeDeadlineSeconds", MAX_DEADLINE_SECONDS)):
        value = _integer(spec, key, 1, high, causes)
        if value is not None:
            clean[key] = value
    if causes:
        raise errors.invalid(RESOURCE, GROUP, name or generate_name, causes)
    meta: dict[str, Any] = {"namespace": namespace, "labels": labels}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    return NotificationRequest(meta, clean, selector_string(selector))
