"""One `up`: the processes it starts, the waits between them, and the rollback when it fails.

Used as a context manager: if anything in the block raises, every process started so far is
stopped and processes.json removed, so a failed start never leaves a half-started plane that a
later `up` could take for a running one. Logs stay in logs/ for inspection.
"""

from __future__ import annotations

import errno
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from localcluster import processes
from localcluster.layout import Layout

Spawn = Callable[[str, list[str], Path, str], processes.Child]
Stop = Callable[[list[processes.Tracked]], list[str]]


class StartFailed(Exception):
    """`up` could not bring the plane up; the message names the component and shows its log."""


def _exited(child: processes.Child, status: int, what: str, log_dir: Path) -> StartFailed:
    log = processes.log_path(log_dir, child.tracked.name)
    return StartFailed(
        f"{child.tracked.name} (pid {child.tracked.pid}) exited with status {status} while "
        f"waiting for {what}; last lines of {log}:\n{processes.log_tail(log)}")


class Startup:
    """The processes of one `up`, recorded in processes.json as they start."""

    def __init__(self, layout: Layout, spawn: Spawn = processes.start,
                 stop: Stop = processes.stop, poll_interval: float = 0.25) -> None:
        self._layout = layout
        self._spawn = spawn
        self._stop = stop
        self._poll_interval = poll_interval
        self.children: list[processes.Child] = []

    def __enter__(self) -> Startup:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            return
        stopped = self._stop([c.tracked for c in self.children])
        self._layout.state_file.unlink(missing_ok=True)
        print(f"cluster: start failed; stopped {', '.join(stopped) or 'nothing'}; "
              f"logs kept in {self._layout.logs}", file=sys.stderr)

    def launch(self, name: str, argv: list[str], stop_signal: str = "SIGTERM") -> None:
        self.children.append(self._spawn(name, argv, self._layout.logs, stop_signal))
        processes.save(self._layout.state_file, [c.tracked for c in self.children])

    def wait_for(self, component: str, what: str, check: Callable[[], bool],
                 timeout: float) -> None:
        """Poll `check` until it passes. Fail at once, with its log, if a started process exits
        (checked before each poll, so a leftover server on the same port cannot answer for a
        process that died); fail with `component`'s log when `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            for child in self.children:
                status = child.exit_status()
                if status is not None:
                    raise _exited(child, status, what, self._layout.logs)
            if check():
                return
            if time.monotonic() >= deadline:
                log = processes.log_path(self._layout.logs, component)
                raise StartFailed(
                    f"timed out after {timeout:.0f} s waiting for {what} ({component} still "
                    f"runs); last lines of {log}:\n{processes.log_tail(log)}")
            time.sleep(self._poll_interval)


def busy_ports(ports: dict[str, int], timeout: float = 0.0) -> list[str]:
    """The ports (keyed by the variable that moves them) that some process still listens on, on
    127.0.0.1, after waiting up to `timeout` seconds for them to be released."""
    deadline = time.monotonic() + timeout
    while (busy := _listened_on(ports)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return busy


def _listened_on(ports: dict[str, int]) -> list[str]:
    busy = []
    for name, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # Like the Go servers: a port held only by TIME_WAIT connections is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                busy.append(f"{name}={port}")
    return busy
