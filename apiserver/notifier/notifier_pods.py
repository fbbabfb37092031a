"""NotifierPod: what a pod declares in its notifier annotation, and whether a user may run it
(the read-only ``pods`` resource of notifier.x-k8s.io; docs/api.md, "Reading declarations").

A NotifierPod is built from the pod cache (``podcache.PodCache``, as pods/notify reads pods):
the pod's name, namespace, uid, labels, creationTimestamp and resourceVersion, its containers'
entries of the annotation as declared there, and ``access``, the caller's answer, worked out
as pods/notify would decide it (authorization and trust rules; not capacity or the pod's
bounds, which depend on the moment of the run):

1. ``create pods/notify`` (group notifier.x-k8s.io) on the pod: first asked for the whole
   namespace, once per namespace and request; only if that is denied, for the pod by name
   (``resourceNames`` rules);
2. only if allowed, the trust rules (``trust.decide``): the owner's pod template, read from
   the owner cache with no review, else ``create pods/exec`` on the pod, asked the same way
   (namespace, then the pod). Their messages are those a dry run of pods/notify would answer
   the caller, so they reveal nothing the caller could not learn by notifying.

Reviews by pod name are bounded: one request asks at most ``MAX_REVIEWS`` reviews in all
(namespace-wide ones included), ``REVIEWS_AT_ONCE`` at a time; a pod whose answer would need
more is shown with reason NotReviewed (get it by name, or list fewer pods). The authorizer's
cache (``--authorization-webhook-cache-*-ttl``) makes repeated lists cheaper still.

Which pods the caller may read at all (``get``/``list`` on the core pods) is checked at the
HTTP edge before anything here is asked (handlers/notifier_pods.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from apiserver import errors
from apiserver.api import json_input
from apiserver.api.resources import GROUP, GROUP_VERSION, NOTIFIER_PODS, VERSION
from apiserver.api.types import (
    ACCESS_FORBIDDEN,
    ACCESS_INVALID_DECLARATION,
    ACCESS_NOT_REVIEWED,
    ACCESS_UNTRUSTED,
    NotifierPod,
)
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.authz.sar import Authorizer, Decision
from apiserver.notifier.declarations import (
    ANNOTATION,
    DEFAULT_MAX_GRACE_PERIOD_SECONDS,
    InvalidNotifiers,
    container_ports,
    parse_notifiers,
)
from apiserver.notifier.trust import Owners, decide
from apiserver.registry.errors import BadRequest
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import FieldSelector, LabelSelector

Object = dict[str, Any]

RESOURCE = ResourceType(NOTIFIER_PODS.name, NotifierPod.KIND)
"""The resource as the handlers render it (selectable fields: metadata.name and namespace)."""
REVIEWS_AT_ONCE = 8
"""Pods whose access is worked out at once."""
MAX_REVIEWS = 200
"""SubjectAccessReviews one get or list may ask for the pods' access, at most."""
METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels")
"""The pod's metadata a NotifierPod shows."""
_MAX_CONTINUE_CHARS = 1024


class PodReader(Protocol):
    """Where pods are read (``podcache.PodCache``)."""

    async def pod(self, namespace: str, name: str) -> Object | None:
        """The pod, or None if it does not exist."""
        ...

    def in_namespace(self, namespace: str) -> list[Object]:
        """The cached pods of the namespace."""
        ...

    def all_pods(self) -> list[Object]:
        """Every cached pod."""
        ...


@dataclass(frozen=True)
class Page:
    items: list[Object]
    continue_token: str
    """"" on the last page."""


