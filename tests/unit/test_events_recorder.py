"""The event recorder: series, rate limits, the bounded queue, write failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest.mock import ANY

import httpx
import pytest

from apiserver.kube import Connection, KubeClient, KubeRejected, KubeUnavailable
from apiserver.kube.events import (
    MAX_NOTE_BYTES,
    NORMAL,
    WARNING,
    EventRecorder,
    Limits,
    ObjectRef,
    Occurrence,
    micro_time,
)

POD = ObjectRef("v1", "Pod", "prod", "db-0", "uid-0")
RECORD = ObjectRef("notifier.x-k8s.io/v1alpha1", "PodNotifier", "prod", "db-0-quiesce-x", "u1")


@dataclass
class FakeKube:
    """Stores created Events by name and applies series patches as kube-apiserver does (the
    note changes only through core/v1, as `message`); `fail` makes writes raise."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    fail: Exception | None = None

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.calls.append(("POST", path))
        if self.fail is not None:
            raise self.fail
        self.events[body["metadata"]["name"]] = dict(body)
        return dict(body)

    async def patch(self, path: str, body: Mapping[str, Any],
                    content_type: str = "") -> dict[str, Any]:
        self.calls.append(("PATCH", path))
        assert content_type == "application/merge-patch+json"
        if self.fail is not None:
            raise self.fail
        if path.startswith("/api/v1/"):
            update = {"note" if key == "message" else key: value for key, value in body.items()}
        elif "note" in body:
            raise KubeRejected(422, {"message": "note: field is immutable"})
        else:
            update = dict(body)
        self.patches.append(dict(body))
        event = self.events[path.rsplit("/", 1)[-1]]
        event.update(update)
        return event


@dataclass
class FakeMetrics:
    written: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)

    def event_written(self, operation: str) -> None:
        self.written[operation] += 1

    def event_dropped(self, cause: str) -> None:
        self.dropped[cause] += 1

    def event_write_failed(self, operation: str) -> None:
        self.failed[operation] += 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failure(regarding: ObjectRef = POD, pod: str = "db-0", reason: str = "NonZeroExitCode"
            ) -> Occurrence:
    return Occurrence(regarding, WARNING, "PodFailed", "Notify", f"{pod} failed: {reason}",
                      note_class=reason)


def recorder(kube: FakeKube, metrics: FakeMetrics, clock: Callable[[], float], **limits: Any
             ) -> EventRecorder:
    return EventRecorder(kube, "notifier.x-k8s.io/container-notifier", "replica-0", metrics,
                         Limits(**limits), clock=clock)


async def settle() -> None:
    """Let a running recorder take what was emitted (the fakes never wait)."""
    for _ in range(5):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def running(events: EventRecorder) -> AsyncIterator[None]:
    """`events.run()` in the background for the block; then cancelled, as at shutdown."""
    writer = asyncio.create_task(events.run())
    try:
        yield
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_an_event_has_what_events_k8s_io_v1_requires() -> None:
    kube, metrics = FakeKube(), FakeMetrics()
    events = recorder(kube, metrics, Clock())
    events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "done", related=RECORD))
    await events.drain()
    (event,) = kube.events.values()
    assert kube.calls == [("POST", "/apis/events.k8s.io/v1/namespaces/prod/events")]
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["metadata"]["namespace"] == "prod"
    assert event["metadata"]["name"].startswith("db-0.")
    assert (event["reportingController"], event["reportingInstance"]) == (
        "notifier.x-k8s.io/container-notifier", "replica-0")
    assert (event["type"], event["reason"], event["action"], event["note"]) == (
        "Normal", "Notified", "Notify", "done")
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "prod",
                                  "name": "db-0", "uid": "uid-0"}
    assert event["related"]["kind"] == "PodNotifier"
    assert datetime.fromisoformat(event["eventTime"]).tzinfo is not None
    assert "series" not in event
    assert metrics.written == {"create": 1}


def test_micro_time_has_microseconds() -> None:
    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=UTC)) == (
        "2026-01-02T03:04:05.006789Z")


