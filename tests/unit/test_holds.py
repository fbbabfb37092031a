"""Held notifiers: the hold declaration (readyLine or readyCommand), the ready line and the ready
command, the runner's held lifecycle with a fake held exec over the real SQLite store (the tails
while Held, release, HoldExpired, PodDeleted, HoldEnded, shutdown, failures before ready, the
Events), and release requests (``HoldReleases``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from apiserver.api.tables import PODNOTIFIER_TABLE
from apiserver.authn.user import UserInfo
from apiserver.notifier import records
from apiserver.notifier.admission import Admission, Limits
from apiserver.notifier.declarations import (
    ANNOTATION,
    ExecAction,
    Hold,
    InvalidNotifiers,
    Notifier,
    parse_notifiers,
)
from apiserver.notifier.errors import InvalidDeclaration, InvalidSelection
from apiserver.notifier.events import RunEvents
from apiserver.notifier.exec_protocol import ExecReason, Stop
from apiserver.notifier.exec_stream import ExecResult, OutputTails
from apiserver.notifier.held_exec import HeldCommand
from apiserver.notifier.holds import HoldReleases, NotHeldNotifier
from apiserver.notifier.housekeeping import recover_interrupted
from apiserver.notifier.request import NotifyRequest
from apiserver.notifier.runner import ContainerPlan, Plan, Runner
from apiserver.notifier.stopping import PidMarker, ReadyLine, Stopped
from apiserver.notifier.trust import TrustDecision
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from tests.support.events import RecordingSink
from tests.unit.test_runner import NS, FakeExec, FakeMetrics, FakePodDeletions, result

EXEC = {"exec": {"command": ["/bin/sh", "-c", "echo ready; exec sleep 60"]}}


# The declaration


def _parse(notifier: dict[str, Any], **limits: int) -> Notifier:
    return parse_notifiers(json.dumps({"db": [notifier]}), **limits)["db"][0]


def _errors(notifier: dict[str, Any], **limits: int) -> list[str]:
    with pytest.raises(InvalidNotifiers) as raised:
        _parse(notifier, **limits)
    return [str(error) for error in raised.value.errors]


def test_a_hold_is_declared_with_its_ready_line_and_bound() -> None:
    parsed = _parse({"name": "lock", "action": EXEC,
                     "hold": {"readyLine": "locked", "maxHoldSeconds": 600}})
    assert parsed.hold == Hold(600, "locked")
    assert _parse({"name": "lock", "action": EXEC, "hold": {"maxHoldSeconds": 5}}).hold == Hold(
        5, "ready")
    assert _parse({"name": "q", "action": EXEC}).hold is None


def test_max_hold_seconds_is_required_and_bounded_by_the_flag() -> None:
    path = "metadata.annotations[notifier.x-k8s.io/notifiers].db[0].hold"
    (missing,) = _errors({"name": "lock", "action": EXEC, "hold": {}})
    assert missing.startswith(f"{path}.maxHoldSeconds: Required value")
    (high,) = _errors({"name": "lock", "action": EXEC, "hold": {"maxHoldSeconds": 61}},
                      max_hold_seconds=60)
    assert high.startswith(f"{path}.maxHoldSeconds: Invalid value: 61: must be between 1 and "
                           "60 seconds"), high
    assert "--max-hold-seconds" in high
    (zero,) = _errors({"name": "lock", "action": EXEC, "hold": {"maxHoldSeconds": 0}})
    assert "must be between 1 and 3600" in zero


def test_a_signal_notifier_cannot_be_held() -> None:
    (error,) = _errors({"name": "r", "action": {"signal": "SIGHUP"},
                        "hold": {"maxHoldSeconds": 5}})
    assert "db[0].hold: Invalid value" in error and "signal notifier cannot be held" in error


def test_a_hold_may_be_ready_by_a_command_polled_at_its_period() -> None:
    parsed = _parse({"name": "lock", "action": EXEC, "hold": {
        "readyCommand": ["test", "-e", "/run/locked"], "readyPeriodSeconds": 2,
        "maxHoldSeconds": 60}})
    assert parsed.hold == Hold(60, None, ("test", "-e", "/run/locked"), 2)
    default = _parse({"name": "lock", "action": EXEC, "hold": {
        "readyCommand": ["pg_isready"], "maxHoldSeconds": 60}})
    assert default.hold == Hold(60, None, ("pg_isready",), 1)


HOLD_PATH = "metadata.annotations[notifier.x-k8s.io/notifiers].db[0].hold"


@pytest.mark.parametrize(("hold", "field", "expected"), [
    ({"readyLine": "ready", "readyCommand": ["true"]}, "readyCommand",
     "readyLine and readyCommand are exclusive"),
    ({"readyPeriodSeconds": 5}, "readyPeriodSeconds", "only a readyCommand is polled"),
    ({"readyCommand": []}, "readyCommand", "must name the program to run"),
    ({"readyCommand": [""]}, "readyCommand[0]", "the program must be named"),
    ({"readyCommand": "test -e x"}, "readyCommand", "must be a list of strings (an argv)"),
    ({"readyCommand": ["true"], "readyPeriodSeconds": 0}, "readyPeriodSeconds",
     "must be between 1 and 60 seconds"),
    ({"readyCommand": ["true"], "readyPeriodSeconds": 61}, "readyPeriodSeconds",
     "must be between 1 and 60 seconds"),
    ({"readyCommand": ["true"], "readyPeriodSeconds": 1.5}, "readyPeriodSeconds",
     "must be a whole number of seconds"),
])
def test_a_ready_command_is_validated_naming_the_field(hold: dict[str, Any], field: str,
                                                       expected: str) -> None:
    (error,) = _errors({"name": "lock", "action": EXEC, "hold": {**hold, "maxHoldSeconds": 5}})
    assert error.startswith(f"{HOLD_PATH}.{field}: Invalid value: "), error
    assert expected in error, error


@pytest.mark.parametrize(("line", "expected"), [
    ("", "must not be empty"), ("a\nb", "must be one line"), ("x" * 257, "no more than 256")])
def test_a_ready_line_is_one_non_empty_line(line: str, expected: str) -> None:
    (error,) = _errors({"name": "lock", "action": EXEC,
                        "hold": {"readyLine": line, "maxHoldSeconds": 5}})
    assert "hold.readyLine: Invalid value" in error and expected in error


# The ready line


def _ready(frames: Sequence[bytes], line: str = "ready") -> tuple[bool, bytes, int | None]:
    marker = PidMarker()
    ready = ReadyLine(marker, line)
    output = b"".join(ready.feed(frame) for frame in frames) + ready.end()
    return ready.seen.is_set(), output, marker.pid


def test_the_ready_line_is_seen_after_the_marker_and_stays_in_the_output() -> None:
    assert _ready([b"container-notifier-pid 7\nlocking\nready\n"]) == (
        True, b"locking\nready\n", 7)


def test_the_ready_line_may_arrive_split_and_end_in_crlf() -> None:
    assert _ready([b"container-notifier-pid 7\nre", b"ad", b"y\r", b"\n"])[:2] == (
        True, b"ready\r\n")


@pytest.mark.parametrize("frames", [
    [b"container-notifier-pid 7\nready"],  # no line end yet
    [b"container-notifier-pid 7\nnot ready\n", b"ready now\n"],
    [b"container-notifier-pid 7\n" + b"x" * 5000 + b"ready\n"],
])
def test_only_a_whole_line_equal_to_it_is_ready(frames: list[bytes]) -> None:
    assert _ready(frames)[0] is False


# Admission


class Trusted:
    async def decide(self, user: UserInfo, pod: dict[str, Any]) -> TrustDecision:
        return TrustDecision(True, "PodExec", "")


def _pod(**containers: dict[str, Any] | None) -> dict[str, Any]:
    declared = {name: [notifier] for name, notifier in containers.items() if notifier}
    return {"metadata": {"namespace": "ns", "name": "db-0", "uid": "u1",
                         "annotations": {ANNOTATION: json.dumps(declared)}},
            "spec": {"containers": [{"name": name} for name in containers]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": name, "state": {"running": {}}} for name in containers]}}


def _admission(max_hold_seconds: int = 3600) -> Admission:
    return Admission(pods=None, trust=Trusted(), records=None, runner=None,  # type: ignore[arg-type]
                     limits=Limits(max_timeout_seconds=600, output_tail_bytes=4096,
                                   default_ttl_seconds_after_finished=3600,
                                   max_records_per_pod=10, max_concurrent_executions=2,
                                   max_hold_seconds=max_hold_seconds))


def _ask(notifier: str = "lock") -> NotifyRequest:
    return NotifyRequest(name="", generate_name="", labels={}, notifier=notifier,
                         containers=None, timeout_seconds=None, ttl_seconds_after_finished=None)


def _held(max_hold: int) -> dict[str, Any]:
    return {"name": "lock", "action": EXEC, "hold": {"maxHoldSeconds": max_hold}}


async def test_admitting_a_held_notifier_records_its_least_bound() -> None:
    admitted = await _admission().admit(UserInfo("u"), _pod(db=_held(600), side=_held(60)),
                                        _ask())
    assert admitted.max_hold_seconds == 60
    assert admitted.record["status"]["maxHoldSeconds"] == 60
    plain = await _admission().admit(UserInfo("u"), _pod(db={"name": "lock", "action": EXEC}),
                                     _ask())
    assert plain.max_hold_seconds is None and "maxHoldSeconds" not in plain.record["status"]


async def test_admission_bounds_holds_by_the_servers_flag() -> None:
    with pytest.raises(InvalidDeclaration) as raised:
        await _admission(max_hold_seconds=30).admit(UserInfo("u"), _pod(db=_held(60)), _ask())
    assert "hold.maxHoldSeconds: Invalid value: 60: must be between 1 and 30" in (
        raised.value.message)


async def test_one_run_cannot_hold_some_containers_and_not_others() -> None:
    pod = _pod(db=_held(60), side={"name": "lock", "action": EXEC})
    with pytest.raises(InvalidSelection) as raised:
        await _admission().admit(UserInfo("u"), pod, _ask())
    assert 'is held in containers db but not in side' in raised.value.message


def test_a_held_record_shows_held_in_kubectl_get() -> None:
    row = PODNOTIFIER_TABLE.row(records.mark_held(records.mark_running(
        records.new_record(records.RecordRequest(
            namespace="ns", pod="db-0", pod_uid="u1", notifier="lock", containers=["db"],
            requested_containers=None, timeout_seconds=None, ttl_seconds_after_finished=60,
            name="lock-1", generate_name="", labels={}, requested_by=UserInfo("u"),
            max_hold_seconds=60)), "2026-12-01T10:00:00.000Z"), "2026-12-01T10:00:01.000Z",
        {"db": 12}), now=datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC))
    names = [column.name for column in PODNOTIFIER_TABLE.columns]
    cells = dict(zip(names, row["cells"], strict=True))
    assert (cells["Phase"], cells["Exit"], cells["Duration"]) == ("Held", "-", "5s")


async def test_restart_recovery_stops_this_replicas_held_commands(tmp_path: Path) -> None:
    database = await SqliteDatabase.open(tmp_path / "data")
    store = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-a")
    held = records.mark_held(records.new_record(records.RecordRequest(
        namespace="ns", pod="db-0", pod_uid="u1", notifier="lock", containers=["db"],
        requested_containers=None, timeout_seconds=None, ttl_seconds_after_finished=60,
        name="lock-1", generate_name="", labels={}, requested_by=UserInfo("u"),
        max_hold_seconds=60)), records.now(), {"db": 12})
    await store.create_bounded(held, max_per_pod=10)
    stopped: list[tuple[str, str, str, int]] = []

    class Stopper:
        async def stop(self, namespace: str, pod: str, container: str, pid: int) -> Stopped:
            stopped.append((namespace, pod, container, pid))
            return Stopped(Stop.KILLED, f"the command (PID {pid}) was killed with SIGKILL")

    try:
        assert await recover_interrupted(store, stopper=Stopper()) == 1
        status = (await store.get("ns", "lock-1"))["status"]
    finally:
        store.close()
        await database.close()
    assert stopped == [("ns", "db-0", "db", 12)]
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted")
    assert status["message"].endswith("the held command was stopped by PID: db: stopped (the "
                                      "command (PID 12) was killed with SIGKILL)")


# One held command (held_exec)


class FakeStream:
    """The held exec: prints the marker and the ready line, then waits for its stdin to close;
    a command that ignores stdin EOF (as under kwok) runs until it is signalled."""

    def __init__(self, honours_eof: bool) -> None:
        self.honours_eof = honours_eof
        self.signalled = asyncio.Event()
        self.stopped: list[int] = []
        self.argv: list[str] = []

    async def __call__(self, argv: Sequence[str], timeout: float, stdout_filter: Any,
                       close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
        self.argv = list(argv)
        for frame in (b"container-notifier-pid 77\nlocking\n", b"ready\n"):
            tails.stdout.write(stdout_filter.feed(frame))
        tails.stderr.write(b"warming up\n")
        await close_stdin.wait()
        if not self.honours_eof:
            await self.signalled.wait()
            return result(143, b"locking\nready\n")
        return result(0, b"locking\nready\n")

    async def stop(self, pid: int) -> Stopped:
        self.stopped.append(pid)
        self.signalled.set()
        return Stopped(Stop.TERMINATED, f"the command (PID {pid}) was stopped with SIGTERM")


@pytest.mark.parametrize("honours_eof", [True, False])
async def test_a_held_command_is_released_by_closing_stdin_then_by_its_pid(
        honours_eof: bool) -> None:
    stream = FakeStream(honours_eof)
    command = HeldCommand(stream, stream.stop, ["mysql"], "ready", 60, release_grace_seconds=0.05)
    await asyncio.wait_for(command.ready.wait(), 1)
    assert command.pid == 77 and stream.argv[0] == "/bin/sh" and stream.argv[-1] == "mysql"
    assert not command.ended.is_set()
    so_far = command.output()
    assert (so_far.stdout.value(), so_far.stderr.value()) == (b"locking\nready\n",
                                                              b"warming up\n")
    ended, stopped = await command.release()
    assert ended.stdout == b"locking\nready\n"  # the marker is off, the ready line kept
    if honours_eof:
        assert (stopped.stop, stream.stopped) == (Stop.EXITED, [])
        assert stopped.how == "the command (PID 77) exited once its stdin was closed"
    else:
        assert (stopped.stop, stream.stopped, ended.exit_code) == (Stop.TERMINATED, [77], 143)


async def test_a_command_whose_stream_broke_is_stopped_by_pid_once_the_pod_is_reachable(
        ) -> None:
    stream = FakeStream(honours_eof=False)
    answers = [Stopped(Stop.NOT_STOPPED, "the stop exec failed: kube-apiserver unavailable")] * 2
    asked: list[int] = []

    async def stop(pid: int) -> Stopped:
        asked.append(pid)
        return answers.pop(0) if answers else await stream.stop(pid)

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    command = HeldCommand(stream, stop, ["psql"], "ready", 60)
    await asyncio.wait_for(command.ready.wait(), 1)
    stopped = await command.stop_lost(sleep=sleep)
    assert (stopped.stop, asked, slept) == (Stop.TERMINATED, [77, 77, 77], [0.5, 1.0])
    await command.cancel()


async def test_a_held_command_without_a_shell_says_it_needs_one() -> None:
    async def no_shell(argv: Sequence[str], timeout: float, stdout_filter: Any,
                       close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
        return result(127)

    async def never(pid: int) -> Stopped:
        raise AssertionError("nothing to stop")

    command = HeldCommand(no_shell, never, ["mysql"], "ready", 60)
    await asyncio.wait_for(command.ended.wait(), 1)
    ended = await command.result()
    assert not command.ready.is_set() and "a held notifier runs through /bin/sh" in ended.message


class SilentStream(FakeStream):
    """A held command that prints only the marker: readiness is its ready command's."""

    async def __call__(self, argv: Sequence[str], timeout: float, stdout_filter: Any,
                       close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
        tails.stdout.write(stdout_filter.feed(b"container-notifier-pid 78\nready\n"))
        await close_stdin.wait()
        return result(0)


async def test_a_held_command_with_a_ready_command_is_ready_when_it_first_exits_0() -> None:
    stream, answers, checks = SilentStream(True), [1, 1, 0], []

    async def check() -> ExecResult:
        checks.append(len(checks))
        return result(answers[len(checks) - 1])

    command = HeldCommand(stream, stream.stop, ["psql"], None, 60, ready_check=check,
                          ready_period_seconds=0.01)
    await asyncio.wait_for(command.ready.wait(), 2)
    assert checks == [0, 1, 2] and command.pid == 78  # a ready line is not looked for
    assert command.last_check is not None and command.last_check.exit_code == 0
    await command.release()
    assert len(checks) == 3, "checked again once ready"


async def test_a_ready_command_is_not_run_before_the_command_started() -> None:
    async def no_shell(argv: Sequence[str], timeout: float, stdout_filter: Any,
                       close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
        await asyncio.sleep(0.1)
        return result(127)

    async def check() -> ExecResult:
        raise AssertionError("the command never reported its PID")

    async def never(pid: int) -> Stopped:
        raise AssertionError("nothing to stop")

    command = HeldCommand(no_shell, never, ["psql"], None, 60, ready_check=check,
                          ready_period_seconds=0.01)
    await asyncio.wait_for(command.ended.wait(), 1)
    assert not command.ready.is_set() and command.last_check is None


# The runner's held lifecycle


class FakeHeld:
    """A held command: ready, exited or released when the test says."""

    def __init__(self, pid: int) -> None:
        self.pid: int | None = pid
        self.ready = asyncio.Event()
        self.ended = asyncio.Event()
        self.released = False
        self.stopped_lost = False
        self._result: ExecResult | None = None
        self.tails = OutputTails.bounded(4096)
        self.last_check: ExecResult | None = None

    def output(self) -> OutputTails:
        return self.tails

    def exit(self, code: int) -> None:
        self._result = result(code, b"ready\n")
        self.ended.set()

    def break_stream(self) -> None:
        """The exec stream broke (kube-apiserver went away): the end was not seen."""
        self._result = result(None, b"ready\n", reason=ExecReason.EXEC_FAILED,
                              message="the exec stream broke: connection reset")
        self.ended.set()

    async def stop_lost(self) -> Stopped:
        self.stopped_lost = True
        return Stopped(Stop.TERMINATED, f"the command (PID {self.pid}) was stopped with SIGTERM")

    async def result(self) -> ExecResult:
        await self.ended.wait()
        assert self._result is not None
        return self._result

    async def release(self) -> tuple[ExecResult, Stopped]:
        self.released = True
        self._result = result(None, b"ready\n", reason=ExecReason.EXEC_FAILED,
                              message="the exec stream broke")
        self.ended.set()
        return self._result, Stopped(Stop.TERMINATED,
                                     f"the command (PID {self.pid}) was stopped with SIGTERM")


@dataclass
class FakeHolding:
    commands: dict[str, FakeHeld] = field(default_factory=dict)
    ready_lines: list[str | None] = field(default_factory=list)
    hold_as: Hold | None = None
    """The hold the runner's plans declare (default: ready line "locked")."""
    graces: list[tuple[float, int]] = field(default_factory=list)

    def hold(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
             hold: Hold, tail_bytes: int, max_seconds: float,
             grace_seconds: int = 5) -> FakeHeld:
        self.ready_lines.append(hold.ready_line)
        self.graces.append((hold.release_grace_period_seconds, grace_seconds))
        self.commands[container] = FakeHeld(100 + len(self.commands))
        return self.commands[container]

    async def stop(self, namespace: str, pod: str, container: str, pid: int) -> Stopped:
        raise AssertionError("the runner stops its commands through them")


@dataclass
class Held:
    store: PodNotifierStore
    holding: FakeHolding
    pods: FakePodDeletions
    runner: Runner
    events: RecordingSink

    async def start(self, *containers: str, max_hold: int = 60, timeout: int = 30,
                    release_grace: int = 1, termination_grace: int = 5) -> str:
        record = records.mark_running(records.new_record(records.RecordRequest(
            namespace=NS, pod="db-0", pod_uid="uid-0", notifier="lock",
            containers=list(containers), requested_containers=None, timeout_seconds=None,
            ttl_seconds_after_finished=3600, name="", generate_name="", labels={},
            requested_by=UserInfo("u"), max_hold_seconds=max_hold)), records.now())
        created = await self.store.create(record)
        notifier = Notifier("lock", timeout, ExecAction(("sh", "-c", "echo ready")),
                            self.holding.hold_as
                            or Hold(max_hold, "locked", release_grace_period_seconds=release_grace),
                            termination_grace)
        name = created["metadata"]["name"]
        self.runner.start(Plan(NS, name, "db-0", "uid-0", tuple(
            ContainerPlan(c, notifier, f"cid-{c}") for c in containers),
            {c: timeout for c in containers}, 4096, max_hold_seconds=max_hold,
            requester="u"))
        await _until(lambda: all(c in self.holding.commands for c in containers))
        return name

    async def held(self, name: str) -> dict[str, Any]:
        """Every command ready; the record once the run settled (Held)."""
        for command in self.holding.commands.values():
            command.ready.set()
        await self.runner.wait(NS, name, 5)
        return await self.store.get(NS, name)

    async def finished(self, name: str) -> dict[str, Any]:
        async with asyncio.timeout(5):
            while not records.is_finished(record := await self.store.get(NS, name)):
                await asyncio.sleep(0.01)
        return record


@pytest.fixture
async def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Held]:
    monkeypatch.setattr("apiserver.notifier.runner.HOLD_POLL_SECONDS", 0.02)
    database = await SqliteDatabase.open(tmp_path / "data")
    store = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
    holding, pods, sink = FakeHolding(), FakePodDeletions(), RecordingSink()
    runner = Runner(store, FakeExec(), pods, FakeMetrics(), max_concurrent=4,
                    events=RunEvents(sink), holding=holding)  # type: ignore[arg-type]
    yield Held(store, holding, pods, runner, sink)
    await runner.shutdown()
    store.close()
    await database.close()


async def test_a_held_run_settles_held_with_each_pid_and_ends_released(held: Held) -> None:
    name = await held.start("db", "sidecar")
    assert held.holding.ready_lines == ["locked", "locked"]
    status = (await held.held(name))["status"]
    assert status["phase"] == "Held" and status["heldTime"]
    assert [(c["name"], c["phase"], c["pid"], c["heldTime"]) for c in status["containers"]] == [
        ("db", "Held", 100, status["heldTime"]), ("sidecar", "Held", 101, status["heldTime"])]
    await asyncio.sleep(0.1)
    assert not any(c.released for c in held.holding.commands.values()), "released unasked"

    requested = await HoldReleases(held.store).request(NS, name, UserInfo("alice"))
    assert requested["status"]["releaseRequestedBy"] == "alice"
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Released"), status
    assert status["releasedBy"] == "alice" and status["releasedTime"]
    assert all(c.released for c in held.holding.commands.values())
    for container in status["containers"]:
        assert (container["phase"], container["reason"], container["stopped"]) == (
            "Succeeded", "Released", "Terminated"), container
        assert "released by alice" in container["message"] and "pid" in container
    assert status["conditions"][0]["type"] == "Complete"


async def test_the_held_record_shows_the_output_so_far_in_the_same_write(held: Held) -> None:
    name = await held.start("db")
    command = held.holding.commands["db"]
    command.tails.stdout.write(b"lsn 0/3000028\nready\n")
    command.tails.stderr.write(b"NOTICE: backup started\n")
    before = (await held.store.get(NS, name))["metadata"]["resourceVersion"]
    record = await held.held(name)
    (container,) = record["status"]["containers"]
    assert (container["stdout"], container["stderr"]) == ("lsn 0/3000028\nready\n",
                                                          "NOTICE: backup started\n")
    assert (container["stdoutTruncated"], container["stderrTruncated"]) == (False, False)
    assert int(record["metadata"]["resourceVersion"]) == int(before) + 1, "one write to Held"


async def test_a_held_run_records_held_then_released_on_the_pod_and_the_record(
        held: Held) -> None:
    name = await held.start("db")
    await held.held(name)
    await HoldReleases(held.store).request(NS, name, UserInfo("alice"))
    await held.finished(name)
    await _until(lambda: len(held.events.occurrences) == 4)
    steps = [(o.regarding.kind, o.type, o.reason, o.action) for o in held.events.occurrences]
    assert steps == [("Pod", "Normal", "Held", "Hold"), ("PodNotifier", "Normal", "Held", "Hold"),
                     ("Pod", "Normal", "Released", "Release"),
                     ("PodNotifier", "Normal", "Released", "Release")]
    pod_held, record_held, released, _ = held.events.occurrences
    assert record_held.regarding.name == name and pod_held.regarding.name == "db-0"
    assert f"release podnotifier/{name}" in pod_held.note and "db: PID 100" in pod_held.note
    assert "requested by u was released by alice after " in released.note, released.note
    assert "db: Terminated" in released.note


async def test_an_expired_hold_records_hold_expired_and_other_ends_notifier_failed(
        held: Held) -> None:
    expired = await held.start("db", max_hold=1)
    await held.held(expired)
    await held.finished(expired)
    await _until(lambda: len(held.events.occurrences) == 4)
    assert [(o.regarding.kind, o.type, o.reason) for o in held.events.occurrences[2:]] == [
        ("Pod", "Warning", "HoldExpired"), ("PodNotifier", "Warning", "HoldExpired")]
    assert "not released within maxHoldSeconds (1s)" in held.events.occurrences[2].note

    ended = await held.start("side")
    await held.held(ended)
    held.holding.commands["side"].exit(0)
    await held.finished(ended)
    await _until(lambda: len(held.events.occurrences) == 7)
    assert [(o.regarding.kind, o.reason) for o in held.events.occurrences[4:]] == [
        ("Pod", "Held"), ("PodNotifier", "Held"), ("Pod", "NotifierFailed")]


async def test_a_ready_command_not_passing_in_time_says_what_it_last_said(held: Held) -> None:
    held.holding.hold_as = Hold(60, None, ("test", "-e", "/run/locked"), 2)
    name = await held.start("db", timeout=1)
    held.holding.commands["db"].last_check = result(1)
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Timeout"), status
    assert status["containers"][0]["message"].startswith(
        "its ready command test -e /run/locked did not exit 0 (the last run: exit code 1, run "
        "every 2s) within 1s; "), status
    assert held.holding.ready_lines == [None]


async def test_a_held_run_logs_its_end_with_its_held_time(
        held: Held, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="apiserver.notifier.runner"):
        name = await held.start("db")
        held_time = (await held.held(name))["status"]["heldTime"]
        await HoldReleases(held.store).request(NS, name, UserInfo("alice"))
        await held.finished(name)
        await _until(lambda: any(r.getMessage() == "run finished" for r in caplog.records))
    (line,) = [r for r in caplog.records if r.getMessage() == "run finished"]
    assert (line.podnotifier, line.notifier, line.phase, line.reason, line.requester,
            line.held_time) == (name, "lock", "Succeeded", "Released", "u", held_time)


async def test_a_release_requested_before_held_releases_once_held(held: Held) -> None:
    name = await held.start("db")
    await _until_phase(held, name, "Running")
    await HoldReleases(held.store).request(NS, name, UserInfo("early"))
    held.holding.commands["db"].ready.set()
    status = (await held.finished(name))["status"]
    assert (status["reason"], status["releasedBy"]) == ("Released", "early")


async def test_a_hold_nobody_releases_expires(held: Held) -> None:
    name = await held.start("db", max_hold=1)
    await held.held(name)
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "HoldExpired"), status
    assert held.holding.commands["db"].released
    assert "maxHoldSeconds (1s)" in status["containers"][0]["message"]


