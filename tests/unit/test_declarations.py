"""The notifiers annotation: parsing, validation, container selection, the trust rule."""

from __future__ import annotations

import json

import pytest

from apiserver.api.field_errors import CauseReason, FieldError
from apiserver.api.validation import qualified_name_errors
from apiserver.notifier.declarations import (
    ALLOWED_SIGNALS,
    ANNOTATION_PATH,
    DEFAULT_TIMEOUT_SECONDS,
    ExecAction,
    InvalidNotifiers,
    Notifier,
    SignalAction,
    annotation_matches_template,
    declared_names,
    held_names,
    parse_notifiers,
    select_containers,
)

QUIESCE = {"name": "quiesce", "timeoutSeconds": 60, "action": {"exec": {"command": ["sync"]}}}
RELOAD = {"name": "reload", "action": {"signal": "SIGHUP"}}


def annotation(value: object) -> str:
    return json.dumps(value)


def errors_of(value: str, **kwargs: object) -> list[FieldError]:
    """Every problem parse_notifiers reports in `value` (none if it parses)."""
    try:
        parse_notifiers(value, **kwargs)
    except InvalidNotifiers as invalid:
        return invalid.errors
    return []


def only_error(value: str, **kwargs: object):
    errors = errors_of(value, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


def test_parses_exec_and_signal_with_defaults() -> None:
    parsed = parse_notifiers(annotation({"db": [QUIESCE, RELOAD], "web": []}))

    assert parsed == {
        "db": (
            Notifier("quiesce", 60, ExecAction(("sync",))),
            Notifier("reload", DEFAULT_TIMEOUT_SECONDS, SignalAction("SIGHUP")),
        ),
        "web": (),
    }
    assert parsed["db"][1].argv == ("kill", "-s", "HUP", "1")
    assert parsed["db"][0].argv == ("sync",)


def test_missing_annotation_declares_nothing() -> None:
    assert parse_notifiers(None) == {}


def test_parse_raises_with_every_error() -> None:
    bad = annotation({"db": [{"name": "", "action": {}}]})

    with pytest.raises(InvalidNotifiers) as raised:
        parse_notifiers(bad)

    fields = [error.field for error in raised.value.errors]
    assert fields == [f"{ANNOTATION_PATH}.db[0].name", f"{ANNOTATION_PATH}.db[0].action"]


def test_empty_command_is_required_with_field_path() -> None:
    error = only_error(annotation({"db": [{"name": "q", "action": {"exec": {"command": []}}}]}))

    assert error.reason is CauseReason.REQUIRED
    assert (
        error.field == "metadata.annotations[notifier.x-k8s.io/notifiers].db[0].action.exec.command"
    )
    cause = error.as_cause()
    assert (cause.reason, cause.field) == ("FieldValueRequired", error.field)
    assert cause.message == error.message  # the field is apart, as in Go's StatusCause
    assert "argv" in error.message


@pytest.mark.parametrize(
    "command",
    [["ok", 3], "sh -c true", [""]],
)
def test_command_must_be_a_named_argv_of_strings(command: object) -> None:
    error = only_error(
        annotation({"db": [{"name": "q", "action": {"exec": {"command": command}}}]})
    )

    assert error.reason is CauseReason.INVALID
    assert error.field.startswith(f"{ANNOTATION_PATH}.db[0].action.exec.command")


def test_not_json() -> None:
    error = only_error("{db: []}")

    assert error.reason is CauseReason.INVALID
    assert error.field == ANNOTATION_PATH
    assert "must be JSON" in error.message


def test_deeply_nested_json_is_invalid_not_a_crash() -> None:
    error = only_error("[" * 100_000)

    assert error.field == ANNOTATION_PATH
    assert "nest" in error.message


def test_repeated_json_key_is_a_duplicate() -> None:
    error = only_error('{"db": [], "db": []}')

    assert error.reason is CauseReason.DUPLICATE
    assert error.value == "db"


@pytest.mark.parametrize("document", [[], "x", None, 3])
def test_top_level_must_be_an_object(document: object) -> None:
    assert only_error(annotation(document)).field == ANNOTATION_PATH


def test_container_value_must_be_a_list() -> None:
    error = only_error(annotation({"db": QUIESCE}))

    assert error.field == f"{ANNOTATION_PATH}.db"
    assert "list of notifiers" in error.message


def test_container_key_must_be_a_container_name() -> None:
    error = only_error(annotation({"Not A Name": []}))

    assert error.field == f'{ANNOTATION_PATH}["Not A Name"]'
    assert error.value == "Not A Name"


def test_container_must_exist_when_pod_containers_are_given() -> None:
    error = only_error(annotation({"db": [], "sidecar": []}), containers={"db": {}, "app": {}})

    assert error.reason is CauseReason.NOT_SUPPORTED
    assert error.field == f"{ANNOTATION_PATH}.sidecar"
    assert '"app", "db"' in error.message


def test_unknown_fields_are_errors_at_every_level() -> None:
    value = annotation(
        {
            "db": [
                {
                    "name": "q",
                    "extra": 1,
                    "action": {"exec": {"command": ["x"], "env": []}, "other": {}},
                }
            ]
        }
    )

    errors = errors_of(value)

    assert {(e.reason, e.field) for e in errors} == {
        (CauseReason.NOT_SUPPORTED, f"{ANNOTATION_PATH}.db[0].extra"),
        (CauseReason.NOT_SUPPORTED, f"{ANNOTATION_PATH}.db[0].action.other"),
        (CauseReason.NOT_SUPPORTED, f"{ANNOTATION_PATH}.db[0].action.exec.env"),
    }
    assert all("unknown field" in e.message for e in errors)


def test_action_needs_exactly_one_handler() -> None:
    both = {"exec": {"command": ["x"]}, "signal": "SIGHUP"}

    neither = only_error(annotation({"db": [{"name": "q", "action": {}}]}))
    two = only_error(annotation({"db": [{"name": "q", "action": both}]}))
    missing = only_error(annotation({"db": [{"name": "q"}]}))

    assert neither.reason is CauseReason.REQUIRED
    assert missing.reason is CauseReason.REQUIRED
    assert two.reason is CauseReason.INVALID
    assert two.field == neither.field == missing.field == f"{ANNOTATION_PATH}.db[0].action"


def test_notifier_names_unique_per_container_only() -> None:
    value = annotation({"db": [RELOAD, QUIESCE, RELOAD], "web": [RELOAD]})

    error = only_error(value)

    assert error.reason is CauseReason.DUPLICATE
    assert error.field == f"{ANNOTATION_PATH}.db[2].name"
    assert error.value == "reload"


@pytest.mark.parametrize(
    "name",
    ["quiesce", "Q", "a.b_c-d", "example.com/quiesce", "x" * 63, f"{'a' * 253}/x"],
)
def test_qualified_names_accepted(name: str) -> None:
    assert qualified_name_errors(name) == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "name part must be non-empty"),
        ("-q", "name part must consist"),
        ("q_", "name part must consist"),
        ("x" * 64, "no more than 63"),
        ("/q", "prefix part must be non-empty"),
        ("Example.com/q", "prefix part must be a lowercase DNS subdomain"),
        (f"{'a' * 254}/q", "no more than 253"),
        ("a/b/c", "optional DNS subdomain prefix"),
        ("example.com/", "name part must be non-empty"),
    ],
)
def test_qualified_names_rejected(name: str, problem: str) -> None:
    assert any(problem in message for message in qualified_name_errors(name))
    error = only_error(annotation({"db": [{**RELOAD, "name": name}]}))
    assert error.field == f"{ANNOTATION_PATH}.db[0].name"
    assert problem in error.message


