"""HTTP handlers of the resource paths, one module per resource.

Routes match in order: the real handlers come first, and the 501 placeholders of
apiserver.api.routes answer only the paths that no handler serves yet.
"""

from __future__ import annotations

from fastapi import APIRouter

from apiserver.api.routes import not_implemented_router
from apiserver.handlers import notifications, notify, podnotifiers


def resource_router() -> APIRouter:
    router = APIRouter()
    router.include_router(notify.router)
    router.include_router(podnotifiers.router)
    router.include_router(notifications.router)
    router.include_router(not_implemented_router())
    return router