class _Exhausted(Exception):
    """The request has asked its most reviews (`limit`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"asked {limit} reviews")
        self.limit = limit


class _Reviews:
    """One request's reviews for one user: a named action is first asked for its whole
    namespace (once), and only by name if that is denied, within the request's budget."""

    def __init__(self, authorizer: Authorizer, budget: int) -> None:
        self._authorizer = authorizer
        self._limit = budget
        self._budget = budget
        self._wide: dict[RequestAttributes, asyncio.Task[Decision]] = {}

    def _ask(self, user: UserInfo, attributes: RequestAttributes) -> Awaitable[Decision]:
        if self._budget <= 0:
            raise _Exhausted(self._limit)
        self._budget -= 1
        return self._authorizer.authorize(user, attributes)

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        wide_attributes = RequestAttributes.for_resource(
            attributes.verb, group=attributes.api_group, version=attributes.api_version,
            resource=attributes.resource, subresource=attributes.subresource,
            namespace=attributes.namespace)
        if wide_attributes not in self._wide:
            self._wide[wide_attributes] = asyncio.ensure_future(
                self._ask(user, wide_attributes))
        wide = await self._wide[wide_attributes]
        if wide.allowed or not attributes.name:
            return wide
        return await self._ask(user, attributes)


def _declared(pod: Object, limits: Mapping[str, int]) -> list[Object] | str:
    """The pod's containers that declare notifiers, each with its entries as declared; or why
    the annotation does not validate."""
    annotation = ((pod["metadata"].get("annotations") or {}).get(ANNOTATION))
    names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
    try:
        parse_notifiers(annotation, containers=container_ports(pod), **limits)
    except InvalidNotifiers as error:
        return str(error)
    if annotation is None:
        return []
    entries = json.loads(annotation)  # validated above: a JSON object of lists of objects
    return [{"name": name, "notifiers": entries[name]} for name in names if entries.get(name)]


def _access(allowed: bool, *, rule: str = "", reason: str = "", message: str = "") -> Object:
    access: Object = {"allowed": allowed}
    for key, value in (("rule", rule), ("reason", reason), ("message", message)):
        if value:
            access[key] = value
    return access


def notify_attributes(namespace: str, pod: str = "") -> RequestAttributes:
    """``create pods/notify`` on `pod` (group notifier.x-k8s.io); with no pod, on every pod of
    the namespace (a review without a name asks for all names, as kube-apiserver's own reviews
    of a list do: RBAC allows it only by a rule without resourceNames)."""
    return RequestAttributes.for_resource(
        "create", group=GROUP, version=VERSION, resource="pods", subresource="notify",
        namespace=namespace, name=pod)


