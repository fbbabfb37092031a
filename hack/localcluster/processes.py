"""Start, track and stop the control plane's processes by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Tracked:
    """A started process: its pid and the executable it was started as (against pid reuse)."""

    name: str
    pid: int
    argv: list[str]
    stop_signal: str = "SIGTERM"
    """What `stop` sends first; SIGKILL follows after the grace period."""

    @property
    def executable(self) -> str:
        return self.argv[0]


def load(state_file: Path) -> list[Tracked]:
    if not state_file.exists():
        return []
    return [Tracked(**entry) for entry in json.loads(state_file.read_text())]


def save(state_file: Path, tracked: list[Tracked]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps([asdict(t) for t in tracked], indent=2))


def is_alive(proc: Tracked) -> bool:
    """True if the pid runs and is still the executable we started (not a zombie, not reused)."""
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and cmdline[0].decode(errors="replace") == proc.executable


def start(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None,
          stop_signal: str = "SIGTERM") -> Tracked:
    """Start argv in its own session, output appended to log_dir/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, **(env or {})},
        )
    return Tracked(name=name, pid=proc.pid, argv=argv, stop_signal=stop_signal)


def stop(tracked: list[Tracked], grace_seconds: float = 10.0) -> list[str]:
    """Signal each live process (last started first) with its stop signal, then SIGKILL what is
    left after the grace period.

    Returns the names of the processes that were running.
    """
    running = [p for p in reversed(tracked) if is_alive(p)]
    for proc in running:
        try:
            os.kill(proc.pid, signal.Signals[proc.stop_signal])
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and any(is_alive(p) for p in running):
        time.sleep(0.1)
    for proc in running:
        if is_alive(proc):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    return [p.name for p in running]
