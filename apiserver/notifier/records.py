"""PodNotifier records: the object a notify request creates, and how its status evolves.

Pure functions over JSON-shaped dicts, so that the runner, the handler and restart recovery
write statuses the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apiserver.api.resources import GROUP_VERSION
from apiserver.api.types import CONDITION_COMPLETE, CONDITION_FAILED, FINISHED_PHASES, Phase
from apiserver.api.validation import label_value_errors
from apiserver.authn.user import UserInfo
from apiserver.notifier.exec_protocol import OutputTail
from apiserver.notifier.exec_stream import ExecResult, OutputTails
from apiserver.notifier.http_action import HttpResult
from apiserver.registry.decoding import (
    decoded,
    mapping,
    optional_integer,
    optional_listing,
    optional_mapping,
    optional_text,
    public_object,
    text,
)
from apiserver.registry.resources import PODNOTIFIERS

API_VERSION = GROUP_VERSION
KIND = "PodNotifier"
POD_LABEL = "notifier.x-k8s.io/pod"
NOTIFICATION_LABEL = "notifier.x-k8s.io/notification"

PENDING, RUNNING, SUCCEEDED, FAILED = Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED
HELD = Phase.HELD

COMPLETED = "Completed"
INTERRUPTED = "Interrupted"
POD_DELETED = "PodDeleted"
POD_NOT_RUNNING = "PodNotRunning"
CONTAINER_NOT_RUNNING = "ContainerNotRunning"
RELEASED = "Released"
"""A held notifier's command was stopped on a release request."""
HOLD_EXPIRED = "HoldExpired"
"""Nobody released it within maxHoldSeconds of heldTime."""
HOLD_ENDED = "HoldEnded"
"""A held command exited on its own while held: what it held (a lock) ended early."""
NOT_READY = "NotReady"
"""A held notifier's command ended (or another container's failed) before every container was
ready."""
STOP_FAILED = "StopFailed"
"""A held command could not be stopped when its hold ended: it may still run."""
INTERRUPTED_MESSAGE = ("the server stopped while this notifier ran; it may or may not have "
                       "completed in the container")

_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


def now() -> str:
    return rfc3339(datetime.now(UTC))


def rfc3339(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds: run times are often under a second, so status times
    keep milliseconds (metav1.Time parsers accept fractional seconds)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generate_name(pod: str, notifier: str) -> str:
    """`<pod>-<notifier>-`, made a valid name prefix (the store appends 5 characters)."""
    safe = _NAME_UNSAFE.sub("-", notifier.rsplit("/", 1)[-1].lower()).strip("-") or "notify"
    return f"{pod[:200].rstrip('.')}-{safe[:40]}-"


def pod_label(pod: str) -> dict[str, str]:
    """The `notifier.x-k8s.io/pod` label, when the pod name fits a label value (63 chars).

    Longer pod names are found with the field selector spec.podName instead."""
    if not label_value_errors(pod):
        return {POD_LABEL: pod}
    return {}


@dataclass(frozen=True)
class RecordRequest:
    """What a validated notify request asks for."""

    namespace: str
    pod: str
    pod_uid: str
    notifier: str
    containers: Sequence[str]
    """The containers that will run it (those that declare it, or the requested subset)."""
    requested_containers: Sequence[str] | None
    timeout_seconds: int | None
    ttl_seconds_after_finished: int
    name: str
    generate_name: str
    labels: Mapping[str, str]
    requested_by: UserInfo
    max_hold_seconds: int | None = None
    """Set for a held notifier: the longest its command stays held."""


def new_record(request: RecordRequest) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": request.namespace,
                                "labels": {**request.labels, **pod_label(request.pod)}}
    if request.name:
        metadata["name"] = request.name
    else:
        metadata["generateName"] = request.generate_name or generate_name(request.pod,
                                                                          request.notifier)
    spec: dict[str, Any] = {
        "podName": request.pod,
        "podUID": request.pod_uid,
        "notifier": request.notifier,
        "ttlSecondsAfterFinished": request.ttl_seconds_after_finished,
        "requestedBy": {"username": request.requested_by.name,
                        "uid": request.requested_by.uid,
                        "groups": list(request.requested_by.groups)},
    }
    if request.requested_containers:
        spec["containers"] = list(request.requested_containers)
    if request.timeout_seconds is not None:
        spec["timeoutSeconds"] = request.timeout_seconds
    status: dict[str, Any] = {
        "phase": PENDING,
        "containers": [{"name": c, "phase": PENDING} for c in request.containers],
    }
    if request.max_hold_seconds is not None:
        status["maxHoldSeconds"] = request.max_hold_seconds
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec,
            "status": status}


