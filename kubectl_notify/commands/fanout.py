"""``kubectl notify -l SELECTOR NOTIFIER``: a Notification, its progress, the failed pods."""

from __future__ import annotations

import re
from contextlib import aclosing
from typing import Any

from kubectl_notify import output
from kubectl_notify.api import GROUP, NOTIFICATION_LABEL, ROLLBACK_LABEL, VERSION, NotifierAPI
from kubectl_notify.cli import NotifySelector
from kubectl_notify.commands.notify import FINISHED
from kubectl_notify.errors import FAILED, SUCCEEDED, PluginError, UsageError
from kubectl_notify.selectors import label_selector
from kubectl_notify.terminal import Terminal

GENERATE_NAME_PREFIX_LENGTH = 40


def is_finished(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in FINISHED


def generate_name(notifier: str) -> str:
    """``<notifier>-`` made a DNS label (a qualified name such as ``example.com/quiesce`` may
    hold characters an object name cannot)."""
    base = re.sub(r"[^a-z0-9-]+", "-", notifier.lower()).strip("-")
    return (base[:GENERATE_NAME_PREFIX_LENGTH].rstrip("-") or "notification") + "-"


def request_body(command: NotifySelector) -> dict[str, Any]:
    try:
        selector = label_selector(command.selector)
    except ValueError as error:
        raise UsageError(str(error)) from None
    spec: dict[str, Any] = {"selector": selector, "notifier": command.notifier}
    if command.containers:
        spec["containers"] = list(command.containers)
    if command.timeout_seconds is not None:
        spec["timeoutSeconds"] = command.timeout_seconds
    if command.parallelism is not None:
        spec["parallelism"] = command.parallelism
    if command.rollback:
        spec["rollback"] = {"notifier": command.rollback}
    if command.continue_on_failure:
        spec["failurePolicy"] = "Continue"
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
            "metadata": {"generateName": generate_name(command.notifier)}, "spec": spec}


async def run(api: NotifierAPI, command: NotifySelector, terminal: Terminal) -> int:
    obj = await api.create_notification(request_body(command), dry_run=command.dry_run)
    structured = command.output in ("yaml", "json", "name")
    if command.dry_run or command.wait == 0:
        _print_object(obj, command, terminal, created=True)
        return SUCCEEDED
    if not structured:
        terminal.line(f"{output.notification_name(obj)} created")
    shown = _show_progress(obj, terminal, "", structured)
    try:
        versions = api.follow("notifications", obj, is_finished, command.wait)
        async with aclosing(versions):
            async for version in versions:
                obj = version
                shown = _show_progress(obj, terminal, shown, structured)
    finally:
        if terminal.tty and shown and not structured:
            terminal.end_redraw()
    if structured:
        _print_object(obj, command, terminal, created=False)
    else:
        terminal.line(output.notification_summary(obj))
        failed = _counts_failed(obj)
        if failed:
            records = await api.items("podnotifiers", labelSelector=(
                f"{NOTIFICATION_LABEL}={obj['metadata']['name']},!{ROLLBACK_LABEL}"),
                fieldSelector="status.phase=Failed")
            terminal.line(output.failed_pods(records, failed))
    if not is_finished(obj):
        raise PluginError(
            f"error: timed out waiting for {output.notification_name(obj)} to finish; it goes "
            f"on: kubectl -n {api.namespace} get notification {obj['metadata']['name']} -w "
            "(kubectl delete stops it and rolls back)", FAILED)
    return SUCCEEDED if obj["status"]["phase"] == "Succeeded" else FAILED


def _counts_failed(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("counts") or {}).get("failed") or 0)


def _show_progress(obj: dict[str, Any], terminal: Terminal, shown: str, quiet: bool) -> str:
    """Draw (a terminal) or print (otherwise, only when it changed) the progress; returns
    what is shown now."""
    if quiet:
        return shown
    if terminal.tty:
        text = output.progress_bar(obj)
        terminal.redraw(text)
        return text
    text = output.progress_line(obj)
    if text != shown:
        terminal.line(text)
    return text


def _print_object(obj: dict[str, Any], command: NotifySelector, terminal: Terminal,
                  created: bool) -> None:
    if command.output in ("yaml", "json"):
        terminal.line(output.dump(obj, command.output))
    elif command.output == "name":
        terminal.line(output.full_name("notification", obj))
    elif created:
        suffix = " (server dry run)" if command.dry_run else ""
        terminal.line(f"{output.notification_name(obj)} created{suffix}")
