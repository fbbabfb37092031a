"""The resource types the registry stores: what can be selected on them, what is indexed."""

from __future__ import annotations

from dataclasses import dataclass

from apiserver.api.resources import GROUP

METADATA_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    extra_fields: tuple[str, ...] = ()
    """Field selectors beyond ``metadata.name`` and ``metadata.namespace``."""
    indexed_fields: tuple[str, ...] = ()
    """Selectable fields that hold strings and that cohorts (``store.Cohort``) select on: a
    backend keeps an index of each, so such a selection is not a scan."""
    group: str = GROUP

    def __post_init__(self) -> None:
        unknown = set(self.indexed_fields) - set(self.extra_fields)
        if unknown:
            raise ValueError(f"{self.plural}: indexed fields {sorted(unknown)} are not selectable")

    @property
    def qualified(self) -> str:
        """``<plural>.<group>``, as Kubernetes names a resource in messages."""
        return f"{self.plural}.{self.group}"

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        return METADATA_FIELDS + self.extra_fields


PODNOTIFIERS = ResourceType(
    "podnotifiers", "PodNotifier", ("spec.podName", "spec.notifier", "status.phase"),
    indexed_fields=("spec.podName", "status.phase"),
)
NOTIFICATIONS = ResourceType("notifications", "Notification", ("spec.notifier", "status.phase"))

# Private resources: the server's own state, never served by the API. On the Kubernetes backend
# they are storage CRDs like the others (storednotificationruns, storednotificationpodsets).
NOTIFICATION_RUNS = ResourceType("notificationruns", "NotificationRun")
"""The fan-out run of one Notification (apiserver/fanout/scope.py), named by its UID."""
NOTIFICATION_POD_SETS = ResourceType(
    "notificationpodsets", "NotificationPodSet", ("spec.notificationUID", "spec.index"),
    indexed_fields=("spec.notificationUID",),
)
"""A bounded part of one Notification's pod set, named ``<uid>-<index>`` (fanout/scope.py)."""
