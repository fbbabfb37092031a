"""Fakes of authentication and authorization for tests of the app in process."""

from __future__ import annotations

from typing import Any

from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Decision


class AllowAll:
    """Authenticates every request as alice and allows everything; records what it is asked
    to authorize in `asked`."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def strip_identity_headers(self, headers: list) -> list:
        return list(headers)

    async def authenticate(self, headers: Any, cert: bytes | None) -> UserInfo:
        return UserInfo("alice", groups=["system:authenticated"])

    async def authorize(self, user: UserInfo, attributes: Any) -> Decision:
        self.asked.append(attributes)
        return Decision(True)
