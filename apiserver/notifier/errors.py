"""Why a notifier run cannot be admitted or started: the domain's errors.

Each is an ``apiserver.errors`` kind, so pods/notify answers it as kube-apiserver would
(the HTTP edge renders it), and a Notification records its class name as the pod's reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from apiserver import errors
from apiserver.api.resources import API_PATH, GROUP, PODNOTIFIERS
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
    """The same notifier is already running (or held) on the pod, as the PodNotifier
    ``record``: the message names it and what to do, ``details.name`` is it. A held run is
    only ended by its release, so the message then gives the release command (the plugin's
    and the raw API request) instead of asking to wait."""

    def __init__(self, namespace: str, pod: str, notifier: str, record: str, *,
                 held: bool) -> None:
        resource = PODNOTIFIERS.name
        qualified = errors.qualified(resource, GROUP)
        if held:
            path = f"{API_PATH}/namespaces/{namespace}/{resource}/{record}/release"
            message = (f'notifier "{notifier}" is held on pod "{pod}" by {qualified} '
                       f'"{record}" until it is released; release it with: kubectl notify -n '
                       f"{namespace} release podnotifier/{record} (or: kubectl create --raw "
                       f"{path} -f /dev/null)")
        else:
            message = (f'notifier "{notifier}" is already running on pod "{pod}" ({qualified} '
                       f'"{record}"); wait for it to finish: kubectl -n {namespace} get '
                       f"podnotifier {record} -w")
        super().__init__(message, group=GROUP, resource=resource, name=record)
        self.record = record
        self.held = held


class TooManyRuns(errors.TooManyRequests):
    """Too many unfinished runs on the pod, or across the server; retry later."""


class ServerAtCapacity(TooManyRuns):
    """The server runs its maximum of notifiers at once (--max-concurrent-executions): refused
    before anything was stored or run, so asking again once a run ended is safe."""
