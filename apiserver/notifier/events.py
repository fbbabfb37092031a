"""The Events this server records (events.k8s.io/v1; written by `apiserver.kube.events`).

A PodNotifier run that ends records two Events with the same reason and note: one regarding the
Pod (related: the record), which `kubectl events --for pod/X` and `kubectl describe pod X` show,
and one regarding the PodNotifier record (related: the Pod), which
`kubectl describe podnotifier X` shows (kubectl lists the Events whose involvedObject, that is
`regarding`, is the described object; it never looks at `related`).

Reasons: `Notified` (Normal), `NotifierFailed` and `NotifierTimedOut` (Warning). The note names
the notifier, each container with its exit code (or the reason it has none), the duration and
the record; never the output tails, which may hold anything the notifier printed.

A Notification records `Started`, `PodFailed` (one series per failure reason, counting the pods:
not one Event per pod), `Completed` (Normal) or `Failed` (Warning) when it ends, and
`RolledBack` (Normal, or Warning when a rollback failed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from apiserver.api.resources import GROUP_VERSION
from apiserver.api.tables import run_length
from apiserver.kube.events import NORMAL, WARNING, EventSink, ObjectRef, Occurrence
from apiserver.notifier import records
from apiserver.notifier.exec_protocol import ExecReason
from apiserver.timestamps import parse_timestamp

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "notifier.x-k8s.io/container-notifier"

NOTIFIED, NOTIFIER_FAILED, NOTIFIER_TIMED_OUT = "Notified", "NotifierFailed", "NotifierTimedOut"
STARTED, POD_FAILED, COMPLETED, FAILED = "Started", "PodFailed", "Completed", "Failed"
ROLLED_BACK = "RolledBack"
NOTIFY, ROLLBACK = "Notify", "Rollback"
"""Actions."""
NOTIFICATION_KIND = "Notification"
MAX_CONTAINERS_IN_NOTE = 10


def pod_ref(record: Mapping[str, Any]) -> ObjectRef:
    spec = record["spec"]
    return ObjectRef("v1", "Pod", record["metadata"]["namespace"], spec["podName"],
                     spec.get("podUID", ""))


def record_ref(record: Mapping[str, Any]) -> ObjectRef:
    meta = record["metadata"]
    return ObjectRef(records.API_VERSION, records.KIND, meta["namespace"], meta["name"],
                     meta.get("uid", ""))


def notification_ref(namespace: str, name: str, uid: str) -> ObjectRef:
    return ObjectRef(GROUP_VERSION, NOTIFICATION_KIND, namespace, name, uid)


def run_reason(status: Mapping[str, Any]) -> str:
    if status.get("phase") == records.SUCCEEDED:
        return NOTIFIED
    if status.get("reason") == ExecReason.TIMEOUT or any(
            c.get("reason") == ExecReason.TIMEOUT for c in status.get("containers", [])):
        return NOTIFIER_TIMED_OUT
    return NOTIFIER_FAILED


def run_note(record: Mapping[str, Any]) -> str:
    """What a finished run did, from its record: never its output or messages."""
    status = record.get("status", {})
    containers = status.get("containers", [])
    parts = []
    for container in containers[:MAX_CONTAINERS_IN_NOTE]:
        outcome = (f"exit code {container['exitCode']}" if "exitCode" in container
                   else container.get("reason") or container.get("phase", ""))
        parts.append(f"{container['name']}: {outcome}")
    if len(containers) > MAX_CONTAINERS_IN_NOTE:
        parts.append(f"and {len(containers) - MAX_CONTAINERS_IN_NOTE} more")
    started = parse_timestamp(status.get("startTime"))
    ended = parse_timestamp(status.get("completionTime"))
    took = f" in {run_length(ended - started)}" if started is not None and ended is not None else ""
    verdict = ("succeeded" if status.get("phase") == records.SUCCEEDED
               else f"failed ({status.get('reason') or 'Failed'})")
    return (f"notifier {record['spec']['notifier']} {verdict}{took}; containers: "
            f"{', '.join(parts) or 'none'}; PodNotifier {record['metadata']['name']}")


class RunEvents:
    """The Events of finished PodNotifier runs (see the module docstring)."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def run_finished(self, record: Mapping[str, Any]) -> None:
        """Emit the run's Events; never raises (an Event is never worth failing a run)."""
        try:
            reason = run_reason(record.get("status", {}))
            note = run_note(record)
            pod, podnotifier = pod_ref(record), record_ref(record)
        except Exception:
            log.exception("describing a finished run as an Event failed; no Event recorded",
                          extra={"podnotifier": record.get("metadata", {}).get("name", "")})
            return
        kind = NORMAL if reason == NOTIFIED else WARNING
        self._sink.emit(Occurrence(pod, kind, reason, NOTIFY, note, related=podnotifier))
        self._sink.emit(Occurrence(podnotifier, kind, reason, NOTIFY, note, related=pod))


class NotificationEvents:
    """The Events of a Notification's run, regarding the Notification."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def started(self, notification: ObjectRef, notifier: str, pods: int) -> None:
        self._sink.emit(Occurrence(notification, NORMAL, STARTED, NOTIFY,
                                   f"notifying {pods} pods with notifier {notifier}"))

    def pod_failed(self, notification: ObjectRef, pod: str, reason: str) -> None:
        """One series per failure reason: its count is how many pods failed so; the note
        names the first."""
        note = (f"pods failed with reason {reason} (the first: {pod}); this Event's count is "
                f"how many; see status.counts and the PodNotifier records labelled "
                f"{records.NOTIFICATION_LABEL}={notification.name}")
        self._sink.emit(Occurrence(notification, WARNING, POD_FAILED, NOTIFY, note,
                                   note_class=reason))

    def finished(self, notification: ObjectRef, phase: str, reason: str, message: str) -> None:
        succeeded = phase == records.SUCCEEDED
        self._sink.emit(Occurrence(
            notification, NORMAL if succeeded else WARNING, COMPLETED if succeeded else FAILED,
            NOTIFY, f"{phase} ({reason}): {message}"))

    def rolled_back(self, notification: ObjectRef, notifier: str, done: int, failed: int
                    ) -> None:
        self._sink.emit(Occurrence(
            notification, WARNING if failed else NORMAL, ROLLED_BACK, ROLLBACK,
            f"rollback notifier {notifier} succeeded on {done} pods, failed on {failed}"))
