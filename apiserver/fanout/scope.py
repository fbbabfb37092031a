"""A Notification's fan-out state in the server's storage: its pod set and the decisions taken.

Kept out of the Notification object so that no object grows with the pod count, in two private
resources of whatever backend stores the records (``registry.store.ObjectStore``: SQLite, or
storage custom resources in kube-apiserver), in the Notification's namespace:

- a *run* (``NOTIFICATION_RUNS``, named by the Notification's UID): the spec (a rollback after
  the object was deleted still knows what to run, for whom), why no pod may start any more
  (``stopped``: FailFast, DeadlineExceeded, Deleted), the outcome once decided (Succeeded, or
  Failed: rollback is due), whether the final status was stored, and how many pod sets it has;
- *pod sets* (``NOTIFICATION_POD_SETS``, named ``<uid>-<index>``), each at most
  ``POD_SET_SIZE`` pods in the order they joined, like EndpointSlices. A pod's fan-out
  ``state`` only moves forward, pending -> succeeded | failed | skipped; its start is not stored
  here but by its record, whose name is known before it is created (``started`` is the state of
  a pod whose record exists and has no result yet: in memory, and in pod sets an older release
  wrote). Rollback has its own outcome (done | failed, once the run's outcome is Failed:
  ``rollback_due``; its attempts are claimed by their records too) and record, never touching
  the pod's; so has the release of a quiesce window (spec.release, once the window ended:
  ``release_due``). Nothing is written to make them due (``pending`` and ``started`` are only
  found in pod sets an older release wrote, and count as due).

With spec.release the run also holds its quiesce window (``ScopeRun.window``): when every pod
was quiesced, when a release was requested (by whichever replica got the request), and why and
when the window ended (after which release is due), each stored once.

Persisted by ``ScopeStore`` (apiserver/fanout/scope_store.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from apiserver.fanout.spec import stored_spec
from apiserver.registry.decoding import (
    Malformed,
    boolean,
    decoded,
    integer,
    listing,
    mapping,
    optional_integer,
    optional_text,
    string_map,
    text,
)
from apiserver.registry.objects import metadata
from apiserver.registry.resources import NOTIFICATION_POD_SETS, NOTIFICATION_RUNS
from apiserver.registry.store import Object

PENDING, STARTED = "pending", "started"
SUCCEEDED, FAILED, SKIPPED = "succeeded", "failed", "skipped"
FINAL_STATES = (SUCCEEDED, FAILED, SKIPPED)

ROLLBACK_DONE, ROLLBACK_FAILED = "done", "failed"
ROLLBACK_FINAL = (ROLLBACK_DONE, ROLLBACK_FAILED)

RELEASE_DONE, RELEASE_FAILED = "done", "failed"
RELEASE_FINAL = (RELEASE_DONE, RELEASE_FAILED)

OUTCOME_SUCCEEDED, OUTCOME_FAILED = "Succeeded", "Failed"

POD_SET_SIZE = 100
"""Pods per pod set object (EndpointSlice's default): bounds every object's size."""
STORE_HISTORY = 100
"""Changes a backend needs to keep of the scope's resources (kube-apiserver's default watch
cache size): nobody pages their lists, and the one watch (the leader's of release requests)
starts from now. On Kubernetes this is the window of the cache, which holds every superseded
version of a pod set (about 60 KiB of memory each): 1000 cost the leader of a 5000-pod run
about 55 MiB."""


@dataclass(frozen=True)
class ScopedPod:
    pod: str
    pod_uid: str
    state: str
    record: str = ""
    """The PodNotifier of the pod's run (named before it is created)."""
    reason: str = ""
    rollback: str = ""
    rollback_record: str = ""
    rollback_attempts: int = 0
    release: str = ""
    """With spec.release: done | failed once released (``release_due`` until then), with the
    deciding attempt's release_record and number (an interrupted attempt is followed by the
    next)."""
    release_record: str = ""
    release_attempts: int = 0

    @property
    def rollback_due(self) -> bool:
        """Once the run's outcome is Failed (and the spec has a rollback notifier): its
        notifier succeeded, and its rollback has no outcome yet."""
        return self.state == SUCCEEDED and self.rollback not in ROLLBACK_FINAL

    @property
    def release_due(self) -> bool:
        """Once the quiesce window ended: it was quiesced, and its release has no outcome
        yet."""
        return self.state == SUCCEEDED and self.release not in RELEASE_FINAL

    @property
    def may_have_run_twice(self) -> bool:
        """An undo step (rollback or release) ran again after an interrupted attempt, whose
        command may have run to its end in the container too."""
        return self.rollback_attempts > 1 or self.release_attempts > 1

    @classmethod
    def of(cls, entry: dict[str, Any], path: str = "pods[]") -> ScopedPod:
        """A pod set's entry at `path`; ``Malformed`` unless ``pod``, ``podUID`` and ``state``
        are strings and the optional fields have their types."""
        found = mapping(entry, path)

        def optional_field(key: str) -> str:
            return optional_text(found.get(key), f"{path}.{key}")

        return cls(text(found.get("pod"), f"{path}.pod"), text(found.get("podUID"),
                                                               f"{path}.podUID"),
                   text(found.get("state"), f"{path}.state"), optional_field("record"),
                   optional_field("reason"), optional_field("rollback"),
                   optional_field("rollbackRecord"),
                   optional_integer(found.get("rollbackAttempts"),
                                    f"{path}.rollbackAttempts"),
                   optional_field("release"), optional_field("releaseRecord"),
                   optional_integer(found.get("releaseAttempts"), f"{path}.releaseAttempts"))


@dataclass(frozen=True)
class PodSet:
    """One pod set object, decoded."""

    notification_uid: str
    index: int
    pods: tuple[ScopedPod, ...]

    @classmethod
    def of(cls, obj: Object) -> PodSet:
        """The kind's decoder: ``MalformedObject`` unless ``spec`` holds the string
        ``notificationUID`` and the integer ``index``, and
        ``pods`` is a list of entries (``ScopedPod.of``) with distinct ``podUID``s."""
        return decoded(NOTIFICATION_POD_SETS, obj, _pod_set)


def _pod_set(obj: Object) -> PodSet:
    spec = mapping(obj.get("spec"), "spec")
    pods = tuple(ScopedPod.of(entry, f"pods[{i}]")
                 for i, entry in enumerate(listing(obj.get("pods"), "pods")))
    if len({pod.pod_uid for pod in pods}) != len(pods):
        raise Malformed("pods lists a podUID twice")
    return PodSet(text(spec.get("notificationUID"), "spec.notificationUID"),
                  integer(spec.get("index"), "spec.index"), pods)


@dataclass(frozen=True)
class ScopeRun:
    """The run of one Notification."""

    notification_uid: str
    namespace: str
    name: str
    spec: dict[str, Any]
    stopped: str = ""
    """Why no pod may start any more, or empty."""
    outcome: str = ""
    """OUTCOME_SUCCEEDED or OUTCOME_FAILED once decided (Failed: rollback is due)."""
    outcome_reason: str = ""
    finished: bool = False
    """The final status was stored."""
    window: dict[str, str] = field(default_factory=dict)
    """With spec.release, the quiesce window as decided (the names of status.window):
    quiescedTime, releaseRequestedTime (by any replica), releaseReason and releaseTime (the
    window ended: release is due), unquiescedTime. Each is written once."""

    pod_sets: int = 0
    """How many pod sets it has."""

    @classmethod
    def of(cls, obj: Object) -> ScopeRun:
        """The kind's decoder: ``MalformedObject`` unless ``spec`` holds the string
        ``notificationName`` and the object ``notification``, and ``status`` the integer
        ``podSets`` (not negative), the strings ``stopped``, ``outcome``, ``outcomeReason``, the
        boolean ``finished`` and the optional map of strings ``window``."""
        return decoded(NOTIFICATION_RUNS, obj, _scope_run)


def _scope_run(obj: Object) -> ScopeRun:
    meta = metadata(obj)
    spec, status = mapping(obj.get("spec"), "spec"), mapping(obj.get("status"), "status")
    pod_sets = integer(status.get("podSets"), "status.podSets")
    if pod_sets < 0:
        raise Malformed(f"status.podSets must not be negative, not {pod_sets}")
    return ScopeRun(text(meta.get("name"), "metadata.name"),
                    text(meta.get("namespace"), "metadata.namespace"),
                    text(spec.get("notificationName"), "spec.notificationName"),
                    stored_spec(spec.get("notification"), "spec.notification"),
                    text(status.get("stopped"), "status.stopped"),
                    text(status.get("outcome"), "status.outcome"),
                    text(status.get("outcomeReason"), "status.outcomeReason"),
                    boolean(status.get("finished"), "status.finished"),
                    string_map(status.get("window"), "status.window"), pod_sets)


def pod_set_name(notification_uid: str, index: int) -> str:
    return f"{notification_uid}-{index}"


def counts(pods: list[ScopedPod], *, released: bool = False) -> dict[str, int]:
    """The Notification's status.counts from its scope; `released` (a Notification with
    spec.release) adds the count of pods released successfully; mayHaveRunTwice, when not 0,
    the pods whose undo step ran again after an interrupted attempt."""
    states = Counter(p.state for p in pods)
    found = {
        "total": len(pods),
        "pending": states[PENDING],
        "running": states[STARTED],
        "succeeded": states[SUCCEEDED],
        "failed": states[FAILED],
        "skipped": states[SKIPPED],
        "rolledBack": sum(p.rollback == ROLLBACK_DONE for p in pods),
    }
    if released:
        found["released"] = sum(p.release == RELEASE_DONE for p in pods)
    again = sum(p.may_have_run_twice for p in pods)
    if again:  # omitted when 0, as a Go API type's omitempty count
        found["mayHaveRunTwice"] = again
    return found
