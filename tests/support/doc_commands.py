"""The shell commands a docs page tells its reader to run, read from the page itself, so a test
runs exactly what the page says.

A command is a line beginning with ``$ `` inside a fenced ```` ```console ```` block; a line
ending with a backslash continues on the next. Blocks are grouped by the heading they sit under.
"""

from __future__ import annotations

import re
from pathlib import Path

from localcluster.layout import REPO_ROOT

_FENCE = re.compile(r"^```(\w*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


def console_commands(page: str | Path, heading: str | None = None) -> list[str]:
    """The commands of docs page `page` (absolute, or relative to the repository root, e.g.
    ``docs/install.md``), only those under the heading `heading` (its text exactly) if given.

    Raises LookupError if the page has no such heading or it holds no command."""
    text = (REPO_ROOT / page).read_text()  # an absolute `page` replaces the root
    commands: list[str] = []
    current: str | None = None
    in_console = in_fence = False
    pending = ""
    seen_heading = heading is None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            in_fence = not in_fence
            in_console = in_fence and fence.group(1) == "console"
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
            continue
        if not pending.endswith("\\"):
            commands.append(pending)
            pending = ""
    if not seen_heading:
        raise LookupError(f"{Path(page)}: no heading {heading!r}")
    if not commands:
        raise LookupError(f"{Path(page)}: no ```console command"
                          + (f" under {heading!r}" if heading else ""))
    return commands
