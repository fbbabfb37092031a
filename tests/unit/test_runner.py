"""The Runner with a fake exec and fake pod deletions over the real SQLite store: outcomes,
deletion and shutdown mid-run, a final write that fails until the disk is freed, progress
writes that fail, and the server-wide bound."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from apiserver.jsonlog import JSONFormatter
from apiserver.notifier import records
from apiserver.notifier.declarations import ExecAction, Notifier, SignalAction
from apiserver.notifier.events import RunEvents
from apiserver.notifier.exec_protocol import ExecReason, Stop
from apiserver.notifier.exec_stream import ExecResult
from apiserver.notifier.http_action import PodRequests
from apiserver.notifier.http_declaration import HttpAction
from apiserver.notifier.runner import ContainerPlan, Plan, Runner, retry_until_stored
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import ObjectStore
from tests.support.events import RecordingSink
from tests.support.pod_http import Answer, PodHttpServer

NS = "prod"


def result(exit_code: int | None = 0, stdout: bytes = b"", reason: ExecReason | None = None,
           message: str = "") -> ExecResult:
    now = datetime.now(UTC)
    return ExecResult(exit_code, stdout, b"", False, False,
                      reason or (ExecReason.COMPLETED if exit_code == 0
                                 else ExecReason.NON_ZERO_EXIT_CODE), message, now, now)


@dataclass
class FakeExec:
    """Answers `results[container]` (success by default) after `gates[container]` is set;
    counts execs running at once."""

    results: dict[str, ExecResult | Exception] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    stop_on_timeout: list[bool] = field(default_factory=list)
    grace_seconds: list[int] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    running: int = 0
    peak: int = 0

    async def __call__(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                       *, timeout_seconds: int, tail_bytes: int,
                       stop_on_timeout: bool = False, grace_seconds: int = 5) -> ExecResult:
        self.calls.append((pod, container, tuple(argv)))
        self.stop_on_timeout.append(stop_on_timeout)
        self.grace_seconds.append(grace_seconds)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if container in self.gates:
                await self.gates[container].wait()
            else:
                await asyncio.sleep(0.01)
            answer = self.results.get(container, result(0, b"ok\n"))
            if isinstance(answer, Exception):
                raise answer
            return answer
        except asyncio.CancelledError:
            self.cancelled.append(container)
            raise
        finally:
            self.running -= 1


class FakePodDeletions:
    def __init__(self) -> None:
        self.events: list[asyncio.Event] = []
        self.deleted = False

    @contextlib.contextmanager
    def deletion(self, namespace: str, name: str, uid: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        if self.deleted:
            event.set()
        self.events.append(event)
        yield event

    def gone(self, namespace: str, name: str, uid: str) -> bool:
        return self.deleted

    def delete(self) -> None:
        self.deleted = True
        for event in self.events:
            event.set()


@dataclass
class FakeMetrics:
    started: int = 0
    finished: list[tuple[str, str]] = field(default_factory=list)

    def run_started(self) -> None:
        self.started += 1

    def run_finished(self, phase: str, reason: str, duration_seconds: float) -> None:
        self.finished.append((phase, reason))


class FlakyStore:
    """The store, but `guaranteed_update` fails with `error` while `failing(updated)` holds
    for the object the update would store (e.g. a final write while the disk is full)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.failing: Callable[[dict[str, Any]], bool] = lambda updated: False
        self.error: Exception = OSError("database or disk is full")
        self.failures = 0

    async def guaranteed_update(self, namespace: str, name: str,
                                mutate: Callable[[dict[str, Any]], dict[str, Any]]
                                ) -> dict[str, Any]:
        def checked(obj: dict[str, Any]) -> dict[str, Any]:
            updated = mutate(obj)
            if self.failing(updated):
                self.failures += 1
                raise self.error
            return updated

        return await self.store.guaranteed_update(namespace, name, checked)


