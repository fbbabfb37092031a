"""kubectl notify's command line: commands, kubectl's global flags anywhere, optional values
only after '=', usage errors worded like kubectl's (exit 2); durations and label selectors."""

from __future__ import annotations

import pytest

from kubectl_notify.cli import (
    CanI,
    Completion,
    Globals,
    ListNotifiers,
    NotifyPod,
    NotifySelector,
    Release,
    parse,
)
from kubectl_notify.durations import format_duration, parse_duration
from kubectl_notify.errors import USAGE, UsageError
from kubectl_notify.selectors import label_selector


def test_pod_and_notifier_with_every_flag_anywhere() -> None:
    invocation = parse(["-n", "prod", "db-0", "--context", "staging", "-c", "db", "quiesce",
                        "-c", "sidecar", "--timeout", "1m30s", "--wait=2m", "--dry-run=server",
                        "-o", "wide", "--kubeconfig", "/k"])
    assert invocation.globals == Globals(kubeconfig="/k", context="staging", namespace="prod")
    assert invocation.command == NotifyPod(
        pod="db-0", notifier="quiesce", containers=("db", "sidecar"), timeout_seconds=90,
        wait=120.0, dry_run=True, output="wide")


def test_impersonation_flags() -> None:
    flags = parse(["can-i", "db-0", "--as", "bot", "--as-group", "a", "--as-group", "b"]).globals
    assert (flags.impersonate, flags.impersonate_groups) == ("bot", ("a", "b"))
    with pytest.raises(UsageError, match="--as-group requires --as"):
        parse(["db-0", "quiesce", "--as-group", "a"])


def test_defaults_wait_until_finished() -> None:
    command = parse(["db-0", "quiesce"]).command
    assert command == NotifyPod(pod="db-0", notifier="quiesce")
    assert isinstance(command, NotifyPod) and command.wait is None and not command.dry_run


@pytest.mark.parametrize(("args", "wait"), [
    (["--wait"], 30.0), (["--wait=0"], 0.0), (["--wait=false"], 0.0), (["--wait=500ms"], 0.5),
    (["--wait=true"], 30.0)])
def test_wait_forms(args: list[str], wait: float) -> None:
    command = parse(["db-0", "quiesce", *args]).command
    assert isinstance(command, NotifyPod) and command.wait == wait


def test_bare_optional_flags_never_take_the_next_word() -> None:
    command = parse(["--wait", "db-0", "--dry-run", "quiesce"]).command
    assert command == NotifyPod(pod="db-0", notifier="quiesce", wait=30.0, dry_run=True)


def test_pod_slash_name_names_a_pod_called_like_a_command() -> None:
    assert parse(["pod/list", "quiesce"]).command == NotifyPod(pod="list", notifier="quiesce")
    assert parse(["list", "pods/db-0"]).command == ListNotifiers(pod="db-0")


def test_selector_fan_out() -> None:
    command = parse(["-l", "app=db", "quiesce", "--parallelism", "5", "--rollback",
                     "unquiesce", "--continue-on-failure", "--wait=10m"]).command
    assert command == NotifySelector(selector="app=db", notifier="quiesce", parallelism=5,
                                     rollback="unquiesce", continue_on_failure=True, wait=600.0)


def test_quiesce_window_flags() -> None:
    command = parse(["-l", "app=db", "quiesce", "--release", "unquiesce", "--release-after",
                     "30s", "--max-hold", "10m", "--concurrency-policy", "Wait"]).command
    assert command == NotifySelector(selector="app=db", notifier="quiesce", release="unquiesce",
                                     release_after_seconds=30, max_hold_seconds=600,
                                     concurrency_policy="Wait")
    assert parse(["-l", "app=db", "lock", "--max-hold", "1.5s"]).command == NotifySelector(
        selector="app=db", notifier="lock", max_hold_seconds=2)


def test_subcommands() -> None:
    assert parse(["list", "-l", "app=db", "-o", "json"]).command == ListNotifiers(
        selector="app=db", output="json")
    invocation = parse(["can-i", "-n", "demo", "db-0", "quiesce"])
    assert invocation.command == CanI(pod="db-0", notifier="quiesce")
    assert invocation.globals.namespace == "demo"
    assert parse(["can-i", "db-0"]).command == CanI(pod="db-0")
    assert parse(["completion", "zsh"]).command == Completion(shell="zsh")
    assert parse(["release", "podnotifier/db-0-lock-x"]).command == Release(
        resource="podnotifiers", name="db-0-lock-x")
    assert parse(["release", "notification/snap", "--wait=0", "-o", "name"]).command == Release(
        resource="notifications", name="snap", wait=0.0, output="name")
    assert parse(["__complete", "db-0", ""]).command == Completion(words=("db-0", ""))