def is_held_notifier(record: Mapping[str, Any]) -> bool:
    """Whether the record is a held notifier's run (its status has ``maxHoldSeconds``)."""
    return isinstance(record.get("status", {}).get("maxHoldSeconds"), int)


def mark_held(record: dict[str, Any], at: str, pids: Mapping[str, int | None],
              outputs: Mapping[str, OutputTails] | None = None) -> dict[str, Any]:
    """Every container's command is ready: the record and those containers are Held since
    ``at``, each with the PID of its command (so that any replica can stop it) and, from
    ``outputs``, its output tails so far (what it printed before it was ready: e.g. the LSN
    a backup needs while the lock is held)."""
    status = record.setdefault("status", {})
    status["phase"] = HELD
    status["heldTime"] = at
    for container in status.get("containers", []):
        if container["name"] in pids:
            container["phase"] = HELD
            container["heldTime"] = at
            pid = pids[container["name"]]
            if pid is not None:
                container["pid"] = pid
            tails = (outputs or {}).get(container["name"])
            if tails is not None:
                container.update(_tails(tails.stdout, tails.stderr))
    return record


def _tails(stdout: OutputTail, stderr: OutputTail) -> dict[str, Any]:
    return {"stdout": _text(stdout.value()), "stderr": _text(stderr.value()),
            "stdoutTruncated": stdout.truncated, "stderrTruncated": stderr.truncated}


def _text(output: bytes) -> str:
    return output.decode("utf-8", errors="replace")


def request_release(record: dict[str, Any], at: str, by: str) -> dict[str, Any]:
    """Store a release request (the first one counts; later ones change nothing)."""
    status = record.setdefault("status", {})
    if "releaseRequestedTime" not in status:
        status["releaseRequestedTime"] = at
        status["releaseRequestedBy"] = by
    return record


def release_requested(record: Mapping[str, Any]) -> str | None:
    """Who requested the release of the record's hold, if anyone did ("" if unnamed)."""
    status = record.get("status", {})
    if "releaseRequestedTime" not in status:
        return None
    return str(status.get("releaseRequestedBy", ""))


def mark_released(record: dict[str, Any], at: str, by: str) -> dict[str, Any]:
    status = record.setdefault("status", {})
    status["releasedTime"] = at
    status["releasedBy"] = by
    return record


def held_pids(record: Mapping[str, Any]) -> dict[str, int]:
    """Container name to the PID of its command, for the containers whose notifier has not
    finished and whose PID the record holds."""
    return {c["name"]: c["pid"] for c in record.get("status", {}).get("containers", [])
            if isinstance(c.get("pid"), int) and c.get("phase") not in FINISHED_PHASES}


def is_finished(record: Mapping[str, Any]) -> bool:
    return record.get("status", {}).get("phase") in FINISHED_PHASES


def mark_running(record: dict[str, Any], started: str) -> dict[str, Any]:
    status = record.setdefault("status", {})
    status["phase"] = RUNNING
    status["startTime"] = started
    for container in status.get("containers", []):
        container["phase"] = RUNNING
        container["startTime"] = started
    return record


