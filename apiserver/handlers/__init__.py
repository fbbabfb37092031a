"""HTTP handlers of the resource paths, one module per resource."""

from __future__ import annotations

from fastapi import APIRouter

from apiserver.handlers import notifications, notify, podnotifiers


def resource_router() -> APIRouter:
    router = APIRouter()
    router.include_router(notify.router)
    router.include_router(podnotifiers.router)
    router.include_router(notifications.router)
    return router
