"""The AllPods feed: list then watch, only running pods, and no hot loop when kube-apiserver
answers 410 or sends ERROR events (bug 1): a re-list after a capped, jittered backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from apiserver.fanout.pod_feed import BACKOFF_MAX_SECONDS, KubeNewPods, backoff_seconds
from apiserver.kube import KubeRejected, KubeUnavailable


def pod(name: str, phase: str = "Running", rv: str = "1", deleting: bool = False
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


class FakeKube:
    """Lists answer `pages` in turn (then the last again); each watch plays the next script of
    `watches` (an exception raised, or events), then an expired watch for ever."""

    def __init__(self, pages: list[dict[str, Any]], watches: list[Any]) -> None:
        self.pages = pages
        self.watches = watches
        self.requests: list[tuple[str, dict[str, str]]] = []

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]:
        self.requests.append(("list", dict(params or {})))
        return self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]

    async def watch(self, path: str, params: Mapping[str, str], accept: str | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        self.requests.append(("watch", dict(params)))
        script = self.watches.pop(0) if self.watches else KubeRejected(410, {"code": 410})
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


class Clock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def page(*pods: dict[str, Any], rv: str = "10", cont: str = "") -> dict[str, Any]:
    return {"items": list(pods), "metadata": {"resourceVersion": rv, "continue": cont}}


async def take(feed: AsyncIterator[tuple[str, str]], n: int) -> list[str]:
    found = []
    async for name, _ in feed:
        found.append(name)
        if len(found) == n:
            break
    return found


async def test_lists_running_pods_then_watches_from_the_list_version() -> None:
    kube = FakeKube(
        [page(pod("a"), pod("pending", "Pending"), cont="t"),
         page(pod("b"), pod("x", deleting=True), rv="12")],
        [[{"type": "ADDED", "object": pod("c", "Pending", "13")},
          {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "14"}}},
          {"type": "MODIFIED", "object": pod("c", "Running", "15")}]])
    clock = Clock()
    found = await take(KubeNewPods(kube, clock.sleep).matching("ns", "app=db"), 3)
    assert found == ["a", "b", "c"]
    lists = [params for kind, params in kube.requests if kind == "list"]
    assert lists[1]["continue"] == "t" and lists[0]["labelSelector"] == "app=db"
    (watch,) = [params for kind, params in kube.requests if kind == "watch"]
    assert (watch["resourceVersion"], watch["allowWatchBookmarks"]) == ("12", "true")
    assert clock.slept == []


@pytest.mark.parametrize("failure", [
    [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
    KubeRejected(410, {"code": 410, "reason": "Expired"}),
    KubeUnavailable("connection refused"),
    [],  # a stream that ends at once, without any event
], ids=["error-event", "410", "unavailable", "empty-stream"])
async def test_a_failing_watch_relists_after_a_growing_capped_backoff(failure: Any) -> None:
    """Bug 1: the old loop reconnected at once with the stale resourceVersion, 1000 requests
    in half a second. Here 20 failures in a row cost 20 lists and 20 watches, each after a
    sleep that doubles up to the cap."""
    kube = FakeKube([page(rv="10")], [failure] * 20 + [
        [{"type": "ADDED", "object": pod("late", rv="20")}]])
    clock = Clock()
    assert await take(KubeNewPods(kube, clock.sleep).matching("ns", "app=db"), 1) == ["late"]
    assert len(kube.requests) == 2 * 21
    assert len(clock.slept) == 20
    assert clock.slept[0] <= 0.5
    assert max(clock.slept) <= BACKOFF_MAX_SECONDS
    assert sum(clock.slept) > 100  # not a hot loop: minutes of backoff, not milliseconds
    assert all(params.get("resourceVersion") == "10" for kind, params in kube.requests
               if kind == "watch")


async def test_a_healthy_watch_resets_the_backoff() -> None:
    healthy = [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}}]
    expired = KubeRejected(410, {"code": 410})
    kube = FakeKube([page()], [expired, expired, expired, healthy, expired,
                               [{"type": "ADDED", "object": pod("a", rv="30")}]])
    clock = Clock()
    assert await take(KubeNewPods(kube, clock.sleep).matching("ns", "x"), 1) == ["a"]
    # three failures, then a healthy watch is followed (from its bookmark) by one more 410:
    # that backoff starts from the bottom again
    assert len(clock.slept) == 4
    assert clock.slept[3] <= 0.5 < clock.slept[2]
    assert ("watch", {"labelSelector": "x", "resourceVersion": "11",
                      "allowWatchBookmarks": "true", "timeoutSeconds": "300"}) in kube.requests


def test_backoff_is_jittered_and_capped() -> None:
    assert backoff_seconds(1, lambda: 0.0) == 0.25
    assert backoff_seconds(1, lambda: 1.0) == 0.5
    assert backoff_seconds(3, lambda: 1.0) == 2.0
    assert backoff_seconds(100, lambda: 1.0) == BACKOFF_MAX_SECONDS
    assert backoff_seconds(100, lambda: 0.0) == BACKOFF_MAX_SECONDS / 2
