"""The PodNotifier records of a Notification's run: their names (known before they are
created, so a scope can say which record to look at after a crash), their labels, and what a
finished or Held record says of its pod."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from apiserver.api.types import Phase
from apiserver.authn.user import UserInfo
from apiserver.fanout import scope
from apiserver.fanout.reasons import HELD
from apiserver.notifier import records
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore

ROLLBACK_ATTEMPT_LABEL = "notifier.x-k8s.io/rollback-attempt"
"""On rollback and release records: 1 for the first run, 2 and more for a run again after the
server stopped during (or before storing) the previous one."""


def requester(spec: dict[str, Any]) -> UserInfo:
    who = spec.get("requestedBy", {})
    return UserInfo(who.get("username", ""), who.get("uid", ""), list(who.get("groups", [])),
                    {k: list(v) for k, v in who.get("extra", {}).items()})


def notification_label(name: str) -> dict[str, str]:
    return {records.NOTIFICATION_LABEL: name} if len(name) <= 63 else {}


def record_name(pod: str, notifier: str, notification_uid: str, pod_uid: str,
                attempt: int = 0) -> str:
    """The name of the record a Notification's run on a pod gets, known before it is created
    (so the scope can say which record to look at after a crash): the usual
    `<pod>-<notifier>-` prefix and a digest of the Notification, pod and attempt."""
    digest = hashlib.sha256(
        f"{notification_uid}/{pod_uid}/{notifier}/{attempt}".encode()).hexdigest()[:10]
    return records.generate_name(pod, notifier) + digest


def claim_name(pod: scope.ScopedPod, notifier: str, notification_uid: str) -> str:
    """The record that claims the pod's forward step in the run of Notification
    `notification_uid`: the name its scope holds (pod sets an older release wrote), else the
    one ``record_name`` gives."""
    return pod.record or record_name(pod.pod, notifier, notification_uid, pod.pod_uid)


async def stored_record(podnotifiers: ObjectStore, namespace: str, name: str
                        ) -> dict[str, Any] | None:
    """The record `name` as the store has it (on Kubernetes this replica's cache), or None."""
    try:
        return await podnotifiers.get(namespace, name)
    except NotFound:
        return None


def is_held(record: Mapping[str, Any]) -> bool:
    return (record.get("status") or {}).get("phase") == Phase.HELD


def hold_end(record: Mapping[str, Any]) -> str:
    """When a finished held record's hold may first have ended: the earliest end of its
    containers' commands (an exit, or the moment the exec stream broke, seen by the replica
    that held it), not when the record could be written (kube-apiserver may have been
    unreachable meanwhile); its completionTime if no container says."""
    status = record.get("status") or {}
    ends = [c["completionTime"] for c in status.get("containers") or []
            if isinstance(c, Mapping) and isinstance(c.get("completionTime"), str)]
    return min(ends, default=str(status.get("completionTime") or records.now()))


def quiesced_at(record: Mapping[str, Any] | None) -> str:
    """When a Succeeded (or Held) record's pod was first quiesced, as the replica that ran it
    saw it: its heldTime if it held, else its completionTime; "" if it says neither."""
    status = (record or {}).get("status") or {}
    return str(status.get("heldTime") or status.get("completionTime") or "")


def result_of(record: Mapping[str, Any] | None) -> tuple[str, str]:
    """A started pod's (scope state, reason) from its finished (or Held) record; None: absent,
    so the pod failed Interrupted (its server stopped before storing it)."""
    if record is None:
        return scope.FAILED, records.INTERRUPTED
    if record["status"]["phase"] == records.SUCCEEDED:
        return scope.SUCCEEDED, records.COMPLETED
    if is_held(record):
        return scope.SUCCEEDED, HELD
    return scope.FAILED, record["status"].get("reason") or records.INTERRUPTED
