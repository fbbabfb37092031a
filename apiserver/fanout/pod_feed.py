"""Where an AllPods Notification learns of pods that start to match its selector.

``NewPods`` is what the fan-out needs; ``KubeNewPods`` serves it from a list-then-watch of the
namespace's pods with the selector (to be backed by the shared informer later). It re-lists on
410 Expired and on ``ERROR`` events, and backs off (capped, jittered) after every failure, so a
kube-apiserver that keeps answering 410 costs one request per backoff, not a hot loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from apiserver.kube import KubeRejected, KubeUnavailable

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = "500"
WATCH_TIMEOUT_SECONDS = "300"
BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0


class NewPods(Protocol):
    def matching(self, namespace: str, selector: str) -> AsyncGenerator[tuple[str, str], None]:
        """(name, uid) of each pod of `namespace` matching `selector` that runs and is not
        terminating: those that already do first, then each as it starts to. A pod may be
        reported more than once; the caller keeps each UID once."""
        ...


class PodLister(Protocol):
    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]: ...

    def watch(self, path: str, params: Mapping[str, str], accept: str | None = None
              ) -> AsyncIterator[dict[str, Any]]: ...


def backoff_seconds(failures: int, rng: Callable[[], float] = random.random) -> float:
    """Capped exponential backoff with full jitter for the `failures`-th consecutive failure."""
    ceiling = min(BACKOFF_MAX_SECONDS, BACKOFF_INITIAL_SECONDS * 2 ** max(0, failures - 1))
    return ceiling / 2 + rng() * ceiling / 2


def running(pod: Mapping[str, Any]) -> bool:
    return (not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") == "Running")


class KubeNewPods:
    def __init__(self, kube: PodLister,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._kube = kube
        self._sleep = sleep

    async def matching(self, namespace: str, selector: str
                       ) -> AsyncGenerator[tuple[str, str], None]:
        path = f"/api/v1/namespaces/{namespace}/pods"
        failures = 0
        while True:
            if failures:
                await self._sleep(backoff_seconds(failures))
            try:
                resource_version = ""
                async for found, version in self._list(path, selector):
                    if found is not None:
                        yield found
                    resource_version = version
                async for found in self._watch(path, selector, resource_version):
                    failures = 0
                    if found is not None:
                        yield found
                # The watch reported an error (410 Expired, ...) or ended without an event.
                failures += 1
            except (KubeRejected, KubeUnavailable) as error:
                failures += 1
                log.warning("notification pod watch failed; re-listing after a backoff",
                            extra={"namespace": namespace, "selector": selector,
                                   "error": str(error), "failures": failures})

    async def _list(self, path: str, selector: str
                    ) -> AsyncIterator[tuple[tuple[str, str] | None, str]]:
        """Running pods of each page, then (None, the list's resourceVersion)."""
        token = ""
        while True:
            params = {"labelSelector": selector, "limit": LIST_PAGE_SIZE}
            if token:
                params["continue"] = token
            page = await self._kube.get(path, params=params)
            for pod in page.get("items") or []:
                if running(pod):
                    yield (pod["metadata"]["name"], pod["metadata"]["uid"]), ""
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                yield None, page.get("metadata", {}).get("resourceVersion", "")
                return

    async def _watch(self, path: str, selector: str, resource_version: str
                     ) -> AsyncIterator[tuple[str, str] | None]:
        """Pods that run, from `resource_version` on, across watch timeouts (None for any other
        event: the watch is healthy); returns when the watch must be re-listed (an ERROR
        event, or a stream that ended without any event)."""
        params = {"labelSelector": selector, "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        while True:
            events = 0
            async for event in self._kube.watch(path, params):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    log.info("notification pod watch: error event, re-listing",
                             extra={"path": path, "status": obj.get("message", ""),
                                    "code": obj.get("code")})
                    return
                events += 1
                params["resourceVersion"] = obj.get("metadata", {}).get(
                    "resourceVersion", params["resourceVersion"])
                if kind in ("ADDED", "MODIFIED") and running(obj):
                    yield obj["metadata"]["name"], obj["metadata"]["uid"]
                else:
                    yield None
            if not events:
                return
