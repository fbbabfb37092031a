"""make demo (hack/demo.sh) prints each command it runs shell-quoted, exactly as it runs
(hack/demo/step.sh), and runs the kubectl notify plugin in some of its steps."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from localcluster.layout import REPO_ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def shown_commands(stderr: str) -> list[list[str]]:
    """The argv of every ``$ `` line a demo step printed, read back with shlex."""
    return [shlex.split(line[2:]) for line in ANSI.sub("", stderr).splitlines()
            if line.startswith("$ ")]


def test_a_step_prints_its_command_so_that_it_parses_back_to_the_same_argv() -> None:
    argv = ["printf", "%s|", "a b", '{"spec":{"notifier":"quiesce"}}', "it's", "$HOME", "",
            "--for=condition=Complete", "{.status.heldTime}{\"\\n\"}"]
    ran = subprocess.run(
        ["bash", "-c", 'source hack/demo/step.sh && step "$@"', "demo", *argv],
        cwd=REPO_ROOT, capture_output=True, text=True, env={"py": sys.executable,
                                                            "PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "".join(f"{arg}|" for arg in argv[2:])
    assert shown_commands(ran.stderr) == [argv]
    assert "'a b'" in ran.stderr and "'$HOME'" in ran.stderr  # quoted, not expanded


def test_the_demo_runs_the_plugin_through_kubectl() -> None:
    steps = [line.strip() for line in (REPO_ROOT / "hack" / "demo.sh").read_text().splitlines()
             if line.strip().startswith("step ")]
    plugin = [line for line in steps if line.startswith('step "$kubectl" notify ')]
    assert any(" release " in line for line in plugin) and len(plugin) >= 2, steps
