"""Why a notifier run cannot be admitted or started: the domain's errors.

Each is an ``apiserver.errors`` kind, so pods/notify answers it as kube-apiserver would
(the HTTP edge renders it), and a Notification records its class name as the pod's reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.api.types import PodNotifier
from apiserver.errors import Cause
from apiserver.notifier.declarations import ANNOTATION


class PodNotFound(errors.NotFound):
    """The pod does not exist (or is not the one the run was planned for)."""

    def __init__(self, namespace: str, pod: str) -> None:
        super().__init__(f'pods "{pod}" not found', resource="pods", name=pod)
        self.namespace = namespace
        self.pod = pod


class NotDeclared(errors.NotFound):
    """No selected container of the pod declares the notifier."""

    def __init__(self, pod: str, notifier: str, declared: Sequence[str]) -> None:
        super().__init__(
            f'notifier "{notifier}" is not declared by pod "{pod}" (declared: '
            f"{', '.join(declared) or 'none'}; see its {ANNOTATION} annotation)",
            name=notifier, resource="notifier")
        self.pod = pod
        self.notifier = notifier
        self.declared = tuple(declared)


class InvalidDeclaration(errors.Invalid):
    """The pod's notifier annotation does not parse or validate: ``Pod "db-0" is invalid``."""

    def __init__(self, pod: str, causes: Sequence[Cause]) -> None:
        super().__init__(errors.invalid_message("Pod", "", pod, causes), resource="Pod",
                         name=pod, causes=causes)


class InvalidSelection(errors.Invalid):
    """``spec.containers`` names containers the pod lacks or that do not declare the notifier:
    the PodNotifier (``name``: its name or generateName) is invalid."""

    def __init__(self, name: str, causes: Sequence[Cause]) -> None:
        super().__init__(errors.invalid_message(PodNotifier.KIND, GROUP, name, causes),
                         group=GROUP, resource=PodNotifier.KIND, name=name, causes=causes)


class Untrusted(errors.Forbidden):
    """Neither trust rule vouches for the pod's declarations for this user."""

    def __init__(self, pod: str, message: str) -> None:
        super().__init__(errors.forbidden_message("pods", "", pod, message), resource="pods",
                         name=pod)


class NotAuthorized(errors.Forbidden):
    """The user may not ``create pods/notify`` on the pod (a fan-out re-checks each pod)."""


class RunConflict(errors.Conflict):
    """The same notifier is already running on the pod."""


class TooManyRuns(errors.TooManyRequests):
    """Too many unfinished runs on the pod, or across the server; retry later."""
