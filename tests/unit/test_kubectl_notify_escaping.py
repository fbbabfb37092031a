"""kubectl notify escapes terminal control characters in everything it prints: container
output, server messages, names (docs/kubectl-notify.md, "Control characters")."""

from __future__ import annotations

import io
import logging
from typing import Any

import httpx
import pytest

from kubectl_notify import __main__ as plugin
from kubectl_notify import output
from kubectl_notify.cli import NotifyPod
from kubectl_notify.errors import ConfigError
from kubectl_notify.escaping import escape_terminal
from kubectl_notify.terminal import Terminal
from tests.unit.test_kubectl_notify_commands import NOTIFY, FakeServer, run, run_record

HOSTILE = ("\x1b]0;owned\x07"  # OSC: set the window title, ended by BEL
           "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 link, ended by ST
           "\x1b[2J\x1b[31mred"  # CSI: clear the screen, colour
           "\rfake ok\a")  # CR overwrites the line, BEL rings
CONTROLS = {chr(code) for code in (*range(0x20), *range(0x7f, 0xa0))} - {"\n", "\t"}


def controls_in(text: str) -> set[str]:
    return set(text) & CONTROLS


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[31mred\x1b[0m", "^[[31mred^[[0m"),
    ("\x1b]0;title\x07", "^[]0;title\\a"),
    ("\x1b]8;;https://x/\x1b\\", "^[]8;;https://x/^[\\"),
    ("50%\r100%", "50%\\r100%"),
    ("ding\a", "ding\\a"),
    ("a\bb\fc\vd", "a\\bb\\fc\\vd"),
    ("nul\x00 del\x7f", "nul\\x00 del\\x7f"),
    ("\x9b31m \x9d0;t\x9c", "\\u009b31m \\u009d0;t\\u009c"),
    ("two\nlines\tand a tab", "two\nlines\tand a tab"),
    ("ünïcode 日本 ✓", "ünïcode 日本 ✓"),
])
def test_each_control_character_is_shown_not_obeyed(raw: str, shown: str) -> None:
    assert escape_terminal(raw) == shown


def test_escaping_leaves_no_control_character_and_is_idempotent() -> None:
    every = "".join(chr(code) for code in range(0x100))
    once = escape_terminal(every)
    assert controls_in(once) == set()
    assert escape_terminal(once) == once


def test_the_terminal_escapes_lines_and_redraws_but_keeps_its_own_redraw_sequence() -> None:
    out = io.StringIO()
    terminal = Terminal(out, tty=True)
    terminal.line(HOSTILE)
    terminal.redraw("\x1b[31mbar\a")
    assert out.getvalue() == (escape_terminal(HOSTILE) + "\n" + "\r\x1b[K^[[31mbar\\a")


def test_table_columns_line_up_as_printed() -> None:
    text = output.table(["A", "B"], [["\x1b[31mx", "one"], ["plain", "two"]])
    first, second, third = text.splitlines()
    assert second == "^[[31mx   one"
    assert [line.rindex(cell) for line, cell in ((first, "B"), (second, "one"),
                                                  (third, "two"))] == [10, 10, 10]


def test_a_cell_is_cut_to_its_width_as_printed() -> None:
    text = output.record_result({"metadata": {"name": "r"}, "status": {"phase": "Succeeded",
        "containers": [{"name": "db", "phase": "Succeeded", "exitCode": 0,
                        "stdout": "\x1b" * 40}]}})
    assert text.splitlines()[-1].endswith("   " + "^[" * 28 + "^...")


def test_a_cr_inside_a_line_is_shown_not_taken_for_a_line_break() -> None:
    assert output.last_line("progress 10%\rprogress 100%\r\n") == (
        "progress 10%\rprogress 100%")
    assert output.lines_of("a\r\nb\rc\n") == ["a", "b\rc"]


@pytest.mark.parametrize("wide", [False, True])
async def test_a_runs_output_and_message_reach_the_terminal_escaped(wide: bool) -> None:
    containers: list[dict[str, Any]] = [
        {"name": "db", "phase": "Failed", "exitCode": 1, "stdout": f"start\n{HOSTILE}\n",
         "stderr": "\x1b[1mbold error\x1b[0m\n", "message": "exited \x1b]0;x\x07"}]
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record(
        "Failed", reason="NonZeroExitCode", message="db: \x1b[2Jexit code 1\a",
        containers=containers))})
    _, printed = await run(server, NotifyPod("db-0", "quiesce",
                                             output="wide" if wide else ""))
    assert controls_in(printed) == set()
    assert "db: ^[[2Jexit code 1\\a" in printed
    assert "^[]0;owned\\a" in printed
    if wide:
        assert "    " + escape_terminal(HOSTILE) in printed.splitlines()


def test_a_server_error_message_is_escaped_on_stderr(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(*args: Any) -> Any:
        raise ConfigError("context \x1b]0;owned\x07 not found\r")

    monkeypatch.setattr(plugin.kubeconfig, "resolve", refuse)
    assert plugin.main(["db-0", "quiesce"], environ={}) == ConfigError.exit_code
    assert capsys.readouterr().err == "error: context ^[]0;owned\\a not found\\r\n"


def test_log_lines_are_escaped() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "bad \x1b[31m%s", ("\a",),
                               None)
    assert plugin.EscapingFormatter("error: %(message)s").format(record) == (
        "error: bad ^[[31m\\a")
