"""`localcluster up` is idempotent, restarts an unhealthy plane, stops everything when it fails,
and `down` leaves no process behind.

Runs a second, one-node control plane on other ports (the session's - 5000) and another state
directory, so the session's cluster is untouched."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import components
from localcluster.layout import REPLICAS, REPO_ROOT, Ports
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster

SECOND_PLANE_PORT_OFFSET = -5000
"""Below the session's ports, so below the kernel's ephemeral range (32768 and up by default):
with +10000 a replica's port could already be the local port of some outgoing connection."""
STOPPED_IN_ORDER = ", ".join(reversed(components.plane(REPLICAS)))
"""`down` stops HAProxy, the replicas (at once, named last first), kwok, ... etcd."""
CONTROL_PLANE_STOPPED = ", ".join(reversed(components.CONTROL_PLANE))


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline}")
    return found


def _runs(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class SecondPlane:
    """`python -m localcluster` for a plane in `state`, run from `cwd`."""

    def __init__(self, state: Path, cwd: Path = REPO_ROOT) -> None:
        self.state = state
        self.cwd = cwd
        ports = {name: str(port + SECOND_PLANE_PORT_OFFSET)
                 for name, port in Ports().by_variable().items()}
        # The replicas' ports follow CN_NOTIFIER_PORT: the session's - 5000 too.
        self.env = {**os.environ, **ports, "PYTHONPATH": f"{REPO_ROOT / 'hack'}:{REPO_ROOT}",
                    "CN_CLUSTER_DIR": str(state)}

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "localcluster", *args], env=self.env,
                                cwd=self.cwd, capture_output=True, text=True, timeout=300)
        assert result.returncode == expect, result.stdout + result.stderr
        return result

    def pids(self) -> dict[str, int]:
        recorded = json.loads((self.state / "processes.json").read_text())
        return {p["name"]: p["pid"] for p in recorded}

    def kubectl(self, cluster: Cluster, *args: str) -> None:
        subprocess.run([str(cluster.bins / "kubectl"), f"--kubeconfig={self.state / 'kubeconfig'}",
                        *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def state_parent() -> Iterator[Path]:
    """Where a second plane keeps its state: a short path, since HAProxy's stats socket lives
    there (haproxy.SOCKET_PATH_MAX); pytest's tmp_path in a pytest-xdist worker is longer."""
    with tempfile.TemporaryDirectory(prefix="cn-") as directory:
        yield Path(directory)


def test_up_is_idempotent_restarts_what_is_unhealthy_and_down_stops_everything(
        cluster: Cluster, state_parent: Path) -> None:
    plane = SecondPlane(state_parent / "second-cluster")
    try:
        first = plane.run("up", "--nodes", "1").stdout
        assert "cluster: up in" in first
        pids = plane.pids()
        assert list(pids) == list(components.plane(REPLICAS))
        assert "already running and healthy" in plane.run("up", "--nodes", "1").stdout
        assert plane.pids() == pids

        os.kill(pids["kube-scheduler"], signal.SIGKILL)
        wait_until(lambda: not _runs(pids["kube-scheduler"]), "kube-scheduler to die", 10)
        assert (f"unhealthy: kube-scheduler: pid {pids['kube-scheduler']} is not running"
                in plane.run("status", expect=1).stdout)
        restarted = plane.run("up", "--nodes", "1").stdout
        assert "cluster: not healthy, starting afresh:\n  kube-scheduler: pid" in restarted
        assert "cluster: up in" in restarted
        assert set(plane.pids().values()).isdisjoint(pids.values())
        assert plane.run("status").stdout.splitlines()[-1].startswith("healthy: ")

        # Every process runs and answers, but the extension API is not served: not healthy.
        plane.kubectl(cluster, "delete", "apiservice", "v1alpha1.notifier.x-k8s.io")
        assert ("unhealthy: APIService v1alpha1.notifier.x-k8s.io: not found (not registered)"
                in plane.run("status", expect=1).stdout)
        assert "cluster: up in" in plane.run("up", "--nodes", "1").stdout
        plane.run("status")
    finally:
        stopped = plane.run("down").stdout
    assert f"stopped {STOPPED_IN_ORDER}" in stopped
    assert not plane.state.exists()
    assert _processes_mentioning(str(plane.state)) == []


def test_a_failed_up_stops_everything_it_started(cluster: Cluster, tmp_path: Path,
                                                 state_parent: Path) -> None:
    # The replicas start (with HAProxy) once kube-apiserver serves their CRDs, while the other
    # components come up: an `apiserver` package in the working directory that exits at once
    # makes `up` fail whichever wait it is in, with every component started.
    stub = tmp_path / "cwd" / "apiserver"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "__main__.py").write_text(
        "import sys\nprint('injected failure: refusing to serve', file=sys.stderr)\nsys.exit(3)\n")
    plane = SecondPlane(state_parent / "failing-cluster", cwd=tmp_path / "cwd")
    try:
        failed = plane.run("up", "--nodes", "1", expect=1)
        # The replicas start together: whichever exits first is named.
        replica = r"notifier-apiserver-\d+"
        assert re.search(rf"cluster: {replica} \(pid \d+\) exited with status 3 while waiting "
                         "for ", failed.stderr), failed.stderr
        assert re.search(rf"{replica}\.log:\ninjected failure: refusing to serve",
                         failed.stderr), failed.stderr
        # HAProxy, and a replica that has not exited yet, are stopped with the control plane.
        assert re.search(rf"cluster: start failed; stopped haproxy, (({replica}, )*)"
                         rf"{CONTROL_PLANE_STOPPED}"
                         "; logs kept", failed.stderr), failed.stderr
        assert _processes_mentioning(str(plane.state)) == []
        assert not (plane.state / "processes.json").exists()
        assert ("unhealthy: no cluster: processes.json records no process"
                in plane.run("status", expect=1).stdout)
    finally:
        plane.run("down")
    assert not plane.state.exists()
