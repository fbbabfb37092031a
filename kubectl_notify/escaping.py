"""Terminal control characters made visible: what the plugin prints comes from the server and
from containers (their output, messages, names), and none of it may drive the user's terminal.

kubectl escapes what it prints with ``printers.EscapeTerminal`` (k8s.io/cli-runtime): ESC
becomes ``^[`` and CR ``\\r``. The plugin does the same and more, since BEL, backspace and
the 8-bit C1 controls (CSI U+009B, OSC U+009D, which some terminals obey) are no safer:

- ESC (U+001B) -> ``^[``, as kubectl; so a CSI or OSC sequence (``ESC ]`` ... BEL) is shown,
  never run;
- CR, BEL, backspace, form feed, vertical tab -> ``\\r``, ``\\a``, ``\\b``, ``\\f``, ``\\v``
  (Go's ``strconv.Quote`` spelling);
- every other C0 control and DEL -> ``\\xHH``; the C1 controls (U+0080..U+009F) -> ``\\u00HH``.

Newline and tab are kept: they lay out lines and columns. Escaping is idempotent (an escaped
text has no control character left), so text may pass through it twice.
"""

from __future__ import annotations

KEPT = frozenset("\n\t")
_NAMED = {"\x1b": "^[", "\r": "\\r", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _spelling(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


_TABLE = {code: _spelling(code) for code in (*range(0x20), *range(0x7f, 0xa0))
          if chr(code) not in KEPT}


def escape_terminal(text: str) -> str:
    """`text` with every terminal control character but newline and tab made visible."""
    return text.translate(_TABLE)