@dataclass
class Setup:
    store: PodNotifierStore
    flaky: FlakyStore
    execute: FakeExec
    pods: FakePodDeletions
    metrics: FakeMetrics
    runner: Runner
    events: RecordingSink

    async def plan(self, *containers: str, not_running: dict[str, str] | None = None,
                   pod_not_running: str = "", signal: bool = False,
                   http: HttpAction | None = None, pod_ip: str = "") -> Plan:
        record = records.mark_running(records.new_record(records.RecordRequest(
            namespace=NS, pod="db-0", pod_uid="uid-0", notifier="quiesce",
            containers=list(containers), requested_containers=None, timeout_seconds=None,
            ttl_seconds_after_finished=3600, name="", generate_name="", labels={},
            requested_by=records.UserInfo("u", "", []))), records.now())
        created = await self.store.create(record)
        action: ExecAction | SignalAction | HttpAction = http or (
            SignalAction("SIGHUP") if signal else ExecAction(("/bin/sh", "-c", "true")))
        return Plan(NS, created["metadata"]["name"], "db-0", "uid-0", tuple(
            ContainerPlan(c, Notifier("quiesce", 30, action), f"cid-{c}",
                          (not_running or {}).get(c, "")) for c in containers),
            {c: 30 for c in containers}, 4096, pod_not_running, requester="u", pod_ip=pod_ip)

    async def run(self, plan: Plan) -> dict[str, Any]:
        self.runner.start(plan)
        await self.runner.wait(NS, plan.record, 5)
        return await self.store.get(NS, plan.record)


@pytest.fixture
async def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Setup]:
    monkeypatch.setattr("apiserver.notifier.runner.RETRY_INITIAL_SECONDS", 0.001)
    monkeypatch.setattr("apiserver.notifier.runner.RETRY_MAX_SECONDS", 0.01)
    database = await SqliteDatabase.open(tmp_path / "data")
    store = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    flaky, execute, pods, metrics = FlakyStore(store), FakeExec(), FakePodDeletions(), FakeMetrics()
    events = RecordingSink()
    requests = PodRequests()
    runner = Runner(flaky, execute, pods, metrics, max_concurrent=2,  # type: ignore[arg-type]
                    events=RunEvents(events), requests=requests)
    yield Setup(store, flaky, execute, pods, metrics, runner, events)
    await runner.shutdown()
    await requests.aclose()
    store.close()
    await database.close()


async def test_a_run_that_succeeds(setup: Setup) -> None:
    done = await setup.run(await setup.plan("app", "sidecar"))
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Completed")
    assert [(c["name"], c["phase"], c["stdout"], c["containerID"])
            for c in status["containers"]] == [("app", "Succeeded", "ok\n", "cid-app"),
                                               ("sidecar", "Succeeded", "ok\n", "cid-sidecar")]
    assert setup.metrics.finished == [("Succeeded", "Completed")]
    assert setup.execute.peak == 2  # the containers run at once


async def test_an_http_notifier_sends_one_request_to_the_pod_ip_and_execs_nothing(
        setup: Setup) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(503, b"not now")) as server:
        plan = await setup.plan("web", http=HttpAction("POST", server.port, "/-/reload"),
                                pod_ip="127.0.0.1")
        status = (await setup.run(plan))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NonSuccessStatusCode")
    assert status["message"] == "1/1 containers failed (web: HTTP status 503)"
    (container,) = status["containers"]
    assert (container["statusCode"], container["responseBody"]) == (503, "not now")
    assert [(r.method, r.path) for r in server.requests] == [("POST", "/-/reload")]
    assert setup.execute.calls == []
    assert setup.metrics.finished == [("Failed", "NonSuccessStatusCode")]


async def test_a_non_zero_exit_fails_the_run(setup: Setup) -> None:
    setup.execute.results["app"] = result(3)
    status = (await setup.run(await setup.plan("app")))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NonZeroExitCode")
    assert status["containers"][0]["exitCode"] == 3


async def test_a_signal_that_cannot_be_delivered_says_why(setup: Setup) -> None:
    setup.execute.results["app"] = result(127)
    status = (await setup.run(await setup.plan("app", signal=True)))["status"]
    assert records.NO_KILL_HINT in status["containers"][0]["message"]


