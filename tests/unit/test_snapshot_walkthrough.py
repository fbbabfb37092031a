"""docs/consistent-snapshots.md: its workloads' declarations validate as the server reads them,
its Notification validates, and its held commands behave as the page says — run here with
stand-ins for `psql` and `mysql` that log the SQL they are fed: the quiesce statement comes
before the ready line, and closing stdin (what a release does first) ends the session with the
unquiesce in it."""

from __future__ import annotations

import re
import select
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.api.decoding import Body
from apiserver.fanout.spec import validate
from apiserver.notifier.declarations import ANNOTATION, ExecAction, parse_notifiers

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
    containers = [c["name"] for c in template["spec"]["containers"]]
    declared = parse_notifiers(template["metadata"]["annotations"][ANNOTATION],
                               containers=containers)
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
     "SELECT lsn FROM pg_backup_stop(false);"),
    ("mysql", "mysql", "FLUSH TABLES WITH READ LOCK;", None),
])
def test_held_command_quiesces_before_ready_and_unquiesces_when_stdin_closes(
        tmp_path: Path, workload_name: str, client: str, quiesce: str, unquiesce: str | None
) -> None:
    _, argv, _ = held_command(workload_name)
    (tmp_path / client).write_text(FAKE_CLIENT)
    (tmp_path / client).chmod(0o755)
    log = tmp_path / "sql.log"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SQL_LOG": str(log),
           "MYSQL_ROOT_PASSWORD": "secret"}
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                               text=True)
    assert process.stdin is not None and process.stdout is not None
    try:
        assert select.select([process.stdout], [], [], 5)[0], "no output within 5 s"
        assert process.stdout.readline() == "ready\n"
        assert log.read_text().splitlines()[0] == quiesce
        assert process.poll() is None  # held: the session stays open
        process.stdin.close()  # the release closes stdin first
        assert process.wait(timeout=5) == 0
    finally:
        process.kill()
    statements = log.read_text().splitlines()
    assert statements[0] == quiesce
    if unquiesce is not None:
        assert statements[-1] == unquiesce
