"""The Events this server records (events.k8s.io/v1; written by `apiserver.kube.events`).

A PodNotifier run that ends records one occurrence regarding the Pod, with no related object,
which `kubectl events --for pod/X` and `kubectl describe pod X` show. Runs of one notifier asked
by one requester (the record's `spec.requestedBy.username`, for a Notification's runs whatever
the record says) on one pod that end with the same reason are one series: one Event whose
`series.count` is how many such runs, patched at most once per series interval with the latest
run's note. Nothing regards the PodNotifier record of an ordinary run: its own status is the
run's result.

A held notifier's run records `Held` when its record becomes Held, and when it ends `Released`
(Normal) or `HoldExpired` (Warning) instead of `Notified`/`NotifierFailed` (any other end of a
hold is a `NotifierFailed` as before): each regarding the Pod (a series per notifier and
requester, as above) and regarding the PodNotifier record, whose `kubectl events --for` then
tells the hold's story. Held runs are rare and long, so the two Events per step cost little;
ordinary runs still write nothing on their records.

Reasons: `Notified` (Normal), `NotifierFailed` and `NotifierTimedOut` (Warning). The note names
the notifier, the requester, the outcome, the duration, the latest record and each container
with its exit code (or the reason it has none); never the output tails, which may hold anything
the notifier printed.

A Notification records `Started`, `PodFailed` (one series per failure reason, counting the pods:
not one Event per pod; the note names the latest), `Completed` (Normal) or `Failed` (Warning)
when it ends, and `RolledBack` (Normal, or Warning when a rollback failed); with a quiesce window
(spec.release), `Quiesced` when the window opens and `Unquiesced`, with its length, when it
closes.
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
HELD, RELEASED, HOLD_EXPIRED = "Held", "Released", "HoldExpired"
QUIESCED, UNQUIESCED = "Quiesced", "Unquiesced"
NOTIFY, ROLLBACK, HOLD, RELEASE = "Notify", "Rollback", "Hold", "Release"
"""Actions."""
NOTIFICATION_KIND = "Notification"
HOLD_ENDINGS = {records.RELEASED: (NORMAL, RELEASED), records.HOLD_EXPIRED: (WARNING, HOLD_EXPIRED)}
"""A held run's end reasons that have an Event reason of their own: (type, reason)."""
MAX_CONTAINERS_IN_NOTE = 10


def pod_ref(record: Mapping[str, Any]) -> ObjectRef:
    spec = record["spec"]
    return ObjectRef("v1", "Pod", record["metadata"]["namespace"], spec["podName"],
                     spec.get("podUID", ""))


def record_ref(record: Mapping[str, Any]) -> ObjectRef:
    metadata = record["metadata"]
    return ObjectRef(GROUP_VERSION, records.KIND, metadata["namespace"], metadata["name"],
                     metadata.get("uid", ""))


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
        parts.append(f"{container['name']}: {records.outcome(container)}")
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


def _held_containers(status: Mapping[str, Any]) -> str:
    parts = [f"{c['name']}: PID {c['pid']}" if "pid" in c else str(c["name"])
             for c in status.get("containers", [])[:MAX_CONTAINERS_IN_NOTE]]
    more = len(status.get("containers", [])) - MAX_CONTAINERS_IN_NOTE
    return ", ".join(parts + ([f"and {more} more"] if more > 0 else [])) or "none"


def held_note(record: Mapping[str, Any]) -> str:
    """A run that became Held: who asked, since when, its bound, how to release it; never
    its output (the record holds that, behind its own RBAC)."""
    status = record.get("status", {})
    name, namespace = record["metadata"]["name"], record["metadata"]["namespace"]
    return (f"notifier {record['spec']['notifier']} requested by {requester(record)} is held "
            f"since {status.get('heldTime', '?')} (at most maxHoldSeconds "
            f"{status.get('maxHoldSeconds', '?')}s); release it: kubectl notify -n {namespace} "
            f"release podnotifier/{name}; latest: PodNotifier {name}; containers: "
            f"{_held_containers(status)}")


