"""HTTP handlers of the resource paths, one module per resource."""

from __future__ import annotations

from fastapi import APIRouter

from apiserver.handlers import notifications, notify, podnotifiers
from apiserver.handlers.watch_response import Watches
from apiserver.registry.store import ObjectStore


def resource_router(*, podnotifier_store: ObjectStore, notification_store: ObjectStore,
                    watches: Watches) -> APIRouter:
    """Every resource route; ``watches`` holds their watch streams."""
    router = APIRouter()
    router.include_router(notify.router)
    router.include_router(podnotifiers.router(podnotifier_store, watches))
    router.include_router(notifications.router(notification_store, watches))
    return router
