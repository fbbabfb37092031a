"""``kubectl notify release podnotifier/NAME | notification/NAME``: end a held run or a
Notification's quiesce window, and wait until it has ended."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from kubectl_notify import output
from kubectl_notify.api import NotifierAPI
from kubectl_notify.cli import Release
from kubectl_notify.commands.notify import is_finished
from kubectl_notify.errors import FAILED, SUCCEEDED, PluginError
from kubectl_notify.terminal import Terminal

KINDS = {"podnotifiers": "podnotifier", "notifications": "notification"}


async def run(api: NotifierAPI, command: Release, terminal: Terminal) -> int:
    obj = await api.release(command.resource, command.name)
    kind = KINDS[command.resource]
    if command.wait != 0 and not is_finished(obj):
        versions = api.follow(command.resource, obj, is_finished, command.wait)
        async with aclosing(versions):
            async for version in versions:
                obj = version
    _print(obj, kind, command.output, terminal, waited=command.wait != 0)
    if command.wait == 0:
        return SUCCEEDED
    if not is_finished(obj):
        raise PluginError(
            f"error: timed out waiting for {kind}/{command.name} to be released (phase "
            f"{(obj.get('status') or {}).get('phase', 'Pending')}); it goes on: kubectl -n "
            f"{api.namespace} get {kind} {command.name} -w", FAILED)
    return SUCCEEDED if obj["status"]["phase"] == "Succeeded" else FAILED


def _print(obj: dict[str, Any], kind: str, format: str, terminal: Terminal,
           waited: bool) -> None:
    if format in ("yaml", "json"):
        terminal.line(output.dump(obj, format))
    elif format == "name":
        terminal.line(output.full_name(kind, obj))
    elif not waited:
        terminal.line(f"{kind}/{output.object_name(obj)} release requested")
    elif kind == "podnotifier":
        terminal.line(output.record_result(obj, wide=format == "wide"))
    else:
        terminal.line(output.notification_summary(obj))
