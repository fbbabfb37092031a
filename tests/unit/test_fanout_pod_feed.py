"""The AllPods feed: pods of the selector that run (now or later), from one informer per feed
that stops when the feed is closed. (The informer's own handling of 410, ERROR events and
backoff, bug 1, is tested in test_informer.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from apiserver.fanout.pod_feed import InformerNewPods
from apiserver.kube.informer import Handlers


def pod(name: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


class FakeInformer:
    """Replays `cached` as adds, then lets the test send updates; records run/stop."""

    def __init__(self, cached: list[dict[str, Any]]) -> None:
        self.cached = cached
        self.handlers: list[Handlers] = []
        self.running = asyncio.Event()
        self.stopped = False

    def add_handlers(self, handlers: Handlers) -> None:
        self.handlers.append(handlers)
        for obj in self.cached:
            assert handlers.on_add is not None
            handlers.on_add(obj)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        for handlers in self.handlers:
            assert handlers.on_update is not None
            handlers.on_update(old, new)

    async def run(self) -> None:
        self.running.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped = True


async def test_running_pods_now_then_as_they_start() -> None:
    informers: list[tuple[str, str, FakeInformer]] = []

    def make(namespace: str, selector: str) -> FakeInformer:
        informer = FakeInformer([pod("a"), pod("b", phase="Pending"),
                                 pod("c", deleting=True)])
        informers.append((namespace, selector, informer))
        return informer

    feed = InformerNewPods(make).matching("ns", "app=db")
    assert await anext(feed) == ("a", "uid-a")
    ((namespace, selector, informer),) = informers
    assert (namespace, selector) == ("ns", "app=db")
    await informer.running.wait()
    informer.update(pod("b", phase="Pending"), pod("b"))
    assert await anext(feed) == ("b", "uid-b")
    informer.update(pod("b"), pod("b", deleting=True))
    informer.update(pod("d", phase="Pending"), pod("d", phase="Succeeded"))
    informer.update(pod("e", phase="Pending"), pod("e"))
    assert await anext(feed) == ("e", "uid-e")
    await feed.aclose()
    assert informer.stopped
