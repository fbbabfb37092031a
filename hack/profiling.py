"""Sampling profiles of running processes with py-spy (`make bench BENCH_ARGS=--profile`).

``sampled(pids, out_dir)`` runs ``py-spy record`` against each process for the duration of a
``with`` block (non-blocking sampling: the process is not paused) and leaves a collapsed-stack
file per process; ``summary`` reads one into the functions with the most samples, on top of the
stack (self) and anywhere in it (inclusive), as shares of the samples taken while the process
was busy (py-spy leaves idle threads out).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

SAMPLES_PER_SECOND = 250


def py_spy() -> str:
    """The py-spy of this venv (a test extra of pyproject.toml)."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: make venv installs it (pyproject.toml, test)")
    return found


@contextmanager
def sampled(pids: Mapping[str, int], out_dir: Path) -> Iterator[dict[str, Path]]:
    """Sample each named process while the block runs; yields name -> collapsed-stack file
    (written when the block ends)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {name: out_dir / f"profile-{name}.txt" for name in pids}
    recorders = [subprocess.Popen(
        [py_spy(), "record", "--pid", str(pid), "--rate", str(SAMPLES_PER_SECOND),
         "--format", "raw", "--nolineno", "--nonblocking", "--output", str(files[name])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for name, pid in pids.items()]
    try:
        yield files
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders:
            try:
                recorder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                recorder.kill()


def summary(collapsed: Path, top: int = 12) -> dict:
    """The ``top`` functions by self and by inclusive samples, each as a share of every sample
    (a function counted once per stack for inclusive)."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame for frame in stack.split(";")[1:] if frame]  # the thread's name first
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(n / total, 4)) for frame, n in counter.most_common(top)]

    return {"samples": total, "self": shares(own) if total else [],
            "inclusive": shares(anywhere) if total else []}