async def test_long_notes_and_names_are_cut_to_what_the_api_accepts() -> None:
    kube = FakeKube()
    events = recorder(kube, FakeMetrics(), Clock())
    long_pod = ObjectRef("v1", "Pod", "prod", "p" * 240 + "-x", "u")
    events.emit(Occurrence(long_pod, NORMAL, "Notified", "Notify", "é" * 2000))
    await events.drain()
    (event,) = kube.events.values()
    assert len(event["note"].encode()) <= MAX_NOTE_BYTES
    assert event["note"].endswith("...")
    assert len(event["metadata"]["name"]) <= 253
    assert ".-" not in event["metadata"]["name"] and "-." not in event["metadata"]["name"]


async def test_repeats_within_the_window_are_one_series() -> None:
    kube, metrics, clock = FakeKube(), FakeMetrics(), Clock()
    events = recorder(kube, metrics, clock, series_patch_interval_seconds=0)
    for pod in range(20):
        events.emit(failure(pod=f"db-{pod}"))
    await events.drain()
    (event,) = kube.events.values()
    assert event["series"]["count"] == 20
    assert event["note"] == "db-19 failed: NonZeroExitCode"  # the latest occurrence's
    assert [c[0] for c in kube.calls] == ["POST", "PATCH"]  # the count is coalesced
    assert metrics.written == {"create": 1, "patch": 1}


async def test_a_busy_series_is_one_create_and_a_patch_per_interval_with_the_latest_note(
        ) -> None:
    kube, metrics, clock = FakeKube(), FakeMetrics(), Clock()
    events = recorder(kube, metrics, clock, series_patch_interval_seconds=30)
    runs, every = 100, 1.0
    async with running(events):
        for n in range(runs):
            events.emit(failure(pod=f"db-{n}"))
            await settle()
            clock.now += every
    await events.drain()
    (event,) = kube.events.values()
    assert [c[0] for c in kube.calls].count("POST") == 1
    assert 1 < len(kube.patches) <= math.ceil((runs - 1) * every / 30)
    for patch in kube.patches:  # each names the occurrence it counts up to
        assert patch["message"] == f"db-{patch['series']['count'] - 1} failed: NonZeroExitCode"
    assert event["series"]["count"] == runs
    assert event["note"] == f"db-{runs - 1} failed: NonZeroExitCode"
    assert metrics.written == {"create": 1, "patch": len(kube.patches)}


async def test_a_patch_carries_the_note_only_when_it_changed_and_then_through_core_v1(
        ) -> None:
    kube = FakeKube()
    events = recorder(kube, FakeMetrics(), Clock(), series_patch_interval_seconds=0)
    events.emit(failure())
    events.emit(failure())
    await events.drain()
    events.emit(failure(pod="db-1"))
    await events.drain()
    events.emit(failure(pod="db-1"))
    await events.drain()
    assert [set(patch) for patch in kube.patches] == [
        {"series"}, {"series", "message"}, {"series"}]
    assert [patch["series"]["count"] for patch in kube.patches] == [2, 3, 4]
    (event,) = kube.events.values()
    name = event["metadata"]["name"]
    assert [call for call in kube.calls if call[0] == "PATCH"] == [
        ("PATCH", f"/apis/events.k8s.io/v1/namespaces/prod/events/{name}"),
        ("PATCH", f"/api/v1/namespaces/prod/events/{name}"),
        ("PATCH", f"/apis/events.k8s.io/v1/namespaces/prod/events/{name}")]
    assert event["note"] == "db-1 failed: NonZeroExitCode"


async def test_a_pending_count_is_patched_when_its_interval_ends_without_another_occurrence(
        ) -> None:
    kube = FakeKube()
    events = recorder(kube, FakeMetrics(), time.monotonic, series_patch_interval_seconds=0.2)
    async with running(events):
        events.emit(failure())
        events.emit(failure(pod="db-1"))
        await settle()
        assert kube.patches == []
        for _ in range(100):
            await asyncio.sleep(0.01)
            if kube.patches:
                break
    assert kube.patches == [{"series": {"count": 2, "lastObservedTime": ANY},
                             "message": "db-1 failed: NonZeroExitCode"}]


