"""The shell commands a docs page tells its reader to run, read from the page itself, so a test
runs exactly what the page says.

A command is a line beginning with ``$ `` inside a fenced ```` ```console ```` block; a line
ending with a backslash continues on the next. The lines after a command, up to the next
command or the end of the block, are the output the page shows for it. Blocks are grouped by
the heading they sit under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from localcluster.layout import REPO_ROOT

_FENCE = re.compile(r"^```(\w*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


@dataclass(frozen=True)
class ConsoleStep:
    """One command of a page and the output lines the page shows after it."""

    command: str
    output: tuple[str, ...]


def console_commands(page: str | Path, heading: str | None = None) -> list[str]:
    """The commands of docs page `page` (absolute, or relative to the repository root, e.g.
    ``docs/install.md``), only those under the heading `heading` (its text exactly) if given.

    Raises LookupError if the page has no such heading or it holds no command."""
    return [step.command for step in console_transcript(page, heading)]


def console_transcript(page: str | Path, heading: str | None = None) -> list[ConsoleStep]:
    """As `console_commands`, each command with the output the page shows for it."""
    text = (REPO_ROOT / page).read_text()  # an absolute `page` replaces the root
    steps: list[tuple[str, list[str]]] = []
    current: str | None = None
    in_console = in_fence = collecting = False
    pending = ""
    seen_heading = heading is None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            in_fence = not in_fence
            in_console = in_fence and fence.group(1) == "console"
            collecting = False
            continue
        if not in_fence:
            if match := _HEADING.match(line):
                current = match.group(1)
                seen_heading = seen_heading or current == heading
            continue
        if not in_console or (heading is not None and current != heading):
            continue
        if pending:
            pending += "\n" + line
        elif line.startswith("$ "):
            pending = line[2:]
        else:
            if collecting:
                steps[-1][1].append(line)
            continue
        if not pending.endswith("\\"):
            steps.append((pending, []))
            pending = ""
            collecting = True
    if not seen_heading:
        raise LookupError(f"{Path(page)}: no heading {heading!r}")
    if not steps:
        raise LookupError(f"{Path(page)}: no ```console command"
                          + (f" under {heading!r}" if heading else ""))
    return [ConsoleStep(command, tuple(output)) for command, output in steps]
