"""``kubectl notify POD NOTIFIER``: one run, waited for, a line per container."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

from kubectl_notify import output
from kubectl_notify.api import GROUP, VERSION, NotifierAPI
from kubectl_notify.cli import MAX_SERVER_WAIT_SECONDS, NotifyPod
from kubectl_notify.errors import FAILED, SUCCEEDED, PluginError
from kubectl_notify.terminal import Terminal

FINISHED = ("Succeeded", "Failed")
HELD = output.HELD


def is_finished(record: dict[str, Any]) -> bool:
    return (record.get("status") or {}).get("phase") in FINISHED


def is_settled(record: dict[str, Any]) -> bool:
    """Finished, or a held notifier's run that reported ready: it stays Held until released,
    so the command returns there (exit 0) and says how to release it."""
    return is_finished(record) or (record.get("status") or {}).get("phase") == HELD


def request_body(command: NotifyPod) -> dict[str, Any]:
    spec: dict[str, Any] = {"notifier": command.notifier}
    if command.containers:
        spec["containers"] = list(command.containers)
    if command.timeout_seconds is not None:
        spec["timeoutSeconds"] = command.timeout_seconds
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNotifier", "spec": spec}


def server_wait(wait: float | None) -> int:
    """The ``waitSeconds`` to ask for: the wait, bounded by the server's 50."""
    if wait is None:
        return MAX_SERVER_WAIT_SECONDS
    return min(MAX_SERVER_WAIT_SECONDS, math.ceil(wait))


async def run(api: NotifierAPI, command: NotifyPod, terminal: Terminal,
              clock: Callable[[], float] = time.monotonic) -> int:
    deadline = None if command.wait is None else clock() + command.wait
    record = await api.notify(command.pod, request_body(command), dry_run=command.dry_run,
                              wait_seconds=0 if command.dry_run else server_wait(command.wait))
    if command.dry_run or command.wait == 0:
        _print_created(record, command, terminal)
        return SUCCEEDED
    if not is_settled(record):
        remaining = None if deadline is None else max(0.0, deadline - clock())
        versions = api.follow("podnotifiers", record, is_settled, remaining)
        async with aclosing(versions):
            async for version in versions:
                record = version
    _print_result(record, command.output, terminal)
    if record["status"]["phase"] == HELD:
        if command.output not in ("yaml", "json", "name"):
            terminal.line(f"held until released: kubectl notify -n {api.namespace} release "
                          f"{output.record_name(record)}")
        return SUCCEEDED
    if not is_settled(record):
        raise PluginError(
            f"error: timed out waiting for {output.record_name(record)} to finish (phase "
            f"{(record.get('status') or {}).get('phase', 'Pending')}); it goes on: kubectl -n "
            f"{api.namespace} get podnotifier {record['metadata']['name']} -w", FAILED)
    return SUCCEEDED if record["status"]["phase"] == "Succeeded" else FAILED


def _print_created(record: dict[str, Any], command: NotifyPod, terminal: Terminal) -> None:
    if command.output in ("yaml", "json"):
        terminal.line(output.dump(record, command.output))
    elif command.output == "name":
        terminal.line(output.full_name("podnotifier", record))
    else:
        suffix = " (server dry run)" if command.dry_run else ""
        terminal.line(f"{output.record_name(record)} created{suffix}")


def _print_result(record: dict[str, Any], format: str, terminal: Terminal) -> None:
    if format in ("yaml", "json"):
        terminal.line(output.dump(record, format))
    elif format == "name":
        terminal.line(output.full_name("podnotifier", record))
    else:
        terminal.line(output.record_result(record, wide=format == "wide"))