class NotifierPods:
    """NotifierPods of the pods `pods` holds; `owners` and `authorizer` decide access as
    pods/notify does; `max_timeout_seconds`, `max_hold_seconds` and `max_grace_period_seconds`
    (the server's flags) validate declarations as pods/notify does."""

    def __init__(self, pods: PodReader, owners: Owners, authorizer: Authorizer, *,
                 max_timeout_seconds: int, max_hold_seconds: int,
                 max_grace_period_seconds: int = DEFAULT_MAX_GRACE_PERIOD_SECONDS,
                 max_reviews: int = MAX_REVIEWS) -> None:
        self._pods = pods
        self._owners = owners
        self._authorizer = authorizer
        self._limits = {"max_timeout_seconds": max_timeout_seconds,
                        "max_hold_seconds": max_hold_seconds,
                        "max_grace_period_seconds": max_grace_period_seconds}
        self._max_reviews = max_reviews

    async def get(self, user: UserInfo, namespace: str, name: str) -> Object | None:
        """The pod's NotifierPod for `user`, or None if there is no such pod."""
        pod = await self._pods.pod(namespace, name)
        if pod is None:
            return None
        (found,) = await self._views(user, [pod])
        return found

    async def list_page(self, user: UserInfo, namespace: str | None, *,
                   labels: LabelSelector, fields: FieldSelector, limit: int = 0,
                   continue_token: str = "") -> Page:
        """The NotifierPods of `namespace`'s pods (every namespace's if None) that match the
        selectors, by namespace and name, at most `limit` (0: all) after `continue_token`'s
        pod. Raises BadRequest for a malformed token."""
        pods = self._pods.in_namespace(namespace) if namespace else self._pods.all_pods()
        after = decode_continue(continue_token) if continue_token else None
        chosen = sorted((p for p in pods
                         if labels.matches(p["metadata"].get("labels"))
                         and fields.matches(p) and (after is None or _key(p) > after)),
                        key=_key)
        more = bool(limit) and len(chosen) > limit
        if limit:
            chosen = chosen[:limit]
        token = encode_continue(_key(chosen[-1])) if more else ""
        return Page(await self._views(user, chosen), token)

    async def _views(self, user: UserInfo, pods: Sequence[Object]) -> list[Object]:
        reviews = _Reviews(self._authorizer, self._max_reviews)
        views: list[Object] = []
        for start in range(0, len(pods), REVIEWS_AT_ONCE):
            batch = pods[start:start + REVIEWS_AT_ONCE]
            views += await asyncio.gather(*(self._view(user, pod, reviews) for pod in batch))
        return views

    async def _view(self, user: UserInfo, pod: Object, reviews: _Reviews) -> Object:
        meta = pod["metadata"]
        view: Object = {"apiVersion": GROUP_VERSION, "kind": RESOURCE.kind,
                        "metadata": {key: meta[key] for key in METADATA if key in meta}}
        declared = _declared(pod, self._limits)
        if isinstance(declared, str):
            view["containers"] = []
            view["access"] = _access(False, reason=ACCESS_INVALID_DECLARATION, message=(
                f'pod "{meta["name"]}" has an invalid {ANNOTATION} annotation: {declared}'))
            return view
        view["containers"] = declared
        if declared:
            view["access"] = await _guarded(lambda: self._decide(user, pod, reviews))
        return view

    async def _decide(self, user: UserInfo, pod: Object, reviews: _Reviews) -> Object:
        meta = pod["metadata"]
        ask = notify_attributes(meta["namespace"], meta["name"])
        decision = await reviews.authorize(user, ask)
        if not decision.allowed:
            return _access(False, reason=ACCESS_FORBIDDEN,
                           message=denial_message(user.name, ask, decision.reason))
        trust = await decide(self._owners, reviews, user, pod)
        if not trust.trusted:
            return _access(False, reason=ACCESS_UNTRUSTED, message=trust.message)
        return _access(True, rule=trust.rule)


async def _guarded(answer: Callable[[], Awaitable[Object]]) -> Object:
    """The access `answer` works out, or NotReviewed once the request's reviews are spent."""
    try:
        return await answer()
    except _Exhausted as spent:
        return _access(False, reason=ACCESS_NOT_REVIEWED, message=(
            f"not reviewed: this request asked its maximum of {spent.limit} access reviews; "
            "get this pod by name (kubectl get pods.notifier.x-k8s.io NAME), or list fewer "
            "pods (a label selector, --chunk-size)"))


def _key(pod: Object) -> tuple[str, str]:
    meta = pod["metadata"]
    return meta["namespace"], meta["name"]


def encode_continue(after: tuple[str, str]) -> str:
    """A continue token: the (namespace, name) of the page's last pod. Pages are read from the
    cache as it is when each is asked for (no snapshot): a pod created or deleted between pages
    shows up, or not, as its position says."""
    raw = json.dumps({"start": list(after)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, str]:
    """The (namespace, name) of `encode_continue`'s token; BadRequest for anything else."""
    try:
        if len(token) > _MAX_CONTINUE_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        start = json_input.read(raw, what="the continue token").value["start"]
        if (isinstance(start, list) and len(start) == 2
                and all(isinstance(part, str) for part in start)):
            return start[0], start[1]
    except (ValueError, TypeError, KeyError, binascii.Error, errors.BadRequest):
        pass
    raise BadRequest("the continue token is malformed; list again without it")
