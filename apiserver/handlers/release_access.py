"""Who may release a held quiesce: whoever may start it. Ending a hold unquiesces a pod, so
both release actions need, besides their own subresource (``create podnotifiers/release``,
``create notifications/release``, checked by the access middleware), ``create pods/notify`` on
each pod they release: the record's pod for ``podnotifiers/NAME/release``, every pod of the
window for ``notifications/NAME/release`` (docs/api.md, "Release")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from apiserver import errors
from apiserver.api.resources import GROUP, VERSION
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.authz.sar import Authorizer

REVIEWS_AT_ONCE = 8
"""SubjectAccessReviews a release asks for at once (a window may hold thousands of pods)."""


def notify_attributes(namespace: str, pod: str) -> RequestAttributes:
    """``create pods/notify`` on `pod` (in the notifier group)."""
    return RequestAttributes.for_resource(
        "create", group=GROUP, version=VERSION, resource="pods", subresource="notify",
        namespace=namespace, name=pod)


async def require_release(authorizer: Authorizer, user: UserInfo, namespace: str,
                          pods: Iterable[str], *, resource: str, name: str, what: str) -> None:
    """Return if `user` may ``create pods/notify`` on every one of `pods`; else ``Forbidden``
    on `resource` `name` naming the first pod refused (in the order given) and saying that
    releasing `what` needs it. Asks `REVIEWS_AT_ONCE` reviews at a time and stops at the first
    refusal."""
    names = list(dict.fromkeys(pods))
    for start in range(0, len(names), REVIEWS_AT_ONCE):
        batch = names[start:start + REVIEWS_AT_ONCE]
        asks = [notify_attributes(namespace, pod) for pod in batch]
        decisions = await asyncio.gather(*(authorizer.authorize(user, ask) for ask in asks))
        for pod, ask, decision in zip(batch, asks, decisions, strict=True):
            if not decision.allowed:
                raise errors.Forbidden(
                    errors.forbidden_message(
                        resource, GROUP, name,
                        f'releasing {what} needs create pods/notify on its pod "{pod}": '
                        f"{denial_message(user.name, ask, decision.reason)}"),
                    group=GROUP, resource=resource, name=name)
