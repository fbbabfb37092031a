"""Start, track and stop the control plane's processes by pid.

A process is identified by its pid and its start time (field 22 of /proc/<pid>/stat, clock ticks
since boot). The start time is set by fork and never changes, so it tells a reused pid apart and,
unlike /proc/<pid>/cmdline, it is valid from the first instant: the kernel fills in a new
program's command line only late in execve (after it has released the parent and paged in the
binary), so a cmdline read right after Popen returns is often empty.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

LOG_TAIL_LINES = 30
KILL_WAIT_SECONDS = 5.0
"""How long `stop` waits for a SIGKILLed process to be gone."""


@dataclass(frozen=True)
class Tracked:
    """A started process: its pid and its start time (so that a reused pid is never taken for
    it), and how to start it again."""

    name: str
    pid: int
    argv: list[str]
    start_time: int
    """Clock ticks since boot at fork (/proc/<pid>/stat field 22)."""
    stop_signal: str = "SIGTERM"
    """What `stop` sends first; SIGKILL follows after the grace period."""


@dataclass(frozen=True)
class Child:
    """A process this Python process started: its record, and its exit status once it ended
    (None while it runs)."""

    tracked: Tracked
    exit_status: Callable[[], int | None]


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(proc: Tracked) -> bool:
    """True if the pid runs (not a zombie) and is still the process we started."""
    fields = _stat_fields(proc.pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == proc.start_time


def _legacy_start_time(entry: dict) -> int:
    """The start time of an entry saved before start times were recorded, if its pid still runs
    the executable it was started as (the check those versions made); else -1 (never alive)."""
    try:
        argv0 = Path(f"/proc/{entry['pid']}/cmdline").read_bytes().split(b"\0")[0]
    except (FileNotFoundError, ProcessLookupError):
        return -1
    started = start_time(entry["pid"])
    return started if started is not None and argv0.decode(errors="replace") == entry["argv"][0] \
        else -1


def load(state_file: Path) -> list[Tracked]:
    if not state_file.exists():
        return []
    entries = json.loads(state_file.read_text())
    return [Tracked(**{"start_time": _legacy_start_time(e), **e}) if "start_time" not in e
            else Tracked(**e) for e in entries]


def save(state_file: Path, tracked: list[Tracked]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps([asdict(t) for t in tracked], indent=2))


def log_path(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name}.log"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, or a note saying it is empty or missing."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"({path} is empty)"


def start(name: str, argv: list[str], log_dir: Path, stop_signal: str = "SIGTERM") -> Child:
    """Start argv in its own session, stdout and stderr appended to log_dir/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_path(log_dir, name), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    # Our unreaped child: its /proc entry exists until we wait for it, even if it has exited.
    started = start_time(proc.pid)
    if started is None:
        raise RuntimeError(f"/proc/{proc.pid}/stat of {name} is missing although it is our child")
    return Child(Tracked(name=name, pid=proc.pid, argv=argv, start_time=started,
                         stop_signal=stop_signal), proc.poll)


def gone_within(proc: Tracked, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while is_alive(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop(tracked: list[Tracked], grace_seconds: float = 10.0) -> list[str]:
    """Stop each live process in turn, last started first, and wait until it is gone: its stop
    signal, then SIGKILL if it outlives the grace period.

    One at a time, so that each shuts down while what it depends on still runs (kube-apiserver
    stopped together with etcd retries etcd until it is SIGKILLed).
    Returns the names of the processes that were running.
    """
    stopped = []
    for proc in reversed(tracked):
        stopped += stop_together([proc], grace_seconds)
    return stopped


def stop_together(tracked: list[Tracked], grace_seconds: float = 10.0) -> list[str]:
    """Stop the live processes of `tracked` at once, as kubelet stops a Deployment's pods (for
    processes none of which depends on another: the server replicas, each draining for its
    shutdown delay): each its stop signal, then SIGKILL for those that outlive the grace
    period; returns once all are gone, with the names of those that were running."""
    live = [proc for proc in tracked if is_alive(proc)]
    left = live
    for sig, wait in ((None, grace_seconds), (signal.SIGKILL, KILL_WAIT_SECONDS)):
        for proc in left:
            try:
                os.kill(proc.pid, sig or signal.Signals[proc.stop_signal])
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + wait
        left = [proc for proc in left
                if not gone_within(proc, max(0.0, deadline - time.monotonic()))]
        if not left:
            break
    return [proc.name for proc in live]
