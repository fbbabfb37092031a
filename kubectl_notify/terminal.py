"""Where a command prints: its output stream and whether that is a terminal (progress is
redrawn in place only on a terminal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO


@dataclass
class Terminal:
    out: TextIO
    tty: bool

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def redraw(self, text: str) -> None:
        """Replace the current line with `text` (a terminal only)."""
        self.out.write(f"\r\033[K{text}")
        self.out.flush()

    def end_redraw(self) -> None:
        self.out.write("\n")
        self.out.flush()