async def test_exec_notifiers_are_stopped_on_timeout_and_signals_are_not(setup: Setup) -> None:
    await setup.run(await setup.plan("app"))
    await setup.run(await setup.plan("app", signal=True))
    assert setup.execute.stop_on_timeout == [True, False]


async def test_how_a_timed_out_command_was_stopped_is_recorded(setup: Setup) -> None:
    setup.execute.results["app"] = dataclasses.replace(
        result(None, reason=ExecReason.TIMEOUT, message="stopped with SIGTERM"),
        stopped=Stop.TERMINATED)
    status = (await setup.run(await setup.plan("app")))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Timeout")
    (container,) = status["containers"]
    assert container["stopped"] == "Terminated"
    assert container["message"] == "stopped with SIGTERM"


async def test_a_pod_not_running_runs_nothing(setup: Setup) -> None:
    status = (await setup.run(await setup.plan("app", pod_not_running="pod is Pending")))[
        "status"]
    assert (status["phase"], status["reason"]) == ("Failed", "PodNotRunning")
    assert setup.execute.calls == []


async def test_a_container_not_running_fails_alone(setup: Setup) -> None:
    plan = await setup.plan("app", "sidecar", not_running={"sidecar": "it is waiting"})
    status = (await setup.run(plan))["status"]
    assert [c["name"] for c in status["containers"] if c["phase"] == "Failed"] == ["sidecar"]
    assert status["containers"][1]["reason"] == "ContainerNotRunning"
    assert [call[1] for call in setup.execute.calls] == ["app"]


async def test_a_pod_deleted_mid_run_ends_podDeleted(setup: Setup) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    plan = await setup.plan("app")
    setup.runner.start(plan)
    await _until(lambda: setup.execute.running == 1)
    setup.pods.delete()
    await setup.runner.wait(NS, plan.record, 5)
    status = (await setup.store.get(NS, plan.record))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "PodDeleted")
    assert setup.execute.cancelled == ["app"]


async def test_shutdown_mid_run_ends_it_interrupted_keeping_finished_containers(
        setup: Setup) -> None:
    setup.execute.gates["slow"] = asyncio.Event()
    plan = await setup.plan("fast", "slow")
    setup.runner.start(plan)
    await _until(lambda: len(setup.execute.calls) == 2 and setup.execute.running == 1)
    await asyncio.sleep(0.05)
    await setup.runner.shutdown()
    status = (await setup.store.get(NS, plan.record))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted")
    assert [(c["name"], c["phase"]) for c in status["containers"]] == [
        ("fast", "Succeeded"), ("slow", "Failed")]


async def test_the_final_state_is_retried_until_stored(
        setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    """A final write refused (disk full) is retried: the record does not stay Running, so a
    later run of the notifier on the pod is not refused with 409 for ever."""
    setup.flaky.failing = lambda updated: (records.is_finished(updated)
                                           and setup.flaky.failures < 5)
    with caplog.at_level(logging.WARNING, logger="apiserver.notifier.runner"):
        done = await setup.run(await setup.plan("app"))
    assert done["status"]["phase"] == "Succeeded"
    assert setup.flaky.failures == 5
    retries = [r for r in caplog.records if "final state failed; retrying" in r.getMessage()]
    assert len(retries) == 5
    assert setup.runner.has_capacity()


async def test_a_run_writes_its_record_once_when_it_ends(setup: Setup) -> None:
    """Admission creates the record Running: the run's only write is its final state, with
    every container's result (no write per container in between)."""
    written: list[dict[str, Any]] = []

    def note(updated: dict[str, Any]) -> bool:
        written.append(updated)
        return False

    setup.flaky.failing = note
    done = await setup.run(await setup.plan("app", "sidecar"))
    assert done["status"]["phase"] == "Succeeded"
    assert len(written) == 1 and records.is_finished(written[0])
    assert [c["stdout"] for c in written[0]["status"]["containers"]] == ["ok\n", "ok\n"]


async def test_a_record_deleted_mid_run_ends_the_run(setup: Setup) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    plan = await setup.plan("app")
    setup.runner.start(plan)
    await _until(lambda: setup.execute.running == 1)
    await setup.store.delete(NS, plan.record)
    setup.execute.gates["app"].set()
    await setup.runner.wait(NS, plan.record, 5)
    assert setup.metrics.finished == [("Failed", "RecordDeleted")]
    with pytest.raises(NotFound):
        await setup.store.get(NS, plan.record)


async def test_an_unexpected_exec_error_ends_the_run_internalError(setup: Setup) -> None:
    setup.execute.results["app"] = RuntimeError("bug")
    status = (await setup.run(await setup.plan("app")))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InternalError")
    assert "RuntimeError" in status["message"]


async def test_capacity_is_bounded_across_the_server(setup: Setup) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    plans = [await setup.plan("app") for _ in range(2)]
    assert setup.runner.has_capacity()
    for plan in plans:
        setup.runner.start(plan)
    assert not setup.runner.has_capacity()
    setup.execute.gates["app"].set()
    for plan in plans:
        await setup.runner.wait(NS, plan.record, 5)
    assert setup.runner.has_capacity()


def _finished_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "apiserver.notifier.runner" and r.getMessage() == "run finished"]


