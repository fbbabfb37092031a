"""``kubectl notify -l SELECTOR NOTIFIER``: a Notification, its progress, the failed pods."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
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
PLAIN_INTERVAL = 1.0
"""Seconds between plain progress lines while the phase stays the same."""


QUIESCED = "Quiesced"


def is_finished(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in FINISHED


def is_quiesced(obj: dict[str, Any]) -> bool:
    """In its quiesce window: every pod quiesced (condition Quiesced True)."""
    return any(c.get("type") == QUIESCED and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def release_spec(command: NotifySelector) -> dict[str, Any] | None:
    """``spec.release`` from --release, --release-after and --max-hold; None without them."""
    release: dict[str, Any] = {}
    if command.release:
        release["notifier"] = command.release
    if command.release_after_seconds is not None:
        release["afterSeconds"] = command.release_after_seconds
    if command.max_hold_seconds is not None:
        release["maxHoldSeconds"] = command.max_hold_seconds
    return release or None


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
    release = release_spec(command)
    if release:
        spec["release"] = release
    if command.concurrency_policy:
        spec["concurrencyPolicy"] = command.concurrency_policy
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Notification",
            "metadata": {"generateName": generate_name(command.notifier)}, "spec": spec}


async def run(api: NotifierAPI, command: NotifySelector, terminal: Terminal,
              clock: Callable[[], float] = time.monotonic) -> int:
    obj = await api.create_notification(request_body(command), dry_run=command.dry_run)
    structured = command.output in ("yaml", "json", "name")
    if command.dry_run or command.wait == 0:
        _print_object(obj, command, terminal, created=True)
        return SUCCEEDED
    progress = None if structured else Progress(terminal, clock)
    if progress:
        terminal.line(f"{output.notification_name(obj)} created")
        progress.show(obj)
    windowed = "release" in obj.get("spec", {})

    def settled(version: dict[str, Any]) -> bool:
        return is_finished(version) or (windowed and is_quiesced(version))

    try:
        versions = api.follow("notifications", obj, settled, command.wait)
        async with aclosing(versions):
            async for version in versions:
                obj = version
                if progress:
                    progress.show(obj)
    finally:
        if progress:
            progress.end(obj)
    if structured:
        _print_object(obj, command, terminal, created=False)
    elif not is_finished(obj) and is_quiesced(obj):
        terminal.line(output.window_summary(obj))
        terminal.line(f"quiesced until released: kubectl notify -n {api.namespace} release "
                      f"{output.notification_name(obj)}")
    else:
        terminal.line(output.notification_summary(obj))
        failed = _counts_failed(obj)
        if failed:
            records = await api.items("podnotifiers", labelSelector=(
                f"{NOTIFICATION_LABEL}={obj['metadata']['name']},!{ROLLBACK_LABEL}"),
                fieldSelector="status.phase=Failed")
            terminal.line(output.failed_pods(records, failed))
    if not is_finished(obj) and is_quiesced(obj):
        return SUCCEEDED
    if not is_finished(obj):
        raise PluginError(
            f"error: timed out waiting for {output.notification_name(obj)} to finish; it goes "
            f"on: kubectl -n {api.namespace} get notification {obj['metadata']['name']} -w "
            "(kubectl delete stops it and rolls back)", FAILED)
    return SUCCEEDED if obj["status"]["phase"] == "Succeeded" else FAILED


def _counts_failed(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("counts") or {}).get("failed") or 0)


class Progress:
    """A Notification's progress: on a terminal one bar redrawn at each change; otherwise a
    plain line when the phase changes, or the counts did and PLAIN_INTERVAL passed since the
    last line (a 5000-pod run must not print thousands of lines), and the last state at the
    end."""

    def __init__(self, terminal: Terminal, clock: Callable[[], float]) -> None:
        self._terminal = terminal
        self._clock = clock
        self._printed = ""
        self._phase = ""
        self._printed_at = -PLAIN_INTERVAL

    def show(self, obj: dict[str, Any]) -> None:
        if self._terminal.tty:
            self._terminal.redraw(output.progress_bar(obj))
            return
        text, phase = output.progress_line(obj), (obj.get("status") or {}).get("phase", "")
        if text != self._printed and (phase != self._phase
                                      or self._clock() - self._printed_at >= PLAIN_INTERVAL):
            self._print(text, phase)

    def end(self, obj: dict[str, Any]) -> None:
        if self._terminal.tty:
            self._terminal.end_redraw()
        elif output.progress_line(obj) != self._printed:
            self._print(output.progress_line(obj), (obj.get("status") or {}).get("phase", ""))

    def _print(self, text: str, phase: str) -> None:
        self._terminal.line(text)
        self._printed, self._phase, self._printed_at = text, phase, self._clock()


def _print_object(obj: dict[str, Any], command: NotifySelector, terminal: Terminal,
                  created: bool) -> None:
    if command.output in ("yaml", "json"):
        terminal.line(output.dump(obj, command.output))
    elif command.output == "name":
        terminal.line(output.full_name("notification", obj))
    elif created:
        suffix = " (server dry run)" if command.dry_run else ""
        terminal.line(f"{output.notification_name(obj)} created{suffix}")
