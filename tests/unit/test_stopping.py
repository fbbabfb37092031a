"""Timeouts that stop the command: the wrapper's marker read off stdout (whole, split across
frames, missing), the stop sequence with a fake exec, the fallback when the container has no
shell, and the wrapper and stop scripts run for real by the host's /bin/sh."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from apiserver.notifier.exec_protocol import ExecReason, Stop
from apiserver.notifier.exec_stream import ExecResult, StdoutFilter
from apiserver.notifier.stopping import (
    MARKER,
    SHELL,
    PidMarker,
    StoppingExec,
    kill_argv,
    wrap,
)

ARGV = ("/bin/sh", "-c", "sleep 30")


def _feed(frames: Sequence[bytes]) -> tuple[bytes, int | None]:
    marker = PidMarker()
    out = b"".join(marker.feed(frame) for frame in frames) + marker.end()
    return out, marker.pid


def test_marker_is_taken_off_the_output() -> None:
    assert _feed([MARKER + b"4242\nhello\n"]) == (b"hello\n", 4242)


def test_marker_split_across_frames() -> None:
    line = MARKER + b"4242\nhello\n"
    assert _feed([bytes([b]) for b in line]) == (b"hello\n", 4242)
    assert _feed([MARKER[:5], MARKER[5:] + b"42", b"42", b"\n", b"hel", b"lo\n"]) == (
        b"hello\n", 4242)


def test_output_without_marker_passes_whole() -> None:
    assert _feed([b"hello\n", b"world\n"]) == (b"hello\nworld\n", None)
    assert _feed([b"no newline at all"]) == (b"no newline at all", None)
    assert _feed([]) == (b"", None)
    long = b"x" * 200
    assert _feed([long[:100], long[100:]]) == (long, None)


def test_only_the_first_line_can_be_the_marker() -> None:
    later = b"hello\n" + MARKER + b"7\n"
    assert _feed([later]) == (later, None)
    assert _feed([MARKER + b"1\n" + MARKER + b"2\n"]) == (MARKER + b"2\n", 1)
    assert _feed([MARKER + b"12x\n"]) == (MARKER + b"12x\n", None)


def _result(reason: ExecReason, exit_code: int | None = None, stdout: bytes = b"",
            message: str = "") -> ExecResult:
    moment = datetime.now(UTC)
    return ExecResult(exit_code, stdout, b"", False, False, reason, message, moment, moment)


@dataclass
class FakeExec:
    """Answers each exec with the next of `answers`; a `(pid, result)` answer first feeds the
    wrapper's marker line for `pid` through the stdout filter."""

    answers: list[tuple[int | None, ExecResult]]
    calls: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    async def __call__(self, argv: Sequence[str], timeout: float,
                       stdout_filter: StdoutFilter | None) -> ExecResult:
        self.calls.append((tuple(argv), timeout))
        pid, answer = self.answers.pop(0)
        if stdout_filter is not None:
            if pid is not None:
                assert stdout_filter.feed(MARKER + str(pid).encode() + b"\n") == b""
            stdout_filter.end()
        return answer


TIMED_OUT = _result(ExecReason.TIMEOUT, message="no exit status within 2s")


@pytest.mark.parametrize(("said", "stopped", "phrase"), [
    (b"terminated\n", Stop.TERMINATED, "was stopped with SIGTERM"),
    (b"killed\n", Stop.KILLED, "did not exit within 5s of SIGTERM and was killed with SIGKILL"),
    (b"exited\n", Stop.EXITED, "had exited before it was signalled"),
])
async def test_timeout_runs_the_stop_sequence(said: bytes, stopped: Stop, phrase: str) -> None:
    execute = FakeExec([(4242, TIMED_OUT), (None, _result(ExecReason.COMPLETED, 0, said))])
    result = await StoppingExec(execute, grace_seconds=5)(ARGV, 2)
    (wrapped, timeout), (stop, stop_timeout) = execute.calls
    assert wrapped == tuple(wrap(ARGV)) and wrapped[-3:] == ARGV and timeout == 2
    assert stop == tuple(kill_argv(4242, 5)) and stop[-2:] == ("4242", "5")
    assert stop_timeout > 5
    assert result.reason == ExecReason.TIMEOUT
    assert result.stopped == stopped
    assert phrase in result.message and "PID 4242" in result.message


async def test_a_failed_stop_says_the_command_may_still_run() -> None:
    execute = FakeExec([(4242, TIMED_OUT),
                        (None, _result(ExecReason.EXEC_FAILED, message="forbidden"))])
    result = await StoppingExec(execute)(ARGV, 2)
    assert result.stopped == Stop.NOT_STOPPED
    assert "forbidden" in result.message and "may still run" in result.message


async def test_a_command_that_ends_in_time_is_not_signalled() -> None:
    ended = _result(ExecReason.NON_ZERO_EXIT_CODE, 3, b"partial\n")
    execute = FakeExec([(4242, ended)])
    result = await StoppingExec(execute)(ARGV, 2)
    assert result == ended and result.stopped is None
    assert len(execute.calls) == 1


@pytest.mark.parametrize("failed", [
    _result(ExecReason.NON_ZERO_EXIT_CODE, 127, message="exit status 127"),
    _result(ExecReason.NON_ZERO_EXIT_CODE, 126, message="exit status 126"),
    _result(ExecReason.NON_ZERO_EXIT_CODE, 128, message="exit status 128"),
    _result(ExecReason.EXEC_FAILED, message=f'exec: "{SHELL}": stat {SHELL}: no such file'),
])
async def test_no_shell_falls_back_to_the_plain_command(failed: ExecResult) -> None:
    execute = FakeExec([(None, failed), (None, _result(ExecReason.COMPLETED, 0, b"done\n"))])
    result = await StoppingExec(execute)(ARGV, 2)
    assert [argv for argv, _ in execute.calls] == [tuple(wrap(ARGV)), ARGV]
    assert result.stdout == b"done\n" and result.exit_code == 0 and result.stopped is None
    assert result.started == failed.started


