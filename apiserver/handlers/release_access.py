"""Who may release a held quiesce: whoever may start it. Ending a hold unquiesces a pod, so
both release actions need, besides their own subresource (``create podnotifiers/release``,
``create notifications/release``, checked by the access middleware), ``create pods/notify`` on
each pod they release: the record's pod for ``podnotifiers/NAME/release``, every pod of the
window for ``notifications/NAME/release`` (docs/api.md, "Release")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import denial_message
from apiserver.authz.sar import Authorizer
from apiserver.notifier.notifier_pods import notify_attributes

REVIEWS_AT_ONCE = 8
"""SubjectAccessReviews a release asks for at once (a window may hold thousands of pods)."""


async def require_release(authorizer: Authorizer, user: UserInfo, namespace: str,
                          pods: Iterable[str], *, resource: str, name: str, what: str) -> None:
    """Return if `user` may ``create pods/notify`` on every one of `pods`; else ``Forbidden``
    on `resource` `name` naming the first pod refused (in the order given) and saying that
    releasing `what` needs it. For more than one pod, one review of every pod of the namespace
    first; only if that is refused (or for one pod), one per pod, `REVIEWS_AT_ONCE` at a time,
    stopping at the first refusal."""
    names = list(dict.fromkeys(pods))
    if len(names) > 1 and (await authorizer.authorize(user, notify_attributes(namespace))).allowed:
        return  # every pod of the namespace: no review per pod
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