@pytest.mark.parametrize(("args", "message"), [
    ([], "give a POD and a NOTIFIER"),
    (["db-0"], "got 1 argument: db-0"),
    (["db-0", "a", "b"], "got 3 arguments"),
    (["-l", "app=db", "db-0", "quiesce"], "with -l SELECTOR give exactly one argument"),
    (["-l", " ", "quiesce"], "non-empty label selector"),
    (["db-0", "quiesce", "--parallelism", "2"], "--parallelism applies to -l SELECTOR only"),
    (["-l", "a=b", "q", "--parallelism", "0"], "--parallelism must be at least 1"),
    (["db-0", "quiesce", "--timeout", "soon"], "--timeout: invalid duration 'soon'"),
    (["db-0", "quiesce", "--timeout", "0s"], "--timeout must be at least 1s"),
    (["db-0", "quiesce", "--dry-run=client"], "only --dry-run=server"),
    (["db-0", "quiesce", "-o", "table"], "allowed formats are: wide,yaml,json,name"),
    (["db-0", "quiesce", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["deployment/db", "quiesce"], "'deployment/db' is not a pod"),
    (["list"], "list needs a POD or -l SELECTOR"),
    (["list", "db-0", "-l", "app=db"], "list needs a POD or -l SELECTOR"),
    (["list", "db-0", "-o", "name"], "allowed formats are: wide,yaml,json"),
    (["completion", "fish"], "invalid choice: 'fish'"),
    (["release", "pod/db-0"], "give podnotifier/NAME or notification/NAME"),
    (["release", "snap"], "give podnotifier/NAME or notification/NAME"),
    (["db-0", "quiesce", "--release", "unquiesce"], "--release applies to -l SELECTOR only"),
    (["-l", "a=b", "q", "--rollback", "u", "--release", "u"], "--rollback and --release are "
     "exclusive"),
    (["-l", "a=b", "q", "--max-hold", "0s"], "--max-hold must be at least 1s"),
    (["-l", "a=b", "q", "--concurrency-policy", "Allow"], "invalid choice: 'Allow'"),
])
def test_usage_errors_are_worded_like_kubectl(args: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse(args)
    text = str(raised.value)
    assert text.startswith("error: ")
    assert message in text
    assert "See 'kubectl notify" in text and "--help' for usage." in text
    assert raised.value.exit_code == USAGE


def test_subcommand_errors_point_at_the_subcommand_help() -> None:
    with pytest.raises(UsageError, match=r"See 'kubectl notify list --help'"):
        parse(["list"])


@pytest.mark.parametrize("args", [["--help"], ["list", "--help"], ["can-i", "-h"],
                                  ["completion", "--help"], ["release", "--help"]])
def test_help_for_each_command(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(args)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl notify")
    assert "--namespace" in out or args[0] == "completion"


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("30s", 30), ("1m30s", 90), ("2h", 7200), ("45", 45), ("1.5s", 1.5),
    ("1h2m3s", 3723)])
def test_durations_as_kubectl_spells_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "1m 30s", "-5s", "30s1"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0.027, "27ms"), (0.0004, "0ms"), (1.44, "1.4s"), (12.4, "12s"), (123, "2m3s"),
    (120, "2m"), (3720, "62m"), (-1, "0ms")])
def test_durations_printed_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_label_selectors_become_label_selector_objects() -> None:
    assert label_selector("app=db, tier==backend") == {
        "matchLabels": {"app": "db", "tier": "backend"}}
    assert label_selector("env in (prod, staging),team notin (x),version!=1,canary,!legacy") == {
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "staging"]},
            {"key": "team", "operator": "NotIn", "values": ["x"]},
            {"key": "version", "operator": "NotIn", "values": ["1"]},
            {"key": "canary", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"}]}
    assert label_selector("example.com/app=db") == {"matchLabels": {"example.com/app": "db"}}


@pytest.mark.parametrize(("text", "message"), [
    ("app=db,", "empty requirement"), ("env in (a", "unbalanced"), ("a=b=c", "cannot parse"),
    ("app=db,app=web", "two different values")])
def test_bad_label_selectors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        label_selector(text)