def test_name_must_be_a_string() -> None:
    error = only_error(annotation({"db": [{**RELOAD, "name": 7}]}))

    assert error.reason is CauseReason.INVALID
    assert error.value == 7


@pytest.mark.parametrize("timeout", [0, -1, 601, 1.5, "30", True])
def test_timeout_out_of_range_or_not_whole(timeout: object) -> None:
    error = only_error(annotation({"db": [{**RELOAD, "timeoutSeconds": timeout}]}))

    assert error.field == f"{ANNOTATION_PATH}.db[0].timeoutSeconds"
    assert error.value == timeout


def test_timeout_bounds_follow_the_server_maximum() -> None:
    value = annotation({"db": [{**RELOAD, "timeoutSeconds": 900}]})

    assert errors_of(value, max_timeout_seconds=1000) == []
    error = only_error(value, max_timeout_seconds=120)
    assert "between 1 and 120" in error.message
    assert (
        parse_notifiers(annotation({"db": [{**RELOAD, "timeoutSeconds": 1}]}))["db"][
            0
        ].timeout_seconds
        == 1
    )


@pytest.mark.parametrize("signal", ALLOWED_SIGNALS)
def test_allowed_signals(signal: str) -> None:
    parsed = parse_notifiers(annotation({"db": [{"name": "s", "action": {"signal": signal}}]}))

    assert parsed["db"][0].argv == ("kill", "-s", signal[3:], "1")


