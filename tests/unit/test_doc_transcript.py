"""Reading a docs page's console commands with the output it shows for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.console import Ran, check_shown, shown_pattern
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


def test_shown_output_matches_words_in_order_with_any_spacing_and_ellipsis() -> None:
    shown = "v1alpha1.notifier.x-k8s.io   False (FailedDiscoveryCheck)   …"
    assert shown_pattern(shown).fullmatch(
        "v1alpha1.notifier.x-k8s.io  False (FailedDiscoveryCheck) 5m")
    assert not shown_pattern(shown).fullmatch("v1alpha1.notifier.x-k8s.io  True  5m")
    assert not shown_pattern("shop Terminating").fullmatch("shop Terminating 5m")


def test_a_command_must_print_what_is_shown_or_succeed_when_nothing_is() -> None:
    check_shown(Ran("kubectl get ns shop", 0, "NAME STATUS\nshop Terminating\n"),
                ("NAME   STATUS", "shop   …"))
    check_shown(Ran("kubectl get --raw /x", 1, "Error from server\n"), ("Error from server",))
    with pytest.raises(AssertionError):
        check_shown(Ran("kubectl get ns shop", 0, "NAME STATUS\nshop Active\n"),
                    ("NAME   STATUS",))
    with pytest.raises(AssertionError):
        check_shown(Ran("kubectl wait", 1, "timed out\n"), ())
