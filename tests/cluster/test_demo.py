"""make demo (hack/demo.sh) against the session plane (its `localcluster up` reuses it): it
ends 0, every command it shows parses back with shlex to what ran, and its kubectl notify
steps (real kubectl running the plugin from PATH) print the plugin's results."""

from __future__ import annotations

import os
import subprocess

import pytest

from localcluster.layout import REPO_ROOT
from tests.support.kube import Cluster
from tests.unit.test_demo_steps import ANSI, shown_commands

pytestmark = pytest.mark.cluster


def test_the_demo_runs_and_shows_each_command_as_it_ran(cluster: Cluster) -> None:
    try:
        ran = subprocess.run(["bash", "hack/demo.sh"], cwd=REPO_ROOT, capture_output=True,
                             text=True, env={**os.environ, "TERM": "dumb"}, timeout=600)
        assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
        commands = shown_commands(ran.stderr)
        kubectl = str(cluster.bins / "kubectl")
        plugin = [argv for argv in commands if argv[:2] == [kubectl, "notify"]]
        assert [argv[2:4] for argv in plugin] == [["-n", "demo"]] * 3, plugin
        assert (plugin[0][5], plugin[1][5], plugin[2][4]) == ("reload", "lock", "release")
        released = plugin[2][5]
        assert released.startswith("podnotifier/"), plugin
        out = ANSI.sub("", ran.stdout).splitlines()
        assert any(line.startswith("podnotifier/") and "-reload-" in line
                   and " Succeeded in " in line for line in out), out
        assert f"held until released: kubectl notify -n demo release {released}" in out, out
        assert any(line.startswith(f"{released} Succeeded") for line in out), out
        # an argument with spaces and quotes is shown quoted: it comes back as one argument
        assert any(arg.startswith("jsonpath={.status.heldTime} held, released ")
                   for argv in commands for arg in argv), commands
    finally:
        cluster.delete_namespace("demo")
