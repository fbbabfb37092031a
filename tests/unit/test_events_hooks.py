"""What runs and Notifications emit: reasons, objects and notes (never output tails)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from apiserver.fanout.manager import FanoutManager
from apiserver.kube.events import NORMAL, WARNING, EventRecorder, truncate_note
from apiserver.notifier.events import NotificationEvents, RunEvents, run_note
from apiserver.notifier.exec_protocol import ExecReason
from tests.support.events import RecordingSink
from tests.unit.test_events_recorder import (
    Clock,
    FakeKube,
    FakeMetrics,
    recorder,
    running,
    settle,
)
from tests.unit.test_fanout_run import QUIESCE, UNQUIESCE, Server
from tests.unit.test_runner import NS, Setup, result
from tests.unit.test_runner import setup as setup  # noqa: PLC0414 (the fixture)

SECRET = b"password=hunter2\n"


async def test_a_run_that_succeeds_emits_notified_on_the_pod_only(setup: Setup) -> None:
    setup.execute.results["app"] = result(0, SECRET)
    record = await setup.run(await setup.plan("app", "sidecar"))
    (on_pod,) = setup.events.occurrences
    assert (on_pod.type, on_pod.reason, on_pod.action) == (NORMAL, "Notified", "Notify")
    assert (on_pod.regarding.kind, on_pod.regarding.name, on_pod.regarding.uid) == (
        "Pod", "db-0", "uid-0")
    assert on_pod.regarding.api_version == "v1" and on_pod.regarding.namespace == NS
    assert on_pod.related is None
    assert "notifier quiesce requested by u succeeded" in on_pod.note
    assert "app: exit code 0" in on_pod.note and "sidecar: exit code 0" in on_pod.note
    assert f"latest: PodNotifier {record['metadata']['name']}" in on_pod.note
    assert "hunter2" not in on_pod.note and "ok" not in on_pod.note


async def test_a_failed_run_emits_notifier_failed_with_the_exit_codes(setup: Setup) -> None:
    setup.execute.results["app"] = result(7, SECRET, message="the last words: hunter2")
    await setup.run(await setup.plan("app", "sidecar"))
    assert setup.events.reasons() == ["NotifierFailed"]
    note = setup.events.occurrences[0].note
    assert setup.events.occurrences[0].type == WARNING
    assert "failed (NonZeroExitCode)" in note
    assert "app: exit code 7" in note and "sidecar: exit code 0" in note
    assert "hunter2" not in note


async def test_a_timed_out_run_emits_notifier_timed_out(setup: Setup) -> None:
    setup.execute.results["app"] = result(None, SECRET, reason=ExecReason.TIMEOUT,
                                          message="no exit status within 30s")
    await setup.run(await setup.plan("app"))
    assert setup.events.reasons() == ["NotifierTimedOut"]
    note = setup.events.occurrences[0].note
    assert "app: Timeout" in note and "hunter2" not in note


async def test_a_pod_not_running_emits_notifier_failed(setup: Setup) -> None:
    await setup.run(await setup.plan("app", pod_not_running="pod is Pending"))
    assert setup.events.reasons() == ["NotifierFailed"]
    assert "PodNotRunning" in setup.events.occurrences[0].note


async def test_an_interrupted_run_emits_nothing(setup: Setup) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    setup.runner.start(await setup.plan("app"))
    await asyncio.sleep(0.05)
    await setup.runner.shutdown()
    assert setup.events.occurrences == []


def finished(name: str, notifier: str = "quiesce", user: str = "alice", exit_code: int = 0
             ) -> dict[str, Any]:
    """A finished record of a run on pod db-0."""
    phase, reason = ("Succeeded", "Completed") if exit_code == 0 else ("Failed",
                                                                       "NonZeroExitCode")
    return {"metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"},
            "spec": {"podName": "db-0", "podUID": "uid-0", "notifier": notifier,
                     "requestedBy": {"username": user, "uid": "", "groups": []}},
            "status": {"phase": phase, "reason": reason,
                       "startTime": "2026-01-01T00:00:00.000Z",
                       "completionTime": "2026-01-01T00:00:00.027Z",
                       "containers": [{"name": "app", "exitCode": exit_code}]}}


def test_the_note_names_the_requester_the_duration_and_the_latest_record() -> None:
    assert run_note(finished("r")) == (
        "notifier quiesce requested by alice succeeded in 27ms; latest: PodNotifier r; the "
        "Event's count is how many runs of this notifier by this requester ended so; "
        "containers: app: exit code 0")


def test_a_long_note_loses_containers_not_the_requester_or_the_record() -> None:
    record = finished("db-0-quiesce-r", user="system:serviceaccount:backup:" + "b" * 200)
    record["status"]["containers"] = [{"name": f"c{n}-" + "x" * 60, "exitCode": 0}
                                      for n in range(12)]
    note = truncate_note(run_note(record))
    assert note.endswith("...") and "and 2 more" not in note
    assert record["spec"]["requestedBy"]["username"] in note
    assert "latest: PodNotifier db-0-quiesce-r" in note


def recorded(interval: float = 30) -> tuple[RunEvents, FakeKube, Clock, EventRecorder]:
    """RunEvents writing through the real recorder to a fake kube-apiserver."""
    kube, clock = FakeKube(), Clock()
    events = recorder(kube, FakeMetrics(), clock, series_patch_interval_seconds=interval)
    return RunEvents(events), kube, clock, events


async def test_runs_of_one_notifier_by_one_requester_are_one_event_counting_them() -> None:
    runs, every = 10, 5.0
    run_events, kube, clock, events = recorded()
    async with running(events):
        for n in range(runs):
            run_events.run_finished(finished(f"db-0-quiesce-{n}"))
            await settle()
            clock.now += every
    await events.drain()
    (event,) = kube.events.values()
    assert [c[0] for c in kube.calls].count("POST") == 1
    assert 1 <= len(kube.patches) <= math.ceil((runs - 1) * every / 30)
    assert event["series"]["count"] == runs
    assert event["regarding"]["kind"] == "Pod" and "related" not in event
    assert "requested by alice" in event["note"]
    assert f"latest: PodNotifier db-0-quiesce-{runs - 1};" in event["note"]


@pytest.mark.parametrize("other", [
    finished("r2", user="bob"), finished("r2", notifier="flush"), finished("r2", exit_code=3)],
    ids=["another requester", "another notifier", "a failure"])
async def test_another_requester_notifier_or_outcome_is_another_event(
        other: dict[str, Any]) -> None:
    run_events, kube, _, events = recorded()
    run_events.run_finished(finished("r1"))
    run_events.run_finished(other)
    run_events.run_finished(finished("r3"))
    await events.drain()
    assert sorted(e.get("series", {}).get("count", 1) for e in kube.events.values()) == [1, 2]


@pytest.fixture
async def fanout(tmp_path: Path) -> AsyncIterator[tuple[Server, RecordingSink]]:
    server = await Server.open(tmp_path / "data")
    sink = RecordingSink()
    await server.manager.step_down()
    server.manager = FanoutManager(replace(server.manager.parts, events=NotificationEvents(sink)),
                                   sweep_delay=0.01, clock=server.clock, scope_grace=0)
    await server.manager.lead()
    yield server, sink
    await server.close()


async def test_a_notification_emits_started_pod_failures_failed_and_rolled_back(
        fanout: tuple[Server, RecordingSink]) -> None:
    server, sink = fanout
    pods = server.fake.add(*(f"db-{n}" for n in range(6)))
    for n in (1, 3, 4):
        server.fake.outcomes[(f"db-{n}", QUIESCE)] = "fail"
    created = await server.create("snap", pods, failurePolicy="Continue", parallelism=2,
                                  rollback={"notifier": UNQUIESCE})
    await server.finished("snap")
    assert sink.reasons() == ["Started", "PodFailed", "PodFailed", "PodFailed", "RolledBack",
                              "Failed"]
    regarding = {o.regarding for o in sink.occurrences}
    (notification,) = regarding
    assert (notification.kind, notification.name, notification.uid) == (
        "Notification", "snap", created["metadata"]["uid"])
    assert "6 pods" in sink.occurrences[0].note
    failures = [o for o in sink.occurrences if o.reason == "PodFailed"]
    assert len({o.series_key for o in failures}) == 1  # one series, counting the pods
    assert all(o.type == WARNING for o in failures)
    failed = sink.occurrences[5]
    assert failed.type == WARNING and "PodsFailed" in failed.note and "3 of 6" in failed.note
    rolled_back = sink.occurrences[4]
    assert (rolled_back.type, rolled_back.action) == (NORMAL, "Rollback")
    assert "succeeded on 3 pods, failed on 0" in rolled_back.note


async def test_a_notification_that_succeeds_emits_completed(
        fanout: tuple[Server, RecordingSink]) -> None:
    server, sink = fanout
    await server.create("ok", server.fake.add("db-0", "db-1"), parallelism=2)
    await server.finished("ok")
    assert sink.reasons() == ["Started", "Completed"]
    assert sink.occurrences[1].type == NORMAL
    assert "2 pods succeeded" in sink.occurrences[1].note


async def test_pods_failing_for_different_reasons_are_different_series(
        fanout: tuple[Server, RecordingSink]) -> None:
    server, sink = fanout
    pods = server.fake.add("db-0", "db-1", "db-2")
    server.fake.outcomes[("db-0", QUIESCE)] = "fail"
    del server.fake.pods["db-2"]  # PodDeleted
    await server.create("mixed", pods, failurePolicy="Continue")
    await server.finished("mixed")
    failures = [o for o in sink.occurrences if o.reason == "PodFailed"]
    assert len({o.series_key for o in failures}) == 2


def test_a_record_that_cannot_be_described_records_nothing_and_raises_nothing() -> None:
    sink = RecordingSink()
    RunEvents(sink).run_finished({"metadata": {"name": "r"}, "status": {"phase": "Failed"}})
    assert sink.occurrences == []


async def test_a_notification_whose_scope_was_never_recorded_emits_failed(
        fanout: tuple[Server, RecordingSink]) -> None:
    server, sink = fanout
    created = await server.notifications.create({
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
        "metadata": {"namespace": NS, "name": "lost"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE},
        "status": {"phase": "Pending"}})
    await server.manager.resume()
    (failed,) = sink.occurrences
    assert (failed.reason, failed.type, failed.regarding.uid) == (
        "Failed", WARNING, created["metadata"]["uid"])
    assert "ScopeNotRecorded" in failed.note