@pytest.mark.parametrize(
    ("signal", "hint"),
    [("HUP", "write it as SIGHUP"), ("sigterm", "write it as SIGTERM"), ("SIGKILL", "not an")],
)
def test_other_signal_spellings_refused_with_hint(signal: str, hint: str) -> None:
    error = only_error(annotation({"db": [{"name": "s", "action": {"signal": signal}}]}))

    assert error.reason is CauseReason.NOT_SUPPORTED
    assert error.field == f"{ANNOTATION_PATH}.db[0].action.signal"
    assert hint in error.message
    assert '"SIGHUP"' in error.message


@pytest.mark.parametrize("signal", ["SIGSTOP", "SIGCONT", "SIGSEGV", 15, None])
def test_signals_outside_the_list(signal: object) -> None:
    error = only_error(annotation({"db": [{"name": "s", "action": {"signal": signal}}]}))

    assert error.value == signal


def test_long_values_are_shortened_in_messages() -> None:
    error = only_error(annotation({"db": [{**RELOAD, "name": "x" * 500}]}))

    assert error.value == "x" * 500
    assert len(error.message) < 400


DECLARED = parse_notifiers(
    annotation({"db": [QUIESCE, RELOAD], "cache": [RELOAD], "web": [QUIESCE]})
)


def test_select_all_declaring_containers_in_order() -> None:
    selection = select_containers(DECLARED, "reload")

    assert list(selection.selected) == ["db", "cache"]
    assert selection.selected["cache"].action == SignalAction("SIGHUP")
    assert selection.undeclared == ()


@pytest.mark.parametrize("subset", [None, []])
def test_no_subset_means_all(subset: list[str] | None) -> None:
    assert list(select_containers(DECLARED, "quiesce", subset).selected) == ["db", "web"]


def test_select_subset_reports_undeclared() -> None:
    selection = select_containers(DECLARED, "reload", ["web", "cache", "nope", "web"])

    assert list(selection.selected) == ["cache"]
    assert selection.undeclared == ("web", "nope")


def test_select_unknown_notifier() -> None:
    selection = select_containers(DECLARED, "missing")

    assert selection.selected == {}
    assert selection.undeclared == ()


def test_trust_compares_raw_strings() -> None:
    raw = annotation({"db": [RELOAD]})
    respaced = json.dumps({"db": [RELOAD]}, indent=1)

    assert annotation_matches_template(raw, raw)
    assert not annotation_matches_template(raw, respaced)
    assert not annotation_matches_template(raw, None)
    assert not annotation_matches_template(None, None)


@pytest.mark.parametrize(("annotation", "names"), [
    (None, set()),
    ('{"db": [{"name": "quiesce", "action": {"signal": "SIGHUP"}}], '
     '"side": [{"name": "flush"}, {"name": "quiesce"}]}', {"quiesce", "flush"}),
    ('{"db": [{"name": "quiesce", "timeoutSeconds": "soon"}]}', {"quiesce"}),  # invalid, named
    ('{"db": {"name": "quiesce"}}', set()),
    ('{"db": [{"name": 7}, "quiesce"]}', set()),
    ('{"db": [{"name": "bad\\nname"}, {"name": "a/b/c"}, {"name": "ok"}]}', {"ok"}),
    ("[1, 2]", set()),
    ("{not json", set()),
    ("[" * 100000, set()),
])
def test_declared_names_reads_names_leniently(annotation: str | None, names: set[str]) -> None:
    assert declared_names(annotation) == names


@pytest.mark.parametrize(("annotation", "names"), [
    (None, set()),
    ('{"db": [{"name": "lock", "hold": {"maxHoldSeconds": 60}}, {"name": "quiesce"}], '
     '"side": [{"name": "flush", "hold": {}}]}', {"lock", "flush"}),
    ('{"db": [{"name": "lock", "hold": true}]}', set()),  # not a hold object
    ('{"db": [{"name": "bad\\nname", "hold": {}}]}', set()),
    ("{not json", set()),
])
def test_held_names_are_the_declared_names_with_a_hold(annotation: str | None,
                                                       names: set[str]) -> None:
    assert held_names(annotation) == names
