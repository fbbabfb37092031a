"""Bearer tokens checked with TokenReview, answers cached for a TTL (errors never cached)."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apiserver.authn.user import UserInfo
from apiserver.kube import KubeClient
from apiserver.ttlcache import ReviewCache

TOKENREVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass(frozen=True)
class _Answer:
    user: UserInfo | None


class TokenReviewer:
    def __init__(self, kube: KubeClient, ttl: float, clock: Callable[[], float] = time.monotonic):
        self._kube = kube
        self._ttl = ttl
        self._reviews: ReviewCache[_Answer] = ReviewCache(clock=clock)
        # Cache keys are keyed hashes, so that raw tokens are not kept as keys.
        self._key = os.urandom(32)
        self.counters = self._reviews.counters

    async def review(self, token: str) -> UserInfo | None:
        """The token's user, or None if kube-apiserver rejected it.

        Raises KubeUnavailable or KubeRejected when there is no answer.
        """

        async def review() -> tuple[_Answer, float]:
            answer = await self._kube.post(TOKENREVIEWS_PATH, {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            })
            return _Answer(_user(answer.get("status") or {})), self._ttl

        key = hmac.new(self._key, token.encode(), hashlib.sha256).digest()
        return (await self._reviews.get(key, review)).user


def _user(status: dict[str, Any]) -> UserInfo | None:
    if not status.get("authenticated"):
        return None
    user = status.get("user") or {}
    return UserInfo(
        name=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=[str(g) for g in user.get("groups") or []],
        extra={str(k): [str(v) for v in vs] for k, vs in (user.get("extra") or {}).items()},
    )