async def test_repeats_of_a_series_take_no_token_of_the_rate_limits() -> None:
    kube, metrics = FakeKube(), FakeMetrics()
    events = recorder(kube, metrics, Clock(), per_object_burst=1, per_kind_burst=2,
                      series_patch_interval_seconds=0)
    for _ in range(50):
        events.emit(failure())
    await events.drain()
    (event,) = kube.events.values()
    assert event["series"]["count"] == 50
    assert metrics.dropped == {}
    events.emit(failure(reason="Timeout"))  # a new Event: the object's one token is gone
    await events.drain()
    assert metrics.dropped == {"rate_limited": 1}


async def test_different_classes_objects_and_reasons_are_different_events() -> None:
    kube = FakeKube()
    events = recorder(kube, FakeMetrics(), Clock())
    events.emit(failure(reason="NonZeroExitCode"))
    events.emit(failure(reason="Timeout"))
    events.emit(failure(regarding=RECORD))
    events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "a", related=RECORD))
    events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "b", related=POD))
    await events.drain()
    assert len(kube.events) == 5
    assert all("series" not in e for e in kube.events.values())


async def test_a_series_ends_after_its_window() -> None:
    kube, clock = FakeKube(), Clock()
    events = recorder(kube, FakeMetrics(), clock, series_window_seconds=360)
    events.emit(failure())
    await events.drain()
    clock.now += 361
    events.emit(failure())
    await events.drain()
    assert len(kube.events) == 2


async def test_series_patches_wait_for_the_patch_interval() -> None:
    kube, clock = FakeKube(), Clock()
    events = recorder(kube, FakeMetrics(), clock, series_patch_interval_seconds=5)
    writer = asyncio.create_task(events.run())
    try:
        events.emit(failure())
        events.emit(failure())
        events.emit(failure())
        await asyncio.sleep(0.05)
        assert [c[0] for c in kube.calls] == ["POST"]
        clock.now += 5
        events.emit(failure())
        await asyncio.sleep(0.05)
        assert [c[0] for c in kube.calls] == ["POST", "PATCH"]
        (event,) = kube.events.values()
        assert event["series"]["count"] == 4
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_new_events_per_object_are_rate_limited_like_client_go() -> None:
    kube, metrics, clock = FakeKube(), FakeMetrics(), Clock()
    events = recorder(kube, metrics, clock)
    for n in range(30):
        events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", f"run {n}",
                               related=ObjectRef("x", "PodNotifier", "prod", f"r{n}", f"u{n}")))
    await events.drain()
    assert len(kube.events) == 25  # burst
    assert metrics.dropped == {"rate_limited": 5}
    clock.now += 300  # one token back per 300 s
    events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "later"))
    events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "later still"))
    await events.drain()
    assert len(kube.events) == 26
    assert metrics.dropped == {"rate_limited": 6}


async def test_the_cap_per_kind_bounds_a_fan_out_and_spares_other_kinds() -> None:
    kube, metrics, clock = FakeKube(), FakeMetrics(), Clock()
    events = recorder(kube, metrics, clock, per_kind_burst=100, per_kind_per_second=10)
    for pod in range(5000):
        events.emit(Occurrence(ObjectRef("v1", "Pod", "prod", f"db-{pod}", f"u{pod}"), NORMAL,
                               "Notified", "Notify", "done"))
        if pod % 1000 == 999:
            await events.drain()
    notification = ObjectRef("notifier.x-k8s.io/v1alpha1", "Notification", "prod", "n", "u")
    events.emit(Occurrence(notification, NORMAL, "Completed", "Notify", "done"))
    await events.drain()
    assert len(kube.events) == 101
    assert metrics.dropped == {"rate_limited": 4900}
    assert [e for e in kube.events.values() if e["regarding"]["kind"] == "Notification"]
    clock.now += 1  # 10 tokens back
    for pod in range(20):
        events.emit(Occurrence(ObjectRef("v1", "Pod", "prod", f"late-{pod}", f"l{pod}"),
                               NORMAL, "Notified", "Notify", "done"))
    await events.drain()
    assert len(kube.events) == 111


