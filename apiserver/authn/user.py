"""The authenticated (or anonymous) user of a request."""

from __future__ import annotations

from dataclasses import dataclass, field

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)


def anonymous() -> UserInfo:
    return UserInfo(ANONYMOUS, groups=[UNAUTHENTICATED])


def with_authenticated_group(user: UserInfo) -> UserInfo:
    """Add system:authenticated, unless the user already has it or system:unauthenticated."""
    if AUTHENTICATED in user.groups or UNAUTHENTICATED in user.groups:
        return user
    return UserInfo(user.name, user.uid, [*user.groups, AUTHENTICATED], user.extra)
