"""The Events this server records (events.k8s.io/v1; written by `apiserver.kube.events`).

A PodNotifier run that ends records one occurrence regarding the Pod, with no related object,
which `kubectl events --for pod/X` and `kubectl describe pod X` show. Runs of one notifier asked
by one requester (the record's `spec.requestedBy.username`, for a Notification's runs whatever
the record says) on one pod that end with the same reason are one series: one Event whose
`series.count` is how many such runs, patched at most once per series interval with the latest
run's note. Nothing regards the PodNotifier record: its own status is the run's result.

Reasons: `Notified` (Normal), `NotifierFailed` and `NotifierTimedOut` (Warning). The note names
the notifier, the requester, the outcome, the duration, the latest record and each container
with its exit code (or the reason it has none); never the output tails, which may hold anything
the notifier printed.

A Notification records `Started`, `PodFailed` (one series per failure reason, counting the pods:
not one Event per pod; the note names the latest), `Completed` (Normal) or `Failed` (Warning)
when it ends, and `RolledBack` (Normal, or Warning when a rollback failed).
"""

from __future__ import annotations

import json
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


def notification_ref(namespace: str, name: str, uid: str) -> ObjectRef:
    return ObjectRef(GROUP_VERSION, NOTIFICATION_KIND, namespace, name, uid)


def run_reason(status: Mapping[str, Any]) -> str:
    if status.get("phase") == records.SUCCEEDED:
        return NOTIFIED
    if status.get("reason") == ExecReason.TIMEOUT or any(
            c.get("reason") == ExecReason.TIMEOUT for c in status.get("containers", [])):
        return NOTIFIER_TIMED_OUT
    return NOTIFIER_FAILED


def requester(record: Mapping[str, Any]) -> str:
    return str(record["spec"]["requestedBy"]["username"])


def run_series_class(record: Mapping[str, Any]) -> str:
    """The note class of a run's occurrence: its notifier and requester (with the pod, the
    type, reason and action, the series key)."""
    return json.dumps([record["spec"]["notifier"], requester(record)])


def run_note(record: Mapping[str, Any]) -> str:
    """What a finished run did, from its record: never its output or messages. The containers
    come last: a note too long for the API loses its end."""
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
    return (f"notifier {record['spec']['notifier']} requested by {requester(record)} "
            f"{verdict}{took}; latest: PodNotifier {record['metadata']['name']}; the Event's "
            f"count is how many runs of this notifier by this requester ended so; containers: "
            f"{', '.join(parts) or 'none'}")


class RunEvents:
    """The Events of finished PodNotifier runs (see the module docstring)."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def run_finished(self, record: Mapping[str, Any]) -> None:
        """Emit the run's occurrence; never raises (an Event is never worth failing a run)."""
        try:
            reason = run_reason(record.get("status", {}))
            occurrence = Occurrence(pod_ref(record), NORMAL if reason == NOTIFIED else WARNING,
                                    reason, NOTIFY, run_note(record),
                                    note_class=run_series_class(record))
        except Exception:
            log.exception("describing a finished run as an Event failed; no Event recorded",
                          extra={"podnotifier": record.get("metadata", {}).get("name", "")})
            return
        self._sink.emit(occurrence)


class NotificationEvents:
    """The Events of a Notification's run, regarding the Notification."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def started(self, notification: ObjectRef, notifier: str, pods: int) -> None:
        self._sink.emit(Occurrence(notification, NORMAL, STARTED, NOTIFY,
                                   f"notifying {pods} pods with notifier {notifier}"))

    def pod_failed(self, notification: ObjectRef, pod: str, reason: str) -> None:
        """One series per failure reason: its count is how many pods failed so; the note
        names the latest."""
        note = (f"pods failed with reason {reason} (the latest: {pod}); this Event's count is "
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
