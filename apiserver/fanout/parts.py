"""What a Notification's run uses, given by the composition root (apiserver/server.py): the
stores, the admission and runner of single notifies, the authorizer, metrics, Events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Authorizer
from apiserver.fanout.pod_feed import NewPods
from apiserver.fanout.scope_store import ScopeStore
from apiserver.notifier.events import NotificationEvents
from apiserver.notifier.request import NotifyRequest
from apiserver.registry.store import ObjectStore


class PodAdmission(Protocol):
    """What the fan-out needs of ``apiserver.notifier.admission.Admission``."""

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: NotifyRequest) -> Any: ...

    async def start(self, admitted: Any) -> dict[str, Any]: ...


class RunWaiter(Protocol):
    async def wait(self, namespace: str, record: str, timeout: float) -> None: ...


class FanoutMetrics(Protocol):
    def notification_finished(self, phase: str) -> None: ...

    def window_read(self) -> None: ...


class HoldReleases(Protocol):
    """What the fan-out needs of held notifiers (``apiserver.notifier.holds.HoldReleases``):
    store a release request on a Held record (idempotent; NotFound if the record is gone)."""

    async def request(self, namespace: str, name: str, by: UserInfo) -> dict[str, Any]: ...


@dataclass(frozen=True)
class FanoutParts:
    """What Notification runs use."""

    notifications: ObjectStore
    podnotifiers: ObjectStore
    scopes: ScopeStore
    admission: PodAdmission
    runner: RunWaiter
    authorizer: Authorizer
    metrics: FanoutMetrics
    new_pods: NewPods
    """Pods that start to match an AllPods Notification's selector."""
    events: NotificationEvents
    holds: HoldReleases
    """Releases Held records (a held quiesce's window ends by ending its holds)."""
