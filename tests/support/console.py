"""Running a docs page's console commands against a local plane, as its reader would: in a
shell at the repository root, with the plane's kubectl first on PATH and its admin kubeconfig
as KUBECONFIG."""

from __future__ import annotations

import os
import subprocess
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
