"""The resource types the registry stores, and what can be selected on them."""

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
    group: str = GROUP

    @property
    def qualified(self) -> str:
        """``<plural>.<group>``, as Kubernetes names a resource in messages."""
        return f"{self.plural}.{self.group}"

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        return METADATA_FIELDS + self.extra_fields


PODNOTIFIERS = ResourceType(
    "podnotifiers", "PodNotifier", ("spec.podName", "spec.notifier", "status.phase")
)
NOTIFICATIONS = ResourceType("notifications", "Notification", ("spec.notifier", "status.phase"))