def container_result(name: str, container_id: str, result: ExecResult) -> dict[str, Any]:
    """A `status.containers[]` entry from one exec."""
    succeeded = result.exit_code == 0
    entry: dict[str, Any] = {
        "name": name,
        "phase": SUCCEEDED if succeeded else FAILED,
        "startTime": rfc3339(result.started),
        "completionTime": rfc3339(result.finished),
        "reason": str(result.reason),
        "message": result.message,
        "stdout": _text(result.stdout),
        "stderr": _text(result.stderr),
        "stdoutTruncated": result.stdout_truncated,
        "stderrTruncated": result.stderr_truncated,
    }
    if container_id:
        entry["containerID"] = container_id
    if result.exit_code is not None:
        entry["exitCode"] = result.exit_code
    if result.stopped is not None:
        entry["stopped"] = str(result.stopped)
    return entry


def http_result(name: str, container_id: str, result: HttpResult) -> dict[str, Any]:
    """A `status.containers[]` entry from one http notifier's request."""
    entry: dict[str, Any] = {
        "name": name,
        "phase": SUCCEEDED if result.reason == result.reason.COMPLETED else FAILED,
        "startTime": rfc3339(result.started),
        "completionTime": rfc3339(result.finished),
        "reason": str(result.reason),
        "message": result.message,
    }
    if container_id:
        entry["containerID"] = container_id
    if result.status_code is not None:
        entry["statusCode"] = result.status_code
        entry["responseBody"] = _text(result.body)
        entry["responseBodyTruncated"] = result.body_truncated
    return entry


def outcome(container: Mapping[str, Any]) -> str:
    """How one container's notifier ended, in a few words: its exit code, its HTTP status
    code, else its reason (else its phase)."""
    if "exitCode" in container:
        return f"exit code {container['exitCode']}"
    if "statusCode" in container:
        return f"HTTP status {container['statusCode']}"
    return str(container.get("reason") or container.get("phase", ""))


NO_KILL_HINT = ("delivering a signal execs `kill` in the container, and it could not run there "
                "(the image may have no `kill` program); declare an exec notifier that signals "
                "the process another way")


def explain_signal_failure(entry: dict[str, Any]) -> dict[str, Any]:
    """For a signal notifier: say why it failed when `kill` itself could not run (exit code
    126 or 127, or an exec error naming the program), the common case of minimal images."""
    message = entry.get("message", "")
    missing = entry.get("exitCode") in (126, 127) or (
        entry.get("phase") == FAILED and "exitCode" not in entry and "kill" in message
        and ("not found" in message or "no such file" in message.lower()))
    if missing:
        return {**entry, "message": f"{NO_KILL_HINT}: {message}" if message else NO_KILL_HINT}
    return entry


def held_container(entry: dict[str, Any], held: Mapping[str, Any] | None, *,
                   reason: str, message: str, succeeded: bool = False) -> dict[str, Any]:
    """A held notifier's container entry from its exec's entry (``container_result``): its
    phase, reason and message as the hold ended, with ``heldTime`` and ``pid`` from its Held
    entry ``held`` (None if it never was)."""
    entry = {**entry, "phase": SUCCEEDED if succeeded else FAILED, "reason": reason,
             "message": message}
    for key in ("heldTime", "pid"):
        if held is not None and key in held:
            entry[key] = held[key]
    return entry


def container_failure(name: str, reason: str, message: str, at: str,
                      container_id: str = "") -> dict[str, Any]:
    """A `status.containers[]` entry for a container whose notifier did not run or finish."""
    entry = {"name": name, "phase": FAILED, "completionTime": at, "reason": reason,
             "message": message}
    if container_id:
        entry["containerID"] = container_id
    return entry


