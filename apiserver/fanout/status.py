"""A Notification's status, built without I/O from what its run knows: the conditions
(PodsSkipped, WaitingForPods, Quiesced, WaitingForNotification, and the final Complete or
Failed) and their messages. A condition's lastTransitionTime changes only when its status
does (Kubernetes' convention)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from apiserver.api.types import (
    CONDITION_PODS_SKIPPED,
    CONDITION_QUIESCED,
    CONDITION_TYPES,
    CONDITION_WAITING_FOR_NOTIFICATION,
    CONDITION_WAITING_FOR_PODS,
)
from apiserver.fanout import scope
from apiserver.fanout.reasons import (
    ALL_PODS_QUIESCED,
    NO_POD_WAITING,
    NO_PODS_SELECTED,
    NOT_DECLARED,
    OTHER_NOTIFICATION_QUIESCING,
    PODS_JOINED,
    RELEASED,
    RELEASED_AFTER_MAX_HOLD,
)
from apiserver.fanout.scope import ScopedPod
from apiserver.notifier import records
from apiserver.notifier.errors import RunConflict

MAX_PODS_IN_MESSAGE = 5
MAX_REASONS_IN_MESSAGE = 5


@dataclass(frozen=True)
class RunFacts:
    """What a run knows that its status shows: its pods, its window (None without
    spec.release) and the pods that met another Notification or run."""

    notifier: str
    pods: Collection[ScopedPod]
    window: Mapping[str, str] | None = None
    rollback: bool = False
    """Whether the spec has a rollback notifier (the final message counts rollbacks)."""
    waiting: Mapping[str, str] = field(default_factory=dict)
    """Pod -> the Notification it waits for (concurrencyPolicy Wait)."""
    conflicts: Mapping[str, str] = field(default_factory=dict)
    """Pod -> the Notification that was quiescing it (Forbid)."""
    run_conflicts: Mapping[str, str] = field(default_factory=dict)
    """Pod -> the record of the same notifier that was unfinished on it (RunConflict)."""
    now: str = field(default_factory=records.now)
    """When the facts hold: the lastTransitionTime of a condition that changes now (a run
    gives its clock's time, `run_base.status_time`)."""

    def counts(self) -> dict[str, int]:
        return scope.counts(list(self.pods), released=self.window is not None)


def waiting_for_pods(namespace: str, selector: str, now: str) -> dict[str, Any]:
    """The condition of an AllPods Notification created (at `now`) with no pod in scope; the
    run sets it False (PodsJoined) when its first pod joins."""
    return {"type": CONDITION_WAITING_FOR_PODS, "status": "True", "reason": NO_PODS_SELECTED,
            "message": f'no pod in namespace "{namespace}" matches {selector or "{}"} yet; '
                       "pods are notified as they start running",
            "lastTransitionTime": now}


def condition_now(current: Mapping[str, Any] | None, kind: str, reason: str, message: str, *,
                  now: str, status: str = "True") -> dict[str, Any]:
    """Condition `kind` as it is `now`; its lastTransitionTime is kept from `current` unless
    the status changes."""
    since = (current["lastTransitionTime"] if current is not None
             and current.get("status") == status else now)
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


def _some(names: list[str]) -> str:
    """The first MAX_PODS_IN_MESSAGE names, and how many more."""
    return ", ".join(names[:MAX_PODS_IN_MESSAGE]) + (
        f" and {len(names) - MAX_PODS_IN_MESSAGE} more" if len(names) > MAX_PODS_IN_MESSAGE
        else "")


def conditions(stored: list[dict[str, Any]], facts: RunFacts) -> list[dict[str, Any]]:
    """The `stored` conditions with PodsSkipped, WaitingForPods, Quiesced and
    WaitingForNotification brought up to date; the final one (Complete or Failed) first."""
    current = {c["type"]: c for c in stored}
    skipped = [p.pod for p in facts.pods if p.state == scope.SKIPPED]
    if skipped:
        current[CONDITION_PODS_SKIPPED] = condition_now(
            current.get(CONDITION_PODS_SKIPPED), CONDITION_PODS_SKIPPED, NOT_DECLARED,
            f"{len(skipped)} of {len(facts.pods)} pods do not declare notifier "
            f'"{facts.notifier}" and were skipped: {_some(skipped)}', now=facts.now)
    waiting = current.get(CONDITION_WAITING_FOR_PODS)
    if waiting is not None and waiting["status"] == "True" and facts.pods:
        current[CONDITION_WAITING_FOR_PODS] = condition_now(
            waiting, CONDITION_WAITING_FOR_PODS, PODS_JOINED,
            f"the first pods joined; {len(facts.pods)} in scope", now=facts.now,
            status="False")
    quiesced = quiesced_condition(current.get(CONDITION_QUIESCED), facts)
    if quiesced is not None:
        current[CONDITION_QUIESCED] = quiesced
    waiting_for = waiting_condition(current.get(CONDITION_WAITING_FOR_NOTIFICATION), facts)
    if waiting_for is not None:
        current[CONDITION_WAITING_FOR_NOTIFICATION] = waiting_for
    return sorted(current.values(), key=lambda c: c["type"] not in CONDITION_TYPES)


def waiting_condition(current: Mapping[str, Any] | None, facts: RunFacts
                      ) -> dict[str, Any] | None:
    """WaitingForNotification: True while pods wait for other Notifications (Wait), False
    once none does; None if no pod ever waited."""
    if facts.waiting:
        names = _some([f'{pod} for notification "{other}"'
                       for pod, other in facts.waiting.items()])
        count = len(facts.waiting)
        return condition_now(
            current, CONDITION_WAITING_FOR_NOTIFICATION, OTHER_NOTIFICATION_QUIESCING,
            f"{count} pod{'s' if count != 1 else ''} wait{'' if count != 1 else 's'} for "
            f'another Notification quiescing {"them" if count != 1 else "it"} with '
            f'notifier "{facts.notifier}" to release '
            f"{'them' if count != 1 else 'it'} (concurrencyPolicy Wait): {names}",
            now=facts.now)
    if current is not None and current.get("status") == "True":
        return condition_now(current, CONDITION_WAITING_FOR_NOTIFICATION, NO_POD_WAITING,
                             "no pod waits for another Notification", now=facts.now,
                             status="False")
    return None


def quiesced_condition(current: Mapping[str, Any] | None, facts: RunFacts
                       ) -> dict[str, Any] | None:
    """Quiesced: True while the window is open, False once the release started."""
    window = facts.window
    if window is None:
        return None
    total = sum(p.state != scope.SKIPPED for p in facts.pods)
    if window.get("releaseTime"):
        why = window.get("releaseReason", "")
        reason = RELEASED_AFTER_MAX_HOLD if why == RELEASED_AFTER_MAX_HOLD else RELEASED
        return condition_now(current, CONDITION_QUIESCED, reason, (
            f"released ({why}) at {window['releaseTime']}: "
            + (f"every pod was quiesced from {window['quiescedTime']}"
               if window.get("quiescedTime") else "not every pod was quiesced")),
            now=facts.now, status="False")
    if window.get("quiescedTime"):
        return condition_now(current, CONDITION_QUIESCED, ALL_PODS_QUIESCED,
                             f"all {total} pods quiesced at {window['quiescedTime']}; "
                             "they stay quiesced until the release", now=facts.now)
    return None


def final_condition(outcome: str, reason: str, detail: str, facts: RunFacts
                    ) -> dict[str, Any]:
    """Complete or Failed, with a message that counts the pods and says why."""
    counts = facts.counts()
    again = [p.pod for p in facts.pods if p.may_have_run_twice]
    released = (f"; released {counts['released']} of {counts['succeeded']}"
                if facts.window is not None else "") + (
        f"; {len(again)} may have run their release or rollback twice (an attempt was "
        f"interrupted, then run again): {_some(again)}" if again else "")
    if outcome == scope.OUTCOME_SUCCEEDED:
        message = (f"{counts['succeeded']} pods succeeded, {counts['skipped']} skipped"
                   + released)
        return {"type": "Complete", "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": facts.now}
    if reason == NOT_DECLARED:
        message = (f'no pod declared notifier "{facts.notifier}" when its turn came: '
                   f"{counts['skipped']} of {counts['total']} pods skipped")
        return {"type": "Failed", "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": facts.now}
    why = Counter(p.reason for p in facts.pods if p.state == scope.FAILED)
    reasons = ", ".join(f"{r}: {n}" for r, n in why.most_common(MAX_REASONS_IN_MESSAGE))
    message = (f"{counts['failed']} of {counts['total']} pods failed"
               + (f" ({reasons})" if reasons else "")
               + (f"; {counts['pending']} not started" if counts["pending"] else "")
               + (f"; rolled back {counts['rolledBack']}" if facts.rollback else "")
               + released)
    conflicts = [f"{pod} by {other}" for pod, other in facts.conflicts.items()]
    if conflicts:
        message += ("; being quiesced by another Notification: "
                    + ", ".join(conflicts[:MAX_PODS_IN_MESSAGE]))
    running = [f"{p.pod} (podnotifier {facts.run_conflicts[p.pod]})"
               for p in facts.pods if p.state == scope.FAILED
               and p.reason == RunConflict.__name__ and p.pod in facts.run_conflicts]
    if running:
        message += (f'; notifier "{facts.notifier}" was already running on: '
                    + ", ".join(running[:MAX_PODS_IN_MESSAGE]))
    if detail:
        message = f"{detail}; {message}"
    return {"type": "Failed", "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": facts.now}


def keep_release_request(stored: Mapping[str, Any] | None, status: dict[str, Any]
                         ) -> dict[str, Any]:
    """`status` with the releaseRequestedTime that the release action (on any replica) wrote
    to the stored object, if the run has not heard of it yet."""
    requested = ((stored or {}).get("window") or {}).get("releaseRequestedTime")
    if not requested or "window" not in status or "releaseRequestedTime" in status["window"]:
        return status
    return {**status, "window": {**status["window"], "releaseRequestedTime": requested}}
