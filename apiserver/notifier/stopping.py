"""Timeouts that stop the command: the PID wrapper, its marker, and the SIGTERM/SIGKILL sequence.

Closing an exec stream does not stop the command in the container. So an exec notifier's argv is
started through ``/bin/sh -c WRAPPER``, which prints one marker line with its PID on standard
output and then ``exec``s the argv: the command keeps that PID, its output, its stderr and its
exit code. The marker line is read off the stream before the output tail (``PidMarker``), so it
never reaches the record. When the timeout passes, a second exec in the same container sends
SIGTERM to that PID and its descendants, waits the grace period, then sends SIGKILL to those
still alive (``KILL_SCRIPT``), and says which happened. The grace period is the notifier's
``terminationGracePeriodSeconds`` (default ``GRACE_SECONDS``).

A container without ``/bin/sh`` cannot start the wrapper: the exec fails before the marker,
with a non-zero exit code (126 or 127) or an error naming ``/bin/sh``. The command is then run
as it is declared, without the wrapper, and a timeout records that it may still run.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from apiserver.notifier.declarations import DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
from apiserver.notifier.exec_protocol import ExecReason, Stop
from apiserver.notifier.exec_stream import ExecResult, StdoutFilter

SHELL = "/bin/sh"
GRACE_SECONDS = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
"""How long a stopped command has between SIGTERM and SIGKILL unless its notifier declares
``terminationGracePeriodSeconds``."""
STOP_MARGIN_SECONDS = 10
"""How long the stopping exec may take beyond the grace period (its own start, SIGKILL)."""

MARKER = b"container-notifier-pid "
_MARKER_LINE = re.compile(re.escape(MARKER) + rb"([0-9]{1,10})\n")
_MAX_MARKER_LINE = len(MARKER) + 12

WRAPPER = f"printf '{MARKER.decode()}%s\\n' \"$$\" && exec \"$@\""
"""Prints the marker with the shell's PID, then becomes the command (same PID)."""

KILL_SCRIPT = r"""
pid=$1 grace=$2
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  read -r line < "/proc/$1/stat" 2>/dev/null || return 0
  rest=${line##*) }
  [ "${rest%% *}" != Z ]
}
tree=$pid frontier=$pid
while [ -n "$frontier" ]; do
  next=
  for stat in /proc/[0-9]*/stat; do
    read -r line < "$stat" 2>/dev/null || continue
    set -- ${line##*) }
    child=${stat#/proc/} child=${child%/stat}
    for parent in $frontier; do
      if [ "$2" = "$parent" ]; then next="$next $child"; fi
    done
  done
  tree="$tree$next" frontier=$next
done
if ! alive "$pid"; then echo exited; exit 0; fi
kill -TERM $tree 2>/dev/null
if sleep 0.1 2>/dev/null; then step=0.1 ticks=$((grace * 10)); else step=1 ticks=$grace; fi
waited=0
while :; do
  running=
  for p in $tree; do if alive "$p"; then running="$running $p"; fi; done
  if [ -z "$running" ]; then echo terminated; exit 0; fi
  if [ "$waited" -ge "$ticks" ]; then kill -KILL $running 2>/dev/null; echo killed; exit 0; fi
  sleep "$step"
  waited=$((waited + 1))
done
"""
"""Arguments: the PID and the grace period in seconds. Signals the PID and its descendants (read
from /proc, when there is one); prints ``exited``, ``terminated`` or ``killed``. A zombie counts
as gone: it no longer runs, and only its parent can reap it."""

_STOPPED_BY = {"exited": Stop.EXITED, "terminated": Stop.TERMINATED, "killed": Stop.KILLED}

RawExec = Callable[[Sequence[str], float, StdoutFilter | None], Awaitable[ExecResult]]
"""Runs an argv in the notifier's container within a timeout, reading stdout through the
filter."""


