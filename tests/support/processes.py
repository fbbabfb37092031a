"""Processes that kwok's execs started on this host: kwok runs exec'd commands as host
processes in its exec work directory, so a notifier's command is found through /proc."""

from __future__ import annotations

from pathlib import Path


def running_sleeps(workdir: Path, seconds: str) -> list[int]:
    """PIDs of running `sleep <seconds>` processes of kwok's execs (zombies do not run). Tests
    sleep durations no other test uses, so that only their own command matches."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
            cwd = Path(proc / "cwd").resolve(strict=True)
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv == [b"sleep", seconds.encode()] and cwd == workdir.resolve() and state != "Z":
            found.append(int(proc.name))
    return found