async def test_a_pod_deleted_while_held_ends_the_hold(held: Held) -> None:
    name = await held.start("db")
    await held.held(name)
    held.pods.delete()
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "PodDeleted"), status
    assert held.holding.commands["db"].released


async def test_a_command_exiting_while_held_ends_the_hold_and_stops_the_others(
        held: Held) -> None:
    name = await held.start("db", "sidecar")
    await held.held(name)
    held.holding.commands["db"].exit(0)
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "HoldEnded"), status
    db, sidecar = status["containers"]
    assert (db["reason"], db["exitCode"]) == ("HoldEnded", 0) and "stopped" not in db
    assert "exited on its own while held" in db["message"]
    assert sidecar["reason"] == "HoldEnded" and sidecar["stopped"] == "Terminated"
    assert not held.holding.commands["db"].released and held.holding.commands["sidecar"].released


async def test_a_held_command_whose_stream_broke_is_stopped_by_its_pid(held: Held) -> None:
    """On a real runtime the command outlives its broken stream, still holding its lock."""
    name = await held.start("db")
    await held.held(name)
    held.holding.commands["db"].break_stream()
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "HoldEnded"), status
    (db,) = status["containers"]
    assert db["stopped"] == "Terminated" and "exitCode" not in db
    assert "exec stream of the held command broke" in db["message"]
    assert "stopped with SIGTERM" in db["message"]
    assert held.holding.commands["db"].stopped_lost