def wrap(argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` through the PID wrapper."""
    return [SHELL, "-c", WRAPPER, "container-notifier", *argv]


def kill_argv(pid: int, grace_seconds: int) -> list[str]:
    return [SHELL, "-c", KILL_SCRIPT, "container-notifier-stop", str(pid), str(grace_seconds)]


def as_declared(message: str, ran: Sequence[str], shown: Sequence[str]) -> str:
    """`message` with the command line `ran` shown as `shown`. Runtimes quote the argv they
    ran in their errors (containerd ``error executing command [argv...], exit code 1``, kwok
    alike, each argument joined by a space); for a wrapped command that is the server's PID
    wrapper, which the user never declared, so records show the declared argv instead."""
    return message.replace(" ".join(ran), " ".join(shown))


def unwrapped(result: ExecResult, argv: Sequence[str]) -> ExecResult:
    """`result` of ``wrap(argv)`` with its message naming `argv` (``as_declared``)."""
    message = as_declared(result.message, wrap(argv), argv)
    return result if message == result.message else replace(result, message=message)


class PidMarker:
    """A ``StdoutFilter`` that takes the wrapper's marker line off the start of stdout.

    The line may arrive split across frames: bytes are held back until a newline, or until
    more arrived than a marker line can hold. ``pid`` is None while no marker was seen; output
    that does not start with a marker is passed on whole.
    """

    def __init__(self) -> None:
        self.pid: int | None = None
        self._held = bytearray()
        self._decided = False

    def feed(self, data: bytes) -> bytes:
        if self._decided:
            return data
        self._held += data
        newline = self._held.find(b"\n")
        if newline < 0 and len(self._held) <= _MAX_MARKER_LINE:
            return b""
        self._decided = True
        held, self._held = bytes(self._held), bytearray()
        line = _MARKER_LINE.match(held)
        if line is None:
            return held
        self.pid = int(line.group(1))
        return held[line.end():]

    def end(self) -> bytes:
        self._decided = True
        held, self._held = bytes(self._held), bytearray()
        return held


class ReadyLine:
    """A ``StdoutFilter`` that passes output through ``inner`` (the ``PidMarker``) and notices
    a held command's ready line: a line of output equal to ``line`` once its ``\n`` or
    ``\r\n`` is stripped. ``seen`` is set at the first one; the line stays in the output.

    Only the current line is held for comparison, and at most a ready line's length of it."""

    def __init__(self, inner: StdoutFilter, line: str) -> None:
        self.seen = asyncio.Event()
        self._inner = inner
        self._line = line.encode()
        self._current = bytearray()
        self._overlong = False

    def feed(self, data: bytes) -> bytes:
        passed = self._inner.feed(data)
        self._scan(passed)
        return passed

    def end(self) -> bytes:
        rest = self._inner.end()
        self._scan(rest)
        return rest

    def _scan(self, data: bytes) -> None:
        if self.seen.is_set():
            return
        start = 0
        while start <= len(data) and not self.seen.is_set():
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not self._overlong:
                self._current += data[start:end]
                if len(self._current) > len(self._line) + 1:
                    self._overlong, self._current = True, bytearray()
            if newline < 0:
                return
            if not self._overlong and bytes(self._current).removesuffix(b"\r") == self._line:
                self.seen.set()
            self._current, self._overlong = bytearray(), False
            start = newline + 1


class StoppingExec:
    """Runs an exec notifier's command so that a timeout stops it (SIGTERM, then SIGKILL after
    ``grace_seconds``), or says that it could not."""

    def __init__(self, execute: RawExec, grace_seconds: int = GRACE_SECONDS) -> None:
        self._execute = execute
        self._grace = grace_seconds

    async def __call__(self, argv: Sequence[str], timeout_seconds: int) -> ExecResult:
        return unwrapped(await self._run(argv, timeout_seconds), argv)

    async def _run(self, argv: Sequence[str], timeout_seconds: int) -> ExecResult:
        marker = PidMarker()
        result = await self._execute(wrap(argv), timeout_seconds, marker)
        if marker.pid is not None:
            if result.reason != ExecReason.TIMEOUT:
                return result
            return await self._stop(result, marker.pid, timeout_seconds)
        if result.reason == ExecReason.TIMEOUT:
            return _not_stopped(result, timeout_seconds, "the wrapper did not report the "
                                "command's PID, so it was not signalled and may still run")
        if not _wrapper_did_not_start(result):
            return result
        plain = await self._execute(argv, timeout_seconds, None)
        plain = replace(plain, started=result.started)
        if plain.reason != ExecReason.TIMEOUT:
            return plain
        return _not_stopped(plain, timeout_seconds, f"the container has no shell ({SHELL}) to "
                            "stop the command with: it may still run")

    async def _stop(self, timed_out: ExecResult, pid: int, timeout_seconds: int) -> ExecResult:
        stopped = await stop_command(self._execute, pid, self._grace)
        if stopped.stop is Stop.NOT_STOPPED:
            return _not_stopped(timed_out, timeout_seconds, stopped.how)
        return replace(timed_out, stopped=stopped.stop, finished=datetime.now(UTC),
                       message=f"no exit status within {timeout_seconds}s; {stopped.how}")


@dataclass(frozen=True)
class Stopped:
    """How the stop sequence ended for one command."""

    stop: Stop
    how: str
    """What happened, e.g. ``the command (PID 10) was stopped with SIGTERM``; for
    ``NotStopped``, why, ending in ``it may still run``."""


async def stop_command(execute: RawExec, pid: int, grace_seconds: int = GRACE_SECONDS
                       ) -> Stopped:
    """Run ``KILL_SCRIPT`` for ``pid`` through ``execute`` (an exec in the command's container):
    SIGTERM, SIGKILL after ``grace_seconds``; never raises for a failed exec (``NotStopped``)."""
    argv = kill_argv(pid, grace_seconds)
    stop = await execute(argv, grace_seconds + STOP_MARGIN_SECONDS, None)
    said = stop.stdout.decode(errors="replace").strip()
    stopped = _STOPPED_BY.get(said) if stop.exit_code == 0 else None
    if stopped is Stop.TERMINATED:
        return Stopped(stopped, f"the command (PID {pid}) was stopped with SIGTERM")
    if stopped is Stop.KILLED:
        return Stopped(stopped, f"the command (PID {pid}) did not exit within {grace_seconds}s "
                                "of SIGTERM and was killed with SIGKILL")
    if stopped is Stop.EXITED:
        return Stopped(stopped, f"the command (PID {pid}) had exited before it was signalled")
    detail = (as_declared(stop.message, argv, ["the stop script"])
              or stop.stderr.decode(errors="replace").strip() or said)
    return Stopped(Stop.NOT_STOPPED,
                   f"stopping the command (PID {pid}) failed ({detail}): it may still run")


def _not_stopped(result: ExecResult, timeout_seconds: int, why: str) -> ExecResult:
    return replace(result, stopped=Stop.NOT_STOPPED, finished=datetime.now(UTC),
                   message=f"no exit status within {timeout_seconds}s; {why}")


def _wrapper_did_not_start(result: ExecResult) -> bool:
    """Whether an exec that printed no marker failed because the shell could not run it: a
    non-zero exit (126 or 127 from a runtime that reports a missing program as one) or an exec
    error naming the shell. The wrapper prints the marker before anything else, so the command
    did not run. Other failures (refused, container not running) would fail the same way again.
    """
    if result.reason == ExecReason.NON_ZERO_EXIT_CODE:
        return True
    return result.reason == ExecReason.EXEC_FAILED and SHELL in result.message
