"""``kubectl notify verify-window notification/NAME | podnotifier/NAME TIME...``: whether each
snapshot time lies inside the quiesce window (`kubectl_notify.windows` says how it is read)."""

from __future__ import annotations

from datetime import timedelta

from kubectl_notify import windows
from kubectl_notify.api import NotifierAPI
from kubectl_notify.cli import VerifyWindow
from kubectl_notify.commands.release import KINDS
from kubectl_notify.errors import FAILED, SUCCEEDED
from kubectl_notify.terminal import Terminal


async def run(api: NotifierAPI, command: VerifyWindow, terminal: Terminal) -> int:
    instants = [windows.parse_time(text) for text in command.times]  # refused before a request
    kind = KINDS[command.resource]
    window = windows.window_of(kind, await api.get(command.resource, command.name))
    skew = timedelta(seconds=command.clock_skew_seconds)
    length = (window.end.earliest - window.start.earliest).total_seconds()
    terminal.line(f"window of {kind}/{command.name}: {window.start.text} to {window.end.text} "
                  f"({length:.3f}s; {window.what}, the server's clock)")
    terminal.line("each time is taken as the whole interval its last digit allows (whole "
                  f"seconds: a second), widened by {command.clock_skew_seconds:g}s of clock skew "
                  "on each side; inside only if all of it is")
    verdicts = [windows.verify(window, instant, skew) for instant in instants]
    for verdict in verdicts:
        terminal.line(f"{verdict.instant.text}  {'inside' if verdict.inside else 'OUTSIDE'}: "
                      f"{verdict.detail}")
    return SUCCEEDED if all(verdict.inside for verdict in verdicts) else FAILED
