"""What request handlers and background tasks share: options, kube-apiserver client, stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request

from apiserver import errors
from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Authorizer
from apiserver.config import ServerOptions
from apiserver.kube import KubeClient
from apiserver.notifier import admission
from apiserver.notifier.errors import NotDeclared, PodNotFound
from apiserver.notifier.exec_stream import KubeEndpoint
from apiserver.notifier.pods import PodDirectory
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import KubeExec, Runner
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import ObjectStore
from apiserver.serving.metrics import Metrics

if TYPE_CHECKING:
    from apiserver.fanout.controller import FanoutManager


@dataclass
class Services:
    options: ServerOptions
    kube: KubeClient
    database: SqliteDatabase
    podnotifiers: ObjectStore
    notifications: ObjectStore
    metrics: Metrics = field(default_factory=Metrics)
    pods: PodDirectory = field(init=False)
    runner: Runner = field(init=False)
    fanout: FanoutManager = field(init=False)
    """Set by the server's lifespan, which has the authorizer it needs."""

    def __post_init__(self) -> None:
        self.pods = PodDirectory(self.kube)
        self.runner = Runner(self.podnotifiers, KubeExec(self.exec_endpoint), self.pods,
                             self.metrics, self.options.max_concurrent_executions)

    def exec_endpoint(self) -> KubeEndpoint:
        """Where runs exec, as the server's own identity (re-read: tokens rotate)."""
        return KubeEndpoint(self.kube.base_url, self.kube.ssl_context, self.kube.auth_headers())

    @classmethod
    async def open(cls, options: ServerOptions, kube: KubeClient,
                   metrics: Metrics | None = None) -> Services:
        database = await SqliteDatabase.open(options.data_dir)
        return cls(options=options, kube=kube, database=database,
                   podnotifiers=SqliteObjectStore(database, PODNOTIFIERS),
                   notifications=SqliteObjectStore(database, NOTIFICATIONS),
                   metrics=metrics or Metrics())

    async def close(self) -> None:
        self.podnotifiers.close()
        self.notifications.close()
        await self.database.close()


class ServicesAdmission:
    """The admission functions behind the interface of the coming
    ``apiserver.notifier.admission.Admission`` class, which the fan-out codes against;
    replaced by that class when it lands."""

    def __init__(self, svc: Services, authorizer: Authorizer) -> None:
        self._svc = svc
        self._authorizer = authorizer

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return await admission.read_pod(self._svc, namespace, name)
        except errors.NotFound:
            raise PodNotFound(namespace, name) from None

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: NotifyRequest
                    ) -> admission.Admitted:
        try:
            return await admission.admit(self._svc, self._authorizer, user, pod, ask)
        except errors.NotFound:
            raise NotDeclared(pod["metadata"]["name"], ask.notifier, []) from None

    async def start(self, admitted: admission.Admitted) -> dict[str, Any]:
        return await admission.start(self._svc, admitted)


def services(request: Request) -> Services:
    """FastAPI dependency: the server's shared services (set up by the app's lifespan)."""
    return request.app.state.services
