"""The requests the plugin makes, on its `kubeclient.KubeClient` (so credentials refresh: an exec
plugin's expired token is fetched again).

Every error answer becomes a `ServerError` (printed like kubectl's ``Error from server``),
an unreachable server `Unreachable`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, TypeVar, cast

from kubectl_notify.errors import (
    APISERVICE,
    FAILED,
    APIMissing,
    APIUnavailable,
    PluginError,
    ServerError,
    Unreachable,
)
from kubectl_notify.kubeclient import KubeClient, KubeRejected, KubeUnavailable

GROUP = "notifier.x-k8s.io"
VERSION = "v1alpha1"
API = f"/apis/{GROUP}/{VERSION}"
ANNOTATION = "notifier.x-k8s.io/notifiers"
NOTIFICATION_LABEL = "notifier.x-k8s.io/notification"
ROLLBACK_LABEL = "notifier.x-k8s.io/rollback-attempt"
REQUEST_TIMEOUT = 75.0
"""Seconds a request may take: a notify may be held ``waitSeconds`` (at most 50) by the server,
and kube-apiserver allows a request 60 s."""
WATCH_CHUNK_SECONDS = 300
"""A watch without a deadline is renewed this often (as kubectl's are)."""

RETRY_SECONDS = 1.0
"""Pause before watching again after a watch that ended without an event."""

T = TypeVar("T")


async def answered(request: Awaitable[T]) -> T:
    """`request`'s result, its errors translated for the command line."""
    try:
        return await request
    except KubeRejected as error:
        raise ServerError(error.status_code, error.answer) from None
    except KubeUnavailable as error:
        raise Unreachable(str(error)) from None


def _is_status(answer: Mapping[str, Any]) -> bool:
    return answer.get("kind") == "Status"


class NotifierAPI:
    """notifier.x-k8s.io and the core requests the commands use, in one namespace."""

    def __init__(self, kube: KubeClient, namespace: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self.namespace = namespace
        self._clock = clock

    async def _ours(self, request: Awaitable[T]) -> T:
        """`request` to notifier.x-k8s.io, its errors translated (`_translated`)."""
        try:
            return await request
        except (KubeRejected, KubeUnavailable) as error:
            raise await self._translated(error) from None

    async def _translated(self, error: KubeRejected | KubeUnavailable) -> PluginError:
        """An error answer of notifier.x-k8s.io for the command line: a plain-text 404 or
        502/503/504 is kube-apiserver's own (no APIService, or one not Available:
        `APIMissing`, `APIUnavailable`), a Status the server's (`ServerError`), no answer at
        all `Unreachable`."""
        if isinstance(error, KubeRejected):
            if error.status_code == 404 and not _is_status(error.answer):
                return APIMissing(str(error.answer.get("message") or ""))
            return ServerError(error.status_code, error.answer)
        if error.status_code and _is_status(error.answer):
            return ServerError(error.status_code, error.answer)
        if error.status_code:
            return APIUnavailable(error.status_code, str(error.answer.get("message") or ""),
                                  await self._apiservice_condition())
        return Unreachable(str(error))

    async def _apiservice_condition(self) -> str:
        """``Reason: message`` of the APIService's Available condition when it is not True;
        "" if it cannot be read (reading APIServices needs a right most users lack)."""
        try:
            found = await self._kube.get(
                f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        except (KubeRejected, KubeUnavailable):
            return ""
        for condition in (found.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Available" and condition.get("status") != "True":
                return f"{condition.get('reason', '')}: {condition.get('message', '')}"
        return ""

    def _path(self, resource: str, name: str = "") -> str:
        base = f"{API}/namespaces/{self.namespace}/{resource}"
        return f"{base}/{name}" if name else base

    async def notify(self, pod: str, body: Mapping[str, Any], *, wait_seconds: int = 0,
                     dry_run: bool = False) -> dict[str, Any]:
        params = {"waitSeconds": str(wait_seconds)}
        if dry_run:
            params["dryRun"] = "All"
        return await self._ours(self._kube.post(f"{self._path('pods', pod)}/notify", body,
                                                 params))

    async def create_notification(self, body: Mapping[str, Any], *, dry_run: bool = False
                                  ) -> dict[str, Any]:
        params = {"dryRun": "All"} if dry_run else None
        return await self._ours(self._kube.post(self._path("notifications"), body, params))

    async def release(self, resource: str, name: str) -> dict[str, Any]:
        """POST the ``release`` subresource of a podnotifier or notification: the object."""
        return await self._ours(self._kube.post(f"{self._path(resource, name)}/release", {}))

    async def get(self, resource: str, name: str) -> dict[str, Any]:
        return await self._ours(self._kube.get(self._path(resource, name)))

    async def items(self, resource: str, **params: str) -> list[dict[str, Any]]:
        answer = await self._ours(self._kube.get(self._path(resource), params=params))
        return list(answer.get("items") or [])

    async def pod(self, name: str) -> dict[str, Any]:
        return await answered(self._kube.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}"))

    async def pods(self, selector: str) -> list[dict[str, Any]]:
        answer = await answered(self._kube.get(f"/api/v1/namespaces/{self.namespace}/pods",
                                               params={"labelSelector": selector}))
        return list(answer.get("items") or [])

    async def access_review(self, attributes: Mapping[str, str]) -> dict[str, Any]:
        """A SelfSubjectAccessReview's status for `attributes` in this namespace."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": self.namespace, **attributes}}}
        answer = await answered(self._kube.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body))
        return dict(answer.get("status") or {})

    async def follow(self, resource: str, obj: dict[str, Any], done: Callable[[dict[str, Any]],
                     bool], wait: float | None) -> AsyncGenerator[dict[str, Any], None]:
        """Yield each new version of `obj` (watched by name from its resourceVersion) until
        `done(version)` or `wait` seconds pass (None: no limit). A watch the server ends is
        resumed from a fresh read; a deleted object is a failure (exit 1)."""
        deadline = None if wait is None else self._clock() + wait
        name = obj["metadata"]["name"]
        version = str(obj["metadata"].get("resourceVersion") or "")
        while True:
            remaining = WATCH_CHUNK_SECONDS if deadline is None else deadline - self._clock()
            if remaining <= 0:
                return
            params = {"fieldSelector": f"metadata.name={name}",
                      "timeoutSeconds": str(max(1, math.ceil(remaining)))}
            if version:
                params["resourceVersion"] = version
            expired, events_seen = False, 0
            async with aclosing(self._events(resource, params)) as events:
                async for event in events:
                    events_seen += 1
                    kind, current = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if current.get("code") != 410:
                            raise ServerError(int(current.get("code") or 500), current)
                        expired = True
                        break
                    if kind == "DELETED":
                        raise PluginError(f'error: {resource}.{GROUP} "{name}" was deleted '
                                          "while waiting for it to finish", FAILED)
                    if kind in ("ADDED", "MODIFIED"):
                        version = str(current["metadata"].get("resourceVersion") or version)
                        yield current
                        if done(current):
                            return
            if expired or deadline is None or deadline - self._clock() > 0:
                if not events_seen:  # a server that ends watches at once: do not spin
                    await asyncio.sleep(RETRY_SECONDS)
                current = await self.get(resource, name)
                version = str(current["metadata"].get("resourceVersion") or "")
                yield current
                if done(current):
                    return

    async def _events(self, resource: str, params: Mapping[str, str]
                      ) -> AsyncGenerator[dict[str, Any], None]:
        try:
            watch = cast(AsyncGenerator[dict[str, Any], None],
                         self._kube.watch(self._path(resource), params))
            async with aclosing(watch) as events:
                async for event in events:
                    yield event
        except KubeRejected as error:
            if error.status_code != 410:
                raise await self._translated(error) from None
            yield {"type": "ERROR", "object": {"code": 410}}
        except KubeUnavailable as error:
            raise await self._translated(error) from None