async def test_shutdown_while_held_stops_the_commands_and_ends_interrupted(held: Held) -> None:
    name = await held.start("db")
    await held.held(name)
    await held.runner.shutdown()
    status = (await held.store.get(NS, name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
    assert "its commands were stopped" in status["message"]
    assert held.holding.commands["db"].released
    assert status["containers"][0]["stopped"] == "Terminated"


@pytest.mark.parametrize(("code", "reason"), [(3, "NonZeroExitCode"), (0, "NotReady")])
async def test_a_command_that_exits_before_ready_fails(held: Held, code: int, reason: str
                                                       ) -> None:
    name = await held.start("db")
    held.holding.commands["db"].exit(code)
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", reason), status
    assert status["containers"][0]["exitCode"] == code
    assert "heldTime" not in status


async def test_a_command_not_ready_in_time_is_stopped_with_the_others(held: Held) -> None:
    name = await held.start("db", "sidecar", timeout=1)
    held.holding.commands["sidecar"].ready.set()
    status = (await held.finished(name))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Timeout"), status
    db, sidecar = status["containers"]
    assert db["reason"] == "Timeout" and 'ready line "locked" within 1s' in db["message"]
    assert sidecar["reason"] == "NotReady" and sidecar["stopped"] == "Terminated"
    assert all(c.released for c in held.holding.commands.values())


async def test_a_held_run_counts_against_the_servers_bound(held: Held) -> None:
    names = [await held.start(f"c{i}") for i in range(4)]
    for name in names:
        await held.held(name)
    assert not held.runner.has_capacity()


# Release requests


async def test_releasing_is_idempotent_and_refused_for_records_that_do_not_hold(
        held: Held) -> None:
    releases = HoldReleases(held.store)
    name = await held.start("db")
    await held.held(name)
    first = await releases.request(NS, name, UserInfo("alice"))
    second = await releases.request(NS, name, UserInfo("bob"))
    assert second["status"]["releaseRequestedBy"] == "alice"
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    done = await held.finished(name)
    assert await releases.request(NS, name, UserInfo("carol")) == done

    plain = records.new_record(records.RecordRequest(
        namespace=NS, pod="db-0", pod_uid="uid-0", notifier="quiesce", containers=["db"],
        requested_containers=None, timeout_seconds=None, ttl_seconds_after_finished=60,
        name="plain", generate_name="", labels={}, requested_by=UserInfo("u")))
    await held.store.create(plain)
    with pytest.raises(NotHeldNotifier) as refused:
        await releases.request(NS, "plain", UserInfo("alice"))
    assert refused.value.code == 409 and '"quiesce", which is not held' in refused.value.message
    with pytest.raises(NotFound):
        await releases.request(NS, "missing", UserInfo("alice"))


async def _until_phase(held: Held, name: str, phase: str) -> None:
    async with asyncio.timeout(5):
        while (await held.store.get(NS, name))["status"]["phase"] != phase:
            await asyncio.sleep(0.01)


async def _until(check: Any, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)
