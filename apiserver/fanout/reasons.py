"""The reasons a Notification, its pods and its window end with, and how a pod's error becomes
its reason (`pod_outcome`): what `kubectl describe notification` shows and what automation
matches on (docs/notifications.md)."""

from __future__ import annotations

from apiserver.errors import APIError
from apiserver.fanout import scope
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.notifier import errors as notifier_errors
from apiserver.notifier import records
from apiserver.notifier.errors import NotDeclared, PodNotFound

NOT_DECLARED = "NotifierNotDeclared"
"""A pod's reason when it does not declare the notifier (it is skipped), the reason of the
PodsSkipped condition, and the outcome's when every pod that ran was skipped."""
NO_PODS_SELECTED, PODS_JOINED = "NoPodsSelected", "PodsJoined"
"""The reasons of WaitingForPods True (see `waiting_for_pods`) and False."""
SCOPE_NOT_RECORDED = "ScopeNotRecorded"
DELETED = "Deleted"
FAIL_FAST, PODS_FAILED, DEADLINE_EXCEEDED = "FailFast", "PodsFailed", "DeadlineExceeded"
PODS_SUCCEEDED = "PodsSucceeded"
INTERNAL_ERROR = "InternalError"
HELD = "Held"
"""A pod's reason when its quiesce record is Held (a held notifier): it counts as quiesced."""
QUIESCE_CONFLICT = "QuiesceConflict"
"""A pod's reason when another Notification is quiescing it with the same notifier (Forbid)."""
OTHER_NOTIFICATION_QUIESCING, NO_POD_WAITING = "OtherNotificationQuiescing", "NoPodWaiting"
"""The reasons of WaitingForNotification True and False (concurrencyPolicy Wait)."""
RELEASE_REQUESTED, AFTER_SECONDS = "ReleaseRequested", "AfterSeconds"
RELEASED_AFTER_MAX_HOLD, HOLD_ENDED = "ReleasedAfterMaxHold", "HoldEnded"
RELEASE_FAILED = "ReleaseFailed"
WINDOW_FAILURES = (RELEASED_AFTER_MAX_HOLD, HOLD_ENDED, DEADLINE_EXCEEDED, DELETED)
"""Reasons a window ends with that make the Notification fail (even with every pod quiesced
and released): nobody released it in time, a hold ended on its own, the deadline, deletion."""
ALL_PODS_QUIESCED, RELEASED = "AllPodsQuiesced", "Released"
"""The reasons of the Quiesced condition, True and False (or ReleasedAfterMaxHold)."""


def pod_outcome(error: Exception) -> tuple[str, str]:
    """The (scope state, reason) a pod's run ends with when it raised `error`."""
    if isinstance(error, NotDeclared):
        return scope.SKIPPED, NOT_DECLARED
    if isinstance(error, PodNotFound):
        return scope.FAILED, records.POD_DELETED
    if isinstance(error, KubeUnavailable):
        return scope.FAILED, "ServiceUnavailable"
    if type(error).__module__ == notifier_errors.__name__ or isinstance(error, KubeRejected):
        return scope.FAILED, type(error).__name__
    if isinstance(error, APIError):
        return scope.FAILED, error.reason
    return scope.FAILED, INTERNAL_ERROR
