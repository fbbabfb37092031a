"""Running a docs page's console commands against a local plane, as its reader would: in a
shell at the repository root, with the plane's kubectl first on PATH and its admin kubeconfig
as KUBECONFIG."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from localcluster.layout import REPO_ROOT
from tests.support.kube import Cluster


@dataclass(frozen=True)
class Ran:
    """A command's exit code and its output (standard output and error, in order)."""

    command: str
    returncode: int
    output: str

    def lines(self) -> list[str]:
        """The output's non-empty lines, trailing spaces stripped."""
        return [line.rstrip() for line in self.output.splitlines() if line.strip()]


def run(cluster: Cluster, command: str, timeout: float = 120.0) -> Ran:
    """Run `command` with bash; raises subprocess.TimeoutExpired if it outlasts `timeout`."""
    env = {**os.environ, "PATH": f"{cluster.bins}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(cluster.layout.kubeconfig)}
    done = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return Ran(command, done.returncode, done.stdout)


ANY = "…"
"""In output a page shows, what differs per run (an age, an address)."""


def shown_pattern(line: str) -> re.Pattern[str]:
    """A pattern for one output line a page shows: its words in order, separated by any run of
    spaces (tables are aligned per run), ``…`` standing for any text."""
    words = [".*".join(re.escape(part) for part in word.split(ANY)) for word in line.split()]
    return re.compile(r"\s+".join(words))


def check_shown(ran: Ran, shown: Sequence[str]) -> None:
    """Assert that `ran` succeeded and, if the page shows output for it, printed exactly those
    lines (`shown_pattern`)."""
    assert ran.returncode == 0 or shown, f"$ {ran.command}\n{ran.output}"
    if not shown:
        return
    lines = ran.lines()
    expected = [line for line in shown if line.strip()]
    assert len(lines) == len(expected) and all(
        shown_pattern(want).fullmatch(got) for want, got in zip(expected, lines, strict=True)
    ), f"$ {ran.command}\nshown:\n" + "\n".join(expected) + "\nprinted:\n" + ran.output