async def test_no_shell_and_timeout_says_it_may_still_run() -> None:
    execute = FakeExec([(None, _result(ExecReason.NON_ZERO_EXIT_CODE, 127)), (None, TIMED_OUT)])
    result = await StoppingExec(execute)(ARGV, 2)
    assert len(execute.calls) == 2
    assert result.stopped == Stop.NOT_STOPPED
    assert "no shell" in result.message and "may still run" in result.message


async def test_timeout_before_the_marker_is_not_stopped() -> None:
    execute = FakeExec([(None, TIMED_OUT)])
    result = await StoppingExec(execute)(ARGV, 2)
    assert len(execute.calls) == 1
    assert result.stopped == Stop.NOT_STOPPED and "may still run" in result.message


@pytest.mark.parametrize("failed", [
    _result(ExecReason.EXEC_FAILED, message="kube-apiserver refused the exec (HTTP 403)"),
    _result(ExecReason.CONTAINER_NOT_RUNNING, message="container db is not running"),
    _result(ExecReason.POD_DELETED, message='pods "db-0" not found'),
])
async def test_other_failures_without_marker_are_not_retried(failed: ExecResult) -> None:
    execute = FakeExec([(None, failed)])
    assert await StoppingExec(execute)(ARGV, 2) == failed
    assert len(execute.calls) == 1


# The scripts themselves, run by this machine's /bin/sh (POSIX sh: dash here, busybox in many
# images).

def _start(argv: Sequence[str]) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen(wrap(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               bufsize=0)  # unbuffered: readline takes only the marker line
    assert process.stdout is not None
    marker = PidMarker()
    assert marker.feed(process.stdout.readline()) == b""
    assert marker.pid == process.pid, "the wrapper reports its own PID, which the command keeps"
    return process, marker.pid


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def _wait_for_children(pid: int) -> list[int]:
    deadline = time.monotonic() + 5
    while not (children := _children(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return children


def _gone(pids: list[int], timeout: float = 5) -> bool:
    """Whether every pid has exited (zombies count as gone) within `timeout`: a signal is
    delivered after kill(1) returns, not before."""
    deadline = time.monotonic() + timeout
    while any(_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_wrapper_keeps_output_stderr_and_exit_code() -> None:
    process, _ = _start(["/bin/sh", "-c", "echo out; echo err >&2; exit 7"])
    out, err = process.communicate(timeout=10)
    assert (out, err, process.returncode) == (b"out\n", b"err\n", 7)


def test_stop_script_terminates_the_command_and_its_children() -> None:
    process, pid = _start(["/bin/sh", "-c", "sleep 30; echo never"])
    children = _wait_for_children(pid)
    assert children, "the shell forked sleep"
    stop = subprocess.run(kill_argv(pid, 5), capture_output=True, timeout=20)
    assert stop.stdout == b"terminated\n", stop.stderr
    assert process.wait(timeout=5) == -15
    assert _gone(children)


def test_stop_script_kills_what_ignores_sigterm_after_the_grace_period() -> None:
    process, pid = _start(["/bin/sh", "-c", "trap '' TERM; sleep 30; echo never"])
    children = _wait_for_children(pid)
    started = time.monotonic()
    stop = subprocess.run(kill_argv(pid, 1), capture_output=True, timeout=20)
    assert stop.stdout == b"killed\n", stop.stderr
    assert time.monotonic() - started >= 1
    assert process.wait(timeout=5) == -9
    assert _gone(children)


def test_stop_script_reports_a_command_that_already_exited() -> None:
    process, pid = _start(["true"])
    process.wait(timeout=5)
    stop = subprocess.run(kill_argv(pid, 1), capture_output=True, timeout=20)
    assert stop.stdout == b"exited\n"


def go_argv(argv: Sequence[str]) -> str:
    """An argv as Go's ``%v`` prints a []string, as runtimes quote it in their errors."""
    return "[" + " ".join(argv) + "]"


@pytest.mark.parametrize("answer", [
    (4242, _result(ExecReason.NON_ZERO_EXIT_CODE, 3,
                   message=f"error executing command {go_argv(wrap(ARGV))}: exit status 3")),
    (4242, _result(ExecReason.NON_ZERO_EXIT_CODE, 1, message=(
        "command terminated with non-zero exit code: error executing command "
        f"{go_argv(wrap(ARGV))}, exit code 1"))),
])
async def test_messages_show_the_declared_command_not_the_pid_wrapper(
        answer: tuple[int | None, ExecResult]) -> None:
    result = await StoppingExec(FakeExec([answer]))(ARGV, 2)
    assert go_argv(ARGV) in result.message
    assert "container-notifier" not in result.message and "printf" not in result.message
    assert result.message.replace(go_argv(ARGV), go_argv(wrap(ARGV))) == answer[1].message


async def test_a_failed_stop_does_not_quote_the_stop_script() -> None:
    failed_stop = _result(ExecReason.EXEC_FAILED, message=(
        f"error executing command {go_argv(kill_argv(4242, 5))}: exit status 2"))
    result = await StoppingExec(FakeExec([(4242, TIMED_OUT), (None, failed_stop)]),
                                grace_seconds=5)(ARGV, 2)
    assert "[the stop script]: exit status 2" in result.message
    assert "kill -TERM" not in result.message and "may still run" in result.message
