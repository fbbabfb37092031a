"""docs/consistent-snapshots.md: its workloads' declarations validate as the server reads them,
its Notification validates, and its held commands behave as the page says — run here with
stand-ins for `psql` and `mysql` that log the SQL they are fed: the quiesce statement comes
before the ready line, and closing stdin (what a release does first) ends the session with the
unquiesce in it; PostgreSQL's also when its whole process tree gets SIGTERM instead."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.api.decoding import Body
from apiserver.fanout.spec import validate
from apiserver.notifier.declarations import (
    ANNOTATION,
    ExecAction,
    container_ports,
    parse_notifiers,
)

PAGE = Path(__file__).parents[2] / "docs" / "consistent-snapshots.md"

FAKE_CLIENT = """#!/bin/sh
# Logs each statement it reads to $SQL_LOG; prints what psql's \\echo or a SELECT of a string
# literal would print.
while IFS= read -r line; do
  printf '%s\\n' "$line" >> "$SQL_LOG"
  case $line in
    '\\echo '*) printf '%s\\n' "${line#\\\\echo }" ;;
    "SELECT '"*"';") v=${line#"SELECT '"}; printf '%s\\n' "${v%"';"}" ;;
  esac
done
"""


def documents() -> list[dict[str, Any]]:
    """The YAML blocks' objects, and those the shell blocks create from a here-document."""
    text = PAGE.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    blocks += re.findall(r"kubectl create -f - <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def workload(name: str) -> dict[str, Any]:
    (found,) = [d for d in documents()
                if d["kind"] == "StatefulSet" and d["metadata"]["name"] == name]
    return found


def held_command(name: str) -> tuple[str, list[str], int]:
    """The StatefulSet's only notifier: its name, argv and maxHoldSeconds, as the server
    parses the template's annotation."""
    template = workload(name)["spec"]["template"]
    declared = parse_notifiers(template["metadata"]["annotations"][ANNOTATION],
                               containers=container_ports(template))
    ((notifier,),) = declared.values()
    assert notifier.hold is not None and isinstance(notifier.action, ExecAction)
    assert notifier.hold.ready_line == "ready"
    return notifier.name, list(notifier.argv), notifier.hold.max_hold_seconds


def test_the_notification_validates() -> None:
    (notification,) = [d for d in documents() if d["kind"] == "Notification"]
    spec = notification["spec"]
    assert spec["notifier"] == held_command("pg")[0]
    validated = validate(Body(notification), "prod", max_parallelism=100, max_timeout_seconds=600,
                         max_hold_seconds=3600)
    assert validated.spec["release"]["maxHoldSeconds"] == 900


@pytest.mark.parametrize(("workload_name", "client", "quiesce", "unquiesce"), [
    ("pg", "psql", "SELECT pg_backup_start('snapshot', true);",
     "SELECT 'stop lsn ' || lsn || chr(10) || '--- backup_label' || chr(10) || labelfile || "
     "'--- tablespace_map' || chr(10) || coalesce(spcmapfile, '') || '--- end' "
     "FROM pg_backup_stop(true);"),
    ("mysql", "mysql", "FLUSH TABLES WITH READ LOCK;", "UNLOCK TABLES;"),
])
def test_held_command_quiesces_before_ready_and_unquiesces_when_stdin_closes(
        tmp_path: Path, workload_name: str, client: str, quiesce: str, unquiesce: str
) -> None:
    _, argv, _ = held_command(workload_name)
    (tmp_path / client).write_text(FAKE_CLIENT)
    (tmp_path / client).chmod(0o755)
    log = tmp_path / "sql.log"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SQL_LOG": str(log)}
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                               text=True)
    assert process.stdin is not None and process.stdout is not None
    try:
        assert select.select([process.stdout], [], [], 5)[0], "no output within 5 s"
        assert process.stdout.readline() == "ready\n"
        assert quiesce in log.read_text().splitlines()
        assert process.poll() is None  # held: the session stays open
        process.stdin.close()  # the release closes stdin first
        assert process.wait(timeout=5) == 0
    finally:
        process.kill()
    statements = log.read_text().splitlines()
    assert statements.index(quiesce) < len(statements) - 1
    assert statements[-1] == unquiesce


def test_the_postgres_command_still_stops_the_backup_when_it_is_sent_sigterm(
        tmp_path: Path) -> None:
    """Release's second step, and what a runtime that never closes stdin (kwok) gets: SIGTERM
    to the command and every descendant (the stop script's tree). Only `cat` ends; the same
    psql session then runs pg_backup_stop() and the command exits 0."""
    _, argv, _ = held_command("pg")
    (tmp_path / "psql").write_text(FAKE_CLIENT)
    (tmp_path / "psql").chmod(0o755)
    log = tmp_path / "sql.log"
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={"PATH": f"{tmp_path}:/usr/bin:/bin", "SQL_LOG": str(log)},
                               start_new_session=True)
    assert process.stdout is not None
    try:
        assert select.select([process.stdout], [], [], 5)[0], "no output within 5 s"
        assert process.stdout.readline() == "ready\n"
        # A release reaches the command after "ready" went through kube-apiserver, the server
        # and its client, long after the command began waiting on its stdin; here "ready" is
        # read at once, so wait for that point (a signal before `cat` exists would miss it).
        wait_for_process("cat", group=process.pid)
        os.killpg(process.pid, signal.SIGTERM)  # stdin stays open
        assert process.wait(timeout=5) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert "FROM pg_backup_stop(true);" in log.read_text().splitlines()[-1]


def wait_for_process(name: str, *, group: int, timeout: float = 10) -> None:
    """Until a process called `name` runs in process group `group` (from /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):  # gone meanwhile
                text = stat.read_text()
                comm, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1]
                if comm == name and int(fields.split()[2]) == group:  # state, ppid, pgrp
                    return
        time.sleep(0.01)
    raise AssertionError(f"no process {name!r} in process group {group} within {timeout} s")
