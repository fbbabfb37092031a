"""What runs and Notifications emit: reasons, objects and notes (never output tails)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from apiserver.fanout.controller import FanoutManager
from apiserver.kube.events import NORMAL, WARNING
from apiserver.notifier.events import NotificationEvents, RunEvents, run_note
from apiserver.notifier.exec_protocol import ExecReason
from tests.support.events import RecordingSink
from tests.unit.test_fanout_run import QUIESCE, UNQUIESCE, Server
from tests.unit.test_runner import NS, Setup, result
from tests.unit.test_runner import setup as setup  # noqa: PLC0414 (the fixture)

SECRET = b"password=hunter2\n"


async def test_a_run_that_succeeds_emits_notified_on_the_pod_and_the_record(
        setup: Setup) -> None:
    setup.execute.results["app"] = result(0, SECRET)
    record = await setup.run(await setup.plan("app", "sidecar"))
    on_pod, on_record = setup.events.occurrences
    assert (on_pod.type, on_pod.reason, on_pod.action) == (NORMAL, "Notified", "Notify")
    assert (on_pod.regarding.kind, on_pod.regarding.name, on_pod.regarding.uid) == (
        "Pod", "db-0", "uid-0")
    assert on_pod.regarding.api_version == "v1" and on_pod.regarding.namespace == NS
    assert on_pod.related == on_record.regarding
    assert on_record.regarding.kind == "PodNotifier"
    assert on_record.regarding.api_version == "notifier.x-k8s.io/v1alpha1"
    assert on_record.regarding.name == record["metadata"]["name"]
    assert on_record.regarding.uid == record["metadata"]["uid"] != ""
    assert on_record.related == on_pod.regarding
    assert on_pod.note == on_record.note
    assert "quiesce succeeded" in on_pod.note
    assert "app: exit code 0" in on_pod.note and "sidecar: exit code 0" in on_pod.note
    assert record["metadata"]["name"] in on_pod.note
    assert "hunter2" not in on_pod.note and "ok" not in on_pod.note


async def test_a_failed_run_emits_notifier_failed_with_the_exit_codes(setup: Setup) -> None:
    setup.execute.results["app"] = result(7, SECRET, message="the last words: hunter2")
    await setup.run(await setup.plan("app", "sidecar"))
    assert setup.events.reasons() == ["NotifierFailed", "NotifierFailed"]
    note = setup.events.occurrences[0].note
    assert setup.events.occurrences[0].type == WARNING
    assert "failed (NonZeroExitCode)" in note
    assert "app: exit code 7" in note and "sidecar: exit code 0" in note
    assert "hunter2" not in note


async def test_a_timed_out_run_emits_notifier_timed_out(setup: Setup) -> None:
    setup.execute.results["app"] = result(None, SECRET, reason=ExecReason.TIMEOUT,
                                          message="no exit status within 30s")
    await setup.run(await setup.plan("app"))
    assert setup.events.reasons() == ["NotifierTimedOut", "NotifierTimedOut"]
    note = setup.events.occurrences[0].note
    assert "app: Timeout" in note and "hunter2" not in note


async def test_a_pod_not_running_emits_notifier_failed(setup: Setup) -> None:
    await setup.run(await setup.plan("app", pod_not_running="pod is Pending"))
    assert setup.events.reasons() == ["NotifierFailed", "NotifierFailed"]
    assert "PodNotRunning" in setup.events.occurrences[0].note


async def test_an_interrupted_run_emits_nothing(setup: Setup) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    setup.runner.start(await setup.plan("app"))
    await asyncio.sleep(0.05)
    await setup.runner.shutdown()
    assert setup.events.occurrences == []


def test_the_note_says_the_duration() -> None:
    record = {"metadata": {"name": "r"}, "spec": {"notifier": "quiesce"},
              "status": {"phase": "Succeeded", "startTime": "2026-01-01T00:00:00.000Z",
                         "completionTime": "2026-01-01T00:00:00.027Z",
                         "containers": [{"name": "app", "exitCode": 0}]}}
    assert run_note(record) == ("notifier quiesce succeeded in 27ms; containers: "
                                "app: exit code 0; PodNotifier r")


@pytest.fixture
async def fanout(tmp_path: Path) -> AsyncIterator[tuple[Server, RecordingSink]]:
    server = await Server.open(tmp_path / "data")
    sink = RecordingSink()
    await server.manager.step_down()
    server.manager = FanoutManager(replace(server.manager.parts, events=NotificationEvents(sink)),
                                   sweep_delay=0.01, scope_grace=0)
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
