"""A held notifier's command in one container: started, seen ready, released.

The command runs through the PID wrapper (``stopping.wrap``) on an exec stream whose stdin is
open, so that release can close it: a session such as ``mysql`` holding ``FLUSH TABLES WITH
READ LOCK`` ends at stdin EOF. Its stdout goes through the ``PidMarker`` (the PID) and the
``ReadyLine`` (ready); with a ready check instead (``hold.readyCommand``), the check runs every
period once the PID is known, and the first that passes makes the command ready. Its output
tails are readable while it runs (``output``: what the record shows once Held). The stream
stays open while the command is held. Release closes stdin, waits the notifier's
``hold.releaseGracePeriodSeconds`` for the command to end by itself (a ``psql`` session running
``pg_backup_stop()``), then runs the stop sequence by PID (SIGTERM, SIGKILL after
``terminationGracePeriodSeconds``; ``stopping.stop_command``), and waits for the stream's end,
so the result carries the exit status when the runtime reports it.

Some runtimes (kwok among them) do not close the process's stdin when the stream's stdin is
closed, and ``v4.channel.k8s.io`` cannot close it at all: there the SIGTERM step stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from apiserver.notifier.declarations import DEFAULT_RELEASE_GRACE_PERIOD_SECONDS
from apiserver.notifier.exec_protocol import DEFAULT_TAIL_BYTES, ExecReason, Stop
from apiserver.notifier.exec_stream import ExecResult, OutputTails, StdoutFilter
from apiserver.notifier.stopping import SHELL, PidMarker, ReadyLine, Stopped, unwrapped, wrap

STREAM_END_WAIT_SECONDS = 5.0
"""After the stop sequence, how long the exec stream may take to report the end."""
LOST_STOP_ATTEMPTS = 8
LOST_STOP_FIRST_DELAY_SECONDS = 0.5
LOST_STOP_MAX_DELAY_SECONDS = 10.0
"""A command whose stream broke is stopped by PID, retried (about 35 s in all) while the
server cannot reach the pod yet."""

HeldRawExec = Callable[[Sequence[str], float, StdoutFilter, asyncio.Event, OutputTails],
                       Coroutine[Any, Any, ExecResult]]
"""Runs an argv in the container within a timeout, reading stdout through the filter, with
stdin open until the event is set, keeping the output in the tails
(``exec_stream.exec_in_container`` with ``close_stdin`` and ``tails``)."""
ReadyCheck = Callable[[], Awaitable[ExecResult]]
"""Runs a held notifier's ready command once in the command's container; exit code 0 is
ready."""
StopByPid = Callable[[int], Awaitable[Stopped]]
"""Runs the stop sequence for a PID in the command's container (with the notifier's
termination grace period)."""


class HeldCommand:
    """One held command, started at construction (inside a running event loop).

    ``ready`` is set once the command printed ``ready_line`` or, given ``ready_check``
    (``ready_line`` is then not looked for), once the PID is known and a check run every
    ``ready_period_seconds`` first exits 0 (``last_check`` is the latest check's result).
    ``pid`` is its PID once the wrapper reported it (it always does before the ready line).
    ``ended`` is set when the exec stream ended: the command exited, or the stream broke.
    ``release_grace_seconds`` is how long release waits, once stdin is closed, for the command
    to end by itself.
    """

    def __init__(self, execute: HeldRawExec, stop: StopByPid, argv: Sequence[str],
                 ready_line: str | None, max_seconds: float, *,
                 tail_bytes: int = DEFAULT_TAIL_BYTES, ready_check: ReadyCheck | None = None,
                 ready_period_seconds: float = 1.0,
                 release_grace_seconds: float = DEFAULT_RELEASE_GRACE_PERIOD_SECONDS) -> None:
        self._release_grace = release_grace_seconds
        self._marker = PidMarker()
        stdout_filter: StdoutFilter = self._marker
        if ready_check is None:
            line = ReadyLine(self._marker, ready_line or "")
            stdout_filter, self._seen = line, line.seen
        else:
            self._seen = asyncio.Event()
        self.last_check: ExecResult | None = None
        self._close_stdin = asyncio.Event()
        self._stop = stop
        self._argv = tuple(argv)
        self._started = datetime.now(UTC)
        self._tails = OutputTails.bounded(tail_bytes)
        self._stream: asyncio.Task[ExecResult] = asyncio.create_task(
            execute(wrap(argv), max_seconds, stdout_filter, self._close_stdin, self._tails),
            name="held command")
        self.ended = asyncio.Event()
        self._stream.add_done_callback(lambda _task: self.ended.set())
        self._checks: asyncio.Task[None] | None = None
        if ready_check is not None:
            self._checks = asyncio.create_task(
                self._poll(ready_check, ready_period_seconds), name="held command ready check")
            self._stream.add_done_callback(lambda _task: self._stop_checks())

    @property
    def ready(self) -> asyncio.Event:
        return self._seen

    @property
    def pid(self) -> int | None:
        return self._marker.pid

    def output(self) -> OutputTails:
        """The command's output tails so far (the PID marker taken off stdout)."""
        return self._tails

    async def _poll(self, check: ReadyCheck, period: float) -> None:
        """Run the check every ``period`` until it passes (ready) or the stream ends; the
        first run once the wrapper reported the PID, so the command itself runs."""
        while not self.ended.is_set():
            if self.pid is not None:
                self.last_check = await check()
                if self.last_check.exit_code == 0:
                    self._seen.set()
                    return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period if self.pid is not None else 0.05):
                    await self.ended.wait()

    def _stop_checks(self) -> None:
        if self._checks is not None:
            self._checks.cancel()

    async def result(self) -> ExecResult:
        """The exec's result, once the stream ended (a failure to start it included)."""
        result = unwrapped(await asyncio.shield(self._stream), self._argv)
        if self.pid is None and not self.ready.is_set() and result.reason in (
                ExecReason.NON_ZERO_EXIT_CODE, ExecReason.EXEC_FAILED) and (
                result.exit_code in (126, 127) or SHELL in result.message):
            return replace(result, message=f"a held notifier runs through {SHELL} (to report "
                           "the command's PID so it can be stopped), and it could not run: "
                           f"{result.message or f'exit code {result.exit_code}'}")
        return result

    async def release(self) -> tuple[ExecResult, Stopped]:
        """End the command: close its stdin, then stop it by PID if it still runs; the
        stream's result (as ended, or cut off if it did not end) and how the command ended."""
        self._stop_checks()
        self._close_stdin.set()
        if not self.ended.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._release_grace):
                    await self.ended.wait()
        if self.ended.is_set():
            return await self.result(), Stopped(Stop.EXITED, self._exited_how())
        if self.pid is None:
            stopped = Stopped(Stop.NOT_STOPPED, "the wrapper did not report the command's PID, "
                              "so it was not signalled: it may still run")
        else:
            stopped = await self._stop(self.pid)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STREAM_END_WAIT_SECONDS):
                await self.ended.wait()
        if not self.ended.is_set():
            self._stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stream
            return self._cut_off(), stopped
        return await self.result(), stopped

    async def stop_lost(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
                        ) -> Stopped:
        """Stop the command by its PID after its exec stream broke (its end was not seen): on
        a real container runtime the command outlives its stream, still holding what it held.
        Retried with doubling delays while the stop cannot be run (the server may not reach
        the pod again yet, e.g. while kube-apiserver is down)."""
        if self.pid is None:
            return Stopped(Stop.NOT_STOPPED, "the wrapper did not report the command's PID, "
                           "so it was not signalled: it may still run")
        delay = LOST_STOP_FIRST_DELAY_SECONDS
        stopped = await self._stop(self.pid)
        for _ in range(LOST_STOP_ATTEMPTS - 1):
            if stopped.stop is not Stop.NOT_STOPPED:
                break
            await sleep(delay)
            delay = min(delay * 2, LOST_STOP_MAX_DELAY_SECONDS)
            stopped = await self._stop(self.pid)
        return stopped

    async def cancel(self) -> None:
        """Drop the stream without stopping the command (it ended, or stopping it is moot)."""
        self._stop_checks()
        self._stream.cancel()
        await asyncio.gather(self._stream, return_exceptions=True)

    def _exited_how(self) -> str:
        who = f"the command (PID {self.pid})" if self.pid is not None else "the command"
        return f"{who} exited once its stdin was closed"

    def _cut_off(self) -> ExecResult:
        """A result for a stream that did not end after the stop sequence (its output is
        lost with it)."""
        return ExecResult(None, b"", b"", False, False, ExecReason.EXEC_FAILED,
                          "the exec stream did not end after the command was stopped",
                          self._started, datetime.now(UTC))
