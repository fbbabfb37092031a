"""Where an AllPods Notification learns of pods that start to match its selector.

``NewPods`` is what the fan-out needs; ``InformerNewPods`` serves it from the shared informer
(``apiserver.kube.informer``): one list-then-watch of the namespace's pods with the selector
per running AllPods Notification, with the informer's handling of 410 Expired, ERROR events,
dropped connections and backoff. A pod is reported once it runs and is not terminating.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, Protocol

from apiserver.kube import KubeClient, paths
from apiserver.kube.informer import Handlers, Informer
from apiserver.notifier.podcache import trim_pod


class NewPods(Protocol):
    def matching(self, namespace: str, selector: str) -> AsyncGenerator[tuple[str, str], None]:
        """(name, uid) of each pod of `namespace` matching `selector` that runs and is not
        terminating: those that already do first, then each as it starts to. A pod may be
        reported more than once; the caller keeps each UID once."""
        ...


class PodInformer(Protocol):
    def add_handlers(self, handlers: Handlers) -> None: ...

    async def run(self) -> None: ...


def running(pod: Mapping[str, Any]) -> bool:
    return (not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") == "Running")


def pod_informer(kube: KubeClient) -> Callable[[str, str], PodInformer]:
    """Informers of one namespace's pods with a label selector, trimmed as the pod cache."""

    def make(namespace: str, selector: str) -> PodInformer:
        return Informer(kube, paths.namespaced(paths.CORE, namespace, "pods"),
                        name=f"allpods {namespace}",
                        params={"labelSelector": selector}, transform=trim_pod)

    return make


class InformerNewPods:
    def __init__(self, informers: Callable[[str, str], PodInformer]) -> None:
        self._informers = informers

    async def matching(self, namespace: str, selector: str
                       ) -> AsyncGenerator[tuple[str, str], None]:
        found: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

        def seen(pod: dict[str, Any]) -> None:
            if running(pod):
                found.put_nowait((pod["metadata"]["name"], pod["metadata"]["uid"]))

        informer = self._informers(namespace, selector)
        informer.add_handlers(Handlers(on_add=seen, on_update=lambda _old, new: seen(new)))
        task = asyncio.create_task(informer.run(), name=f"allpods {namespace} {selector}")
        try:
            while True:
                yield await found.get()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
