"""The body of POST .../pods/{pod}/notify (a PodNotifier), decoded and validated without I/O.

The PodNotifier definition (api/types.py) decides what is accepted and how a wrong value is
worded; this module adds what only the URL knows (spec.podName must name the URL's pod) and
turns the decoded object into the ``NotifyRequest`` admission works with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver import errors
from apiserver.api.decoding import Body, FieldValidation, decode, invalid
from apiserver.api.decoding import parse_body as parse_body  # handlers/notify.py reads bodies
from apiserver.api.types import PodNotifier
from apiserver.errors import quoted


@dataclass(frozen=True)
class NotifyRequest:
    name: str
    generate_name: str
    labels: dict[str, str]
    notifier: str
    containers: list[str] | None
    timeout_seconds: int | None
    ttl_seconds_after_finished: int | None
    warnings: tuple[str, ...] = ()
    """For the answer's Warning headers (unknown or duplicate fields under Warn)."""


def validate(body: Body, namespace: str, pod: str, max_timeout_seconds: int,
             field_validation: FieldValidation = FieldValidation.STRICT) -> NotifyRequest:
    """The request, or an APIError (400 or 422) saying what is wrong and how to fix it."""
    decoded = decode(PodNotifier, body, namespace=namespace,
                     limits={"max_timeout_seconds": max_timeout_seconds},
                     field_validation=field_validation)
    pod_name = _member(body.members, "spec", "podName")
    if isinstance(pod_name, str) and pod_name not in ("", pod):
        raise errors.bad_request(
            f'spec.podName {quoted(pod_name)} does not match the pod "{pod}" in the URL; '
            f"leave it empty or make them equal")
    if decoded.obj is None:
        raise invalid(PodNotifier, body, decoded.errors)
    meta, ask = decoded.obj.metadata, decoded.obj.spec
    return NotifyRequest(name=meta.name or "", generate_name=meta.generate_name or "",
                         labels=dict(meta.labels or {}), notifier=str(ask.notifier),
                         containers=ask.containers, timeout_seconds=ask.timeout_seconds,
                         ttl_seconds_after_finished=ask.ttl_seconds_after_finished,
                         warnings=decoded.warnings)


def _member(members: dict[str, Any], parent: str, key: str) -> Any:
    """``members[parent][key]`` if ``members[parent]`` is an object (decode checked that it is
    one or null), else None."""
    container = members.get(parent)
    return container.get(key) if isinstance(container, dict) else None