def hold_end_note(record: Mapping[str, Any]) -> str:
    """A held run that ended Released or HoldExpired: by whom or why, after how long held."""
    status = record.get("status", {})
    held = parse_timestamp(status.get("heldTime"))
    ended = parse_timestamp(status.get("completionTime"))
    length = (f" after {run_length(ended - held)} held" if held is not None
              and ended is not None else "")
    if status.get("reason") == records.RELEASED:
        verdict = f"was released by {status.get('releasedBy') or 'a request'}{length}"
    else:
        verdict = (f"was not released within maxHoldSeconds ({status.get('maxHoldSeconds')}s)"
                   f"{length}: its commands were stopped")
    return (f"notifier {record['spec']['notifier']} requested by {requester(record)} "
            f"{verdict}; latest: PodNotifier {record['metadata']['name']}; containers: "
            f"{_stopped_containers(status)}")


def _stopped_containers(status: Mapping[str, Any]) -> str:
    parts = [f"{c['name']}: {c.get('stopped') or c.get('reason') or c.get('phase', '')}"
             for c in status.get("containers", [])[:MAX_CONTAINERS_IN_NOTE]]
    more = len(status.get("containers", [])) - MAX_CONTAINERS_IN_NOTE
    return ", ".join(parts + ([f"and {more} more"] if more > 0 else [])) or "none"


class RunEvents:
    """The Events of PodNotifier runs (see the module docstring)."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def run_finished(self, record: Mapping[str, Any]) -> None:
        """Emit the run's occurrence (a held run's Released or HoldExpired also regarding its
        record); never raises (an Event is never worth failing a run)."""
        try:
            status = record.get("status", {})
            ending = (HOLD_ENDINGS.get(str(status.get("reason")))
                      if records.is_held_notifier(record) else None)
            if ending is not None:
                self._hold_step(record, *ending, RELEASE, hold_end_note(record))
                return
            reason = run_reason(status)
            occurrence = Occurrence(pod_ref(record), NORMAL if reason == NOTIFIED else WARNING,
                                    reason, NOTIFY, run_note(record),
                                    note_class=run_series_class(record))
        except Exception:
            log.exception("describing a finished run as an Event failed; no Event recorded",
                          extra={"podnotifier": record.get("metadata", {}).get("name", "")})
            return
        self._sink.emit(occurrence)

    def held(self, record: Mapping[str, Any]) -> None:
        """The run's record became Held: `Held` on the pod and on the record; never raises."""
        try:
            self._hold_step(record, NORMAL, HELD, HOLD, held_note(record))
        except Exception:
            log.exception("describing a held run as an Event failed; no Event recorded",
                          extra={"podnotifier": record.get("metadata", {}).get("name", "")})

    def _hold_step(self, record: Mapping[str, Any], kind: str, reason: str, action: str,
                   note: str) -> None:
        pod = Occurrence(pod_ref(record), kind, reason, action, note,
                         note_class=run_series_class(record))
        on_record = Occurrence(record_ref(record), kind, reason, action, note)
        self._sink.emit(pod)
        self._sink.emit(on_record)


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

    def quiesced(self, notification: ObjectRef, notifier: str, pods: int, at: str) -> None:
        """The quiesce window opened: every pod is quiesced."""
        self._sink.emit(Occurrence(
            notification, NORMAL, QUIESCED, NOTIFY,
            f"the window is open: all {pods} pods quiesced with notifier {notifier} at {at}; "
            "they stay quiesced until the release"))

    def unquiesced(self, notification: ObjectRef, reason: str, quiesced: str | None,
                   unquiesced: str, released: int, failed: int) -> None:
        """The window closed (its pods released): why, and how long it was open."""
        opened, closed = parse_timestamp(quiesced), parse_timestamp(unquiesced)
        length = (f"the window was open {run_length(closed - opened)} (from {quiesced} to "
                  f"{unquiesced})" if opened is not None and closed is not None
                  else "not every pod was quiesced, so no window opened")
        self._sink.emit(Occurrence(
            notification, WARNING if failed else NORMAL, UNQUIESCED, RELEASE,
            f"released ({reason}): {length}; {released} pods released, {failed} failed"))

    def rolled_back(self, notification: ObjectRef, notifier: str, done: int, failed: int
                    ) -> None:
        self._sink.emit(Occurrence(
            notification, WARNING if failed else NORMAL, ROLLED_BACK, ROLLBACK,
            f"rollback notifier {notifier} succeeded on {done} pods, failed on {failed}"))
