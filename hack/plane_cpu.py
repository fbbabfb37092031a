"""The CPU time the local plane's processes used, from /proc, for the benchmarks: each recorded
process of the plane (hack/localcluster) with its live descendants, and the bench client."""

from __future__ import annotations

import os
from pathlib import Path

from localcluster import processes
from localcluster.layout import Layout

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def plane_cpu_ticks(layout: Layout) -> dict[str, int]:
    """utime+stime, plus that of reaped children (cutime+cstime), of every recorded process of
    the plane and its live descendants (kwok runs under unshare and a PID 1; the commands it
    execs are its children), and of this bench client, in clock ticks."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            stats[int(entry.name)], parents[int(entry.name)] = fields, int(fields[1])

    plane = [proc for proc in processes.load(layout.state_file) if processes.is_alive(proc)]
    recorded = {proc.pid for proc in plane}

    def tree_ticks(pid: int) -> int:
        """The process and its descendants, except the plane's recorded processes (a bench
        that started the plane is their parent: they are counted once, under their names)."""
        fields = stats.get(pid)
        own = sum(int(f) for f in fields[11:15]) if fields else 0
        return own + sum(tree_ticks(c) for c, parent in parents.items()
                         if parent == pid and c not in recorded)

    ticks = {proc.name: tree_ticks(proc.pid) for proc in plane}
    return ticks | {"bench client": tree_ticks(os.getpid())}


def cpu_ms(before: dict[str, int], after: dict[str, int], per: float = 1.0) -> dict[str, float]:
    """Milliseconds of CPU each process used between two `plane_cpu_ticks`, divided by `per`."""
    return {name: (after[name] - before[name]) * 1000 / CLOCK_TICKS / per
            for name in before if name in after}
