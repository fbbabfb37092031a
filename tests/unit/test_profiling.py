"""hack/profiling.py: a collapsed-stack file read into the busiest functions, and a real py-spy
sampling a real busy Python process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import profiling


def test_self_and_inclusive_shares_of_the_samples(tmp_path: Path) -> None:
    collapsed = tmp_path / "profile.txt"
    collapsed.write_text(
        "MainThread;run (loop.py);handle (app.py);encode (json.py) 6\n"
        "MainThread;run (loop.py);handle (app.py) 2\n"
        "MainThread;run (loop.py);select (selectors.py) 2\n"
        "not a stack line\n")

    found = profiling.summary(collapsed)

    assert found["samples"] == 10
    assert found["self"][0] == ("encode (json.py)", 0.6)
    assert dict(found["inclusive"])["handle (app.py)"] == 0.8
    assert dict(found["inclusive"])["run (loop.py)"] == 1.0


def test_py_spy_samples_a_busy_process(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c",
                             "def spin():\n    while True:\n        sum(range(1000))\nspin()"])
    try:
        with profiling.sampled({"busy": busy.pid}, tmp_path) as files:
            time.sleep(1.5)
    finally:
        busy.kill()
        busy.wait()
    found = profiling.summary(files["busy"])
    assert found["samples"] > 0
    assert any(frame.startswith("spin ") for frame, _ in found["inclusive"])
