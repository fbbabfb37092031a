"""The authenticated caller of a request, as the access middleware left it in the request state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from apiserver.authn.user import UserInfo


async def current_user(request: Request) -> UserInfo:
    """FastAPI dependency: the authenticated user of the request (async: FastAPI runs a plain
    function dependency in a worker thread, a hop per request)."""
    return request.state.user


CurrentUser = Annotated[UserInfo, Depends(current_user)]
"""Handler parameter type: ``async def handler(user: CurrentUser)``."""
