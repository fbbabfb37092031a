"""Reading a docs page's console commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_commands import console_commands

PAGE = """# Install
```console
$ helm install cn charts/container-notifier \\
    --namespace container-notifier
NAME: cn
$ kubectl get apiservice
```
## Check
```yaml
$ not a command: a yaml block
```
```console
$ kubectl notify pod/db-0 quiesce
```
"""


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return path


def test_every_console_command_with_continuations_and_not_output(page: Path) -> None:
    assert console_commands(page) == [
        "helm install cn charts/container-notifier \\\n    --namespace container-notifier",
        "kubectl get apiservice",
        "kubectl notify pod/db-0 quiesce",
    ]


def test_only_the_commands_under_a_heading(page: Path) -> None:
    assert console_commands(page, "Check") == ["kubectl notify pod/db-0 quiesce"]


def test_a_missing_heading_or_an_empty_one_is_an_error(page: Path, tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no heading 'Upgrade'"):
        console_commands(page, "Upgrade")
    empty = tmp_path / "empty.md"
    empty.write_text("# Nothing\n```yaml\nkind: Pod\n```\n")
    with pytest.raises(LookupError, match="no ```console command"):
        console_commands(empty)
