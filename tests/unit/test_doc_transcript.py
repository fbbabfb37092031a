"""Reading a docs page's console commands with the output it shows for each."""

from __future__ import annotations

from pathlib import Path

from tests.support.doc_commands import ConsoleStep, console_transcript

PAGE = """# Check
```console
$ kubectl auth can-i delete podnotifiers \\
    --namespace shop
no
$ kubectl get apiservice
NAME   AVAILABLE
x      True
```
Text between blocks is no output.
```console
no command yet: not the output of the command above
$ kubectl version
```
"""


def test_each_command_with_the_lines_shown_after_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert console_transcript(page) == [
        ConsoleStep("kubectl auth can-i delete podnotifiers \\\n    --namespace shop", ("no",)),
        ConsoleStep("kubectl get apiservice", ("NAME   AVAILABLE", "x      True")),
        ConsoleStep("kubectl version", ()),
    ]
