"""`localcluster up` is idempotent and `down` leaves no process behind.

Runs a second, one-node control plane on other ports and another state directory, so the
session's cluster is untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.layout import REPO_ROOT
from tests.support.kube import Cluster

pytestmark = pytest.mark.cluster


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


def test_up_is_idempotent_and_down_stops_everything(cluster: Cluster, tmp_path: Path) -> None:
    state = tmp_path / "second-cluster"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "hack"), "CN_CLUSTER_DIR": str(state),
           "CN_ETCD_PORT": "33790", "CN_APISERVER_PORT": "36443",
           "CN_CONTROLLER_MANAGER_PORT": "30257", "CN_SCHEDULER_PORT": "30259",
           "CN_KWOK_PORT": "30250", "CN_NOTIFIER_PORT": "38443"}

    def localcluster(*args: str) -> str:
        result = subprocess.run([sys.executable, "-m", "localcluster", *args], env=env,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    try:
        first = localcluster("up", "--nodes", "1")
        assert "cluster: up in" in first
        pids = [p["pid"] for p in json.loads((state / "processes.json").read_text())]
        assert len(pids) == 6
        second = localcluster("up", "--nodes", "1")
        assert "already running and healthy" in second
        assert [p["pid"] for p in json.loads((state / "processes.json").read_text())] == pids
    finally:
        stopped = localcluster("down")
    assert ("stopped notifier-apiserver, kwok, kube-scheduler, kube-controller-manager, "
            "kube-apiserver, etcd") in stopped
    assert not state.exists()
    assert _processes_mentioning(str(state)) == []
