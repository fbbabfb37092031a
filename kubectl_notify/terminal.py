"""Where a command prints: its output stream and whether that is a terminal (progress is
redrawn in place only on a terminal). Everything printed is escaped first
(``escaping.escape_terminal``): only the plugin's own redraw sequence reaches the terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from kubectl_notify.escaping import escape_terminal


@dataclass
class Terminal:
    out: TextIO
    tty: bool

    def line(self, text: str) -> None:
        print(escape_terminal(text), file=self.out, flush=True)

    def redraw(self, text: str) -> None:
        """Replace the current line with `text` (a terminal only)."""
        self.out.write(f"\r\033[K{escape_terminal(text)}")
        self.out.flush()

    def end_redraw(self) -> None:
        self.out.write("\n")
        self.out.flush()