async def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    kube, metrics = FakeKube(), FakeMetrics()
    events = recorder(kube, metrics, Clock(), queue_size=3)
    for n in range(5):
        events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", f"run {n}"))
    assert metrics.dropped == {"queue_full": 2}
    await events.drain()
    assert len(kube.events) == 3


async def test_write_failures_are_counted_logged_with_a_limit_and_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    kube, metrics, clock = FakeKube(), FakeMetrics(), Clock()
    kube.fail = KubeRejected(403, {"message": "forbidden"})
    events = recorder(kube, metrics, clock)
    with caplog.at_level(logging.DEBUG, logger="apiserver.kube.events"):
        for n in range(10):
            events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", f"run {n}"))
        await events.drain()
    assert kube.events == {}
    assert metrics.failed == {"create": 10}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "403" in warnings[0].error  # type: ignore[attr-defined]
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 9
    caplog.clear()
    clock.now += 61
    with caplog.at_level(logging.WARNING, logger="apiserver.kube.events"):
        events.emit(Occurrence(POD, NORMAL, "Notified", "Notify", "again"))
        await events.drain()
    (warning,) = caplog.records
    assert warning.similar_since_last_warning == 9  # type: ignore[attr-defined]


async def test_a_failed_create_is_not_a_series_and_the_next_repeat_creates() -> None:
    kube = FakeKube()
    events = recorder(kube, FakeMetrics(), Clock())
    kube.fail = KubeUnavailable("down")
    events.emit(failure())
    await events.drain()
    kube.fail = None
    events.emit(failure())
    await events.drain()
    (event,) = kube.events.values()
    assert "series" not in event


async def test_a_patch_of_a_vanished_event_starts_a_new_one() -> None:
    kube, metrics = FakeKube(), FakeMetrics()
    events = recorder(kube, metrics, Clock(), series_patch_interval_seconds=0)
    events.emit(failure())
    await events.drain()
    kube.fail = KubeRejected(404, {"message": "not found"})
    events.emit(failure())
    await events.drain()
    assert metrics.failed == {"patch": 1}
    kube.fail = None
    events.emit(failure())
    await events.drain()
    assert len(kube.events) == 2


async def test_a_patch_while_kube_apiserver_is_unavailable_is_retried() -> None:
    kube, metrics = FakeKube(), FakeMetrics()
    events = recorder(kube, metrics, Clock(), series_patch_interval_seconds=0)
    events.emit(failure())
    await events.drain()
    kube.fail = KubeUnavailable("down")
    events.emit(failure())
    await events.drain()
    kube.fail = None
    await events.drain()
    (event,) = kube.events.values()
    assert event["series"]["count"] == 2
    assert metrics.failed == {"patch": 1}
    assert metrics.written == {"create": 1, "patch": 1}


async def test_through_the_kube_client_a_series_is_a_post_then_merge_patches() -> None:
    seen: list[tuple[str, str, str, dict[str, Any]]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.method, request.url.path,
                     request.headers.get("content-type", ""), body))
        return httpx.Response(201 if request.method == "POST" else 200, json=body)

    kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(handle))
    events = EventRecorder(kube, "c", "i", FakeMetrics(),
                           Limits(series_patch_interval_seconds=0))
    events.emit(failure())
    events.emit(failure())
    await events.drain()
    events.emit(failure(pod="db-1"))
    await events.drain()
    await kube.aclose()
    (post, patch, note_patch) = seen
    assert post[:3] == ("POST", "/apis/events.k8s.io/v1/namespaces/prod/events",
                        "application/json")
    name = post[3]["metadata"]["name"]
    assert patch[:3] == ("PATCH", f"/apis/events.k8s.io/v1/namespaces/prod/events/{name}",
                         "application/merge-patch+json")
    assert patch[3]["series"]["count"] == 2
    assert set(patch[3]) == {"series"}
    assert note_patch[:3] == ("PATCH", f"/api/v1/namespaces/prod/events/{name}",
                              "application/merge-patch+json")
    assert note_patch[3] == {"series": {"count": 3, "lastObservedTime": ANY},
                             "message": "db-1 failed: NonZeroExitCode"}
