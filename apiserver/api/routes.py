"""The resource endpoints, answering 501 until storage and the notifier runner exist.

Authentication and authorization have already happened (middleware) when these run, so a
501 means "you may, but this server cannot yet". Later work replaces this router with real
handlers on the same paths.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter

from apiserver.api import status
from apiserver.api.resources import API_PATH

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"
POD_NOTIFY_PATH = f"{NAMESPACED}/pods/{{pod}}/notify"

# (method, path, what is not implemented yet)
ENDPOINTS = (
    ("POST", POD_NOTIFY_PATH, "create pods/notify"),
    ("GET", f"{API_PATH}/podnotifiers", "list podnotifiers"),
    ("GET", f"{NAMESPACED}/podnotifiers", "list podnotifiers"),
    ("DELETE", f"{NAMESPACED}/podnotifiers", "deletecollection podnotifiers"),
    ("GET", f"{NAMESPACED}/podnotifiers/{{name}}", "get podnotifiers"),
    ("DELETE", f"{NAMESPACED}/podnotifiers/{{name}}", "delete podnotifiers"),
    ("GET", f"{API_PATH}/notifications", "list notifications"),
    ("GET", f"{NAMESPACED}/notifications", "list notifications"),
    ("POST", f"{NAMESPACED}/notifications", "create notifications"),
    ("GET", f"{NAMESPACED}/notifications/{{name}}", "get notifications"),
    ("DELETE", f"{NAMESPACED}/notifications/{{name}}", "delete notifications"),
)


def _not_implemented(action: str) -> Callable[[], Awaitable[None]]:
    async def endpoint() -> None:
        raise status.not_implemented(f"{action} is not implemented by this server yet")

    return endpoint


def not_implemented_router() -> APIRouter:
    router = APIRouter()
    for method, path, action in ENDPOINTS:
        router.add_api_route(path, _not_implemented(action), methods=[method],
                             name=f"{method} {path}", include_in_schema=False)
    return router