async def test_a_finished_run_logs_one_line_with_its_outcome_and_never_its_output(
        setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    setup.execute.results["app"] = dataclasses.replace(
        result(3, b"stdout SECRET-1\n", message="exited with SECRET-2"),
        stderr=b"stderr SECRET-3\n")
    with caplog.at_level(logging.INFO, logger="apiserver.notifier.runner"):
        plan = await setup.plan("app")
        done = await setup.run(plan)
        await _until(lambda: len(_finished_lines(caplog)) == 1)
    assert "SECRET" in json.dumps(done["status"])  # the record keeps what the log must not
    (line,) = _finished_lines(caplog)
    assert line.levelno == logging.INFO
    fields = {key: getattr(line, key) for key in (
        "namespace", "podnotifier", "pod", "notifier", "phase", "reason", "requester")}
    assert fields == {"namespace": NS, "podnotifier": plan.record, "pod": "db-0",
                      "notifier": "quiesce", "phase": "Failed", "reason": "NonZeroExitCode",
                      "requester": "u"}
    assert 0 <= line.duration_seconds < 5
    assert not hasattr(line, "held_time")
    formatted = JSONFormatter().format(line)
    assert "SECRET" not in formatted and "stdout" not in formatted, formatted


async def test_a_run_whose_record_was_deleted_logs_its_end_once(
        setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    setup.execute.gates["app"] = asyncio.Event()
    plan = await setup.plan("app")
    with caplog.at_level(logging.INFO, logger="apiserver.notifier.runner"):
        setup.runner.start(plan)
        await _until(lambda: setup.execute.running == 1)
        await setup.store.delete(NS, plan.record)
        setup.execute.gates["app"].set()
        await _until(lambda: setup.metrics.finished != [])
    (line,) = _finished_lines(caplog)
    assert (line.phase, line.reason, line.notifier, line.requester) == (
        "Failed", "RecordDeleted", "quiesce", "u")


async def test_retry_until_stored_backs_off_capped_and_gives_up_on_request() -> None:
    sleeps: list[float] = []
    attempts = 0

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def write() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 10:
            raise OSError("disk full")
        return "stored"

    assert await retry_until_stored(write, "write", sleep=sleep) == "stored"
    assert len(sleeps) == 9
    for failure, slept in enumerate(sleeps, start=1):
        ceiling = min(5.0, 0.1 * 2 ** (failure - 1))  # doubling from 0.1 s, capped at 5 s
        assert ceiling / 2 <= slept <= ceiling

    async def gone() -> str:
        raise NotFound("gone")

    with pytest.raises(NotFound):
        await retry_until_stored(gone, "write", give_up=(NotFound,), sleep=sleep)


async def _until(check: Callable[[], bool], timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)