def set_container(record: dict[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """Replace the container's entry, keeping its startTime if the new entry has none."""
    containers = record.setdefault("status", {}).setdefault("containers", [])
    for index, existing in enumerate(containers):
        if existing["name"] == entry["name"]:
            merged = dict(entry)
            if "startTime" not in merged and "startTime" in existing:
                merged["startTime"] = existing["startTime"]
            containers[index] = merged
            return record
    containers.append(dict(entry))
    return record


def finish(record: dict[str, Any], at: str, reason: str = "", message: str = "",
           *, success: tuple[str, str] | None = None) -> dict[str, Any]:
    """Set the record's final phase from its containers.

    Succeeded if and only if every container succeeded. Unfinished containers end Failed with
    `reason` (e.g. Interrupted, PodDeleted). The record's reason is Completed on success (or
    ``success``'s reason and message, e.g. Released), else `reason` if given, else the first
    failed container's. The ``Complete`` or ``Failed`` condition is set with them
    (``kubectl wait --for=condition=Complete`` reads it).
    """
    status = record.setdefault("status", {})
    containers = status.setdefault("containers", [])
    for index, container in enumerate(containers):
        if container.get("phase") not in FINISHED_PHASES:
            containers[index] = {**container, **container_failure(
                container["name"], reason or INTERRUPTED, message or "did not finish", at)}
    failed = [c for c in containers if c.get("phase") != SUCCEEDED]
    status["completionTime"] = at
    status.setdefault("startTime", at)
    if containers and not failed:
        status["phase"] = SUCCEEDED
        status["reason"], status["message"] = success or (
            COMPLETED, f"{len(containers)}/{len(containers)} containers succeeded")
    else:
        status["phase"] = FAILED
        first = failed[0] if failed else {}
        status["reason"] = reason or first.get("reason", "")
        status["message"] = message or _failure_summary(failed, len(containers))
    status["conditions"] = [finished_condition(status)]
    return record


def finished_condition(status: Mapping[str, Any]) -> dict[str, Any]:
    """The condition of a finished run, as a Job's: ``Complete`` if it succeeded, else
    ``Failed``; status True, with the run's reason and message, at its completionTime."""
    kind = CONDITION_COMPLETE if status.get("phase") == SUCCEEDED else CONDITION_FAILED
    return {"type": kind, "status": "True", "reason": status.get("reason") or kind,
            "message": status.get("message", ""),
            "lastTransitionTime": status["completionTime"]}


def _failure_summary(failed: Sequence[Mapping[str, Any]], total: int) -> str:
    parts = []
    for container in failed[:3]:
        parts.append(f"{container['name']}: {outcome(container) or 'failed'}")
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{len(failed)}/{total} containers failed ({'; '.join(parts)}{more})"


_RECORD_TEXTS = ("phase", "reason", "message", "startTime", "heldTime", "completionTime",
                 "releaseRequestedTime", "releaseRequestedBy", "releasedTime", "releasedBy")


def decode_stored(record: dict[str, Any]) -> dict[str, Any]:
    """The decoder of stored PodNotifier records: ``MalformedObject`` unless every field the
    runner, the takeover and the collector read has its type (``spec`` an object of strings
    ``podName``, ``podUID``, ``notifier``; ``status``, if any, an object whose ``containers``
    are objects with a string ``name``)."""

    def check(found: dict[str, Any]) -> dict[str, Any]:
        public_object(found)
        spec = mapping(found.get("spec"), "spec")
        for key in ("podName", "podUID", "notifier"):
            optional_text(spec.get(key), f"spec.{key}")
        for key in ("timeoutSeconds", "ttlSecondsAfterFinished"):
            optional_integer(spec.get(key), f"spec.{key}")
        for i, name in enumerate(optional_listing(spec.get("containers"), "spec.containers")):
            text(name, f"spec.containers[{i}]")
        optional_mapping(spec.get("requestedBy"), "spec.requestedBy")
        status = optional_mapping(found.get("status"), "status")
        for key in _RECORD_TEXTS:
            optional_text(status.get(key), f"status.{key}")
        optional_integer(status.get("maxHoldSeconds"), "status.maxHoldSeconds")
        optional_listing(status.get("conditions"), "status.conditions")
        for i, item in enumerate(optional_listing(status.get("containers"), "status.containers")):
            container = mapping(item, f"status.containers[{i}]")
            text(container.get("name"), f"status.containers[{i}].name")
            optional_text(container.get("phase"), f"status.containers[{i}].phase")
            optional_integer(container.get("pid"), f"status.containers[{i}].pid")
        return found

    return decoded(PODNOTIFIERS, record, check)
