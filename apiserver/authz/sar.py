"""Authorization by SubjectAccessReview, with allowed and denied answers cached separately.

The cache key is the whole review spec (user, uid, groups, extra and attributes). Errors are
never cached and propagate (KubeUnavailable, KubeRejected): the caller fails closed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.kube import KubeClient
from apiserver.ttlcache import ReviewCache

SUBJECTACCESSREVIEWS_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SYSTEM_MASTERS = "system:masters"
ALWAYS_ALLOWED_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Authorizer(Protocol):
    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision: ...


def review_spec(user: UserInfo, attributes: RequestAttributes) -> dict[str, Any]:
    """The SubjectAccessReview spec asking whether `user` may do `attributes`."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    if attributes.resource_request:
        fields = {
            "namespace": attributes.namespace,
            "verb": attributes.verb,
            "group": attributes.api_group,
            "version": attributes.api_version,
            "resource": attributes.resource,
            "subresource": attributes.subresource,
            "name": attributes.name,
        }
        spec["resourceAttributes"] = {key: value for key, value in fields.items() if value}
    else:
        spec["nonResourceAttributes"] = {"path": attributes.path, "verb": attributes.verb}
    return spec


class SubjectAccessReviewAuthorizer:
    def __init__(self, kube: KubeClient, *, allowed_ttl: float, denied_ttl: float,
                 clock: Callable[[], float] = time.monotonic):
        self._kube = kube
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._reviews: ReviewCache[Decision] = ReviewCache(clock=clock)
        self.counters = self._reviews.counters

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        if SYSTEM_MASTERS in user.groups:
            return Decision(True, f"member of {SYSTEM_MASTERS}")
        spec = review_spec(user, attributes)

        async def review() -> tuple[Decision, float]:
            answer = await self._kube.post(SUBJECTACCESSREVIEWS_PATH, {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            })
            status = answer.get("status") or {}
            decision = Decision(
                allowed=bool(status.get("allowed")) and not status.get("denied"),
                reason=str(status.get("reason", "")),
            )
            return decision, self._allowed_ttl if decision.allowed else self._denied_ttl

        return await self._reviews.get(json.dumps(spec, sort_keys=True), review)
