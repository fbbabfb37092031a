"""Shell completion: commands, flags and values offline; the bash/zsh scripts and kubectl's
plugin-completion protocol (candidates, then ':4')."""

from __future__ import annotations

import pytest

from kubectl_notify import completion
from kubectl_notify.__main__ import main


def offline(words: list[str]) -> list[str]:
    """Candidates with no cluster (pod lookups find nothing)."""
    return completion.candidates(["--kubeconfig", "/nonexistent", *words])


def test_first_word_offers_the_commands() -> None:
    assert offline([""]) == ["list", "can-i", "release", "verify-window", "completion"]
    assert offline(["ca"]) == ["can-i"]


def test_flags_of_each_command() -> None:
    flags = offline(["--"])
    assert {"--wait", "--dry-run", "--selector", "--parallelism", "--namespace"} <= set(flags)
    assert "--parallelism" not in offline(["list", "--"])
    assert offline(["can-i", "--con"]) == ["--context"]


def test_values_of_output_and_shells() -> None:
    assert offline(["db-0", "quiesce", "-o", ""]) == ["wide", "yaml", "json", "name"]
    assert offline(["list", "db-0", "-o", "y"]) == ["yaml"]
    assert offline(["completion", ""]) == ["bash", "zsh"]
    assert offline(["release", ""]) == ["podnotifier/", "notification/"]
    assert offline(["release", "n"]) == ["notification/"]
    assert offline(["verify-window", ""]) == ["podnotifier/", "notification/"]
    assert offline(["-n", ""]) == []
    assert offline(["--wait=1s", "--dry-run=server", "-c", "db", ""]) == [
        "list", "can-i", "release", "verify-window", "completion"]


def test_kubectl_protocol_ends_with_the_no_file_directive(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert completion.kubectl_complete(["--kubeconfig", "/nonexistent", "comp"]) == 0
    assert capsys.readouterr().out == "completion\n:4\n"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_scripts_call_the_hidden_complete_command(shell: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "kubectl-notify __complete" in script
    assert ("complete -F _kubectl_notify kubectl-notify" in script if shell == "bash"
            else "compdef _kubectl_notify kubectl-notify" in script)
    assert main(["__complete", "--kubeconfig", "/nonexistent", "li"]) == 0
    assert capsys.readouterr().out == "list\n"
