"""What request handlers and background tasks share: options, kube-apiserver client, stores."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from apiserver.config import ServerOptions
from apiserver.kube import KubeClient
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import ObjectStore


@dataclass
class Services:
    options: ServerOptions
    kube: KubeClient
    database: SqliteDatabase
    podnotifiers: ObjectStore
    notifications: ObjectStore

    @classmethod
    async def open(cls, options: ServerOptions, kube: KubeClient) -> Services:
        database = await SqliteDatabase.open(options.data_dir)
        return cls(options=options, kube=kube, database=database,
                   podnotifiers=SqliteObjectStore(database, PODNOTIFIERS),
                   notifications=SqliteObjectStore(database, NOTIFICATIONS))

    async def close(self) -> None:
        self.podnotifiers.close()
        self.notifications.close()
        await self.database.close()


def services(request: Request) -> Services:
    """FastAPI dependency: the server's shared services (set up by the app's lifespan)."""
    return request.app.state.services
