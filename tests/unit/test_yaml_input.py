"""YAML bodies become JSON text for the guarded JSON reader: no recursion, no aliases,
duplicates kept for fieldValidation, YAML 1.1 scalars, one document."""

from __future__ import annotations

import json

import pytest

from apiserver import errors
from apiserver.api import json_input
from apiserver.api.json_input import MAX_DEPTH
from apiserver.api.yaml_input import to_json


def read(raw: bytes) -> json_input.Document:
    return json_input.read(to_json(raw, what="the body"), what="the body")


def test_a_manifest_reads_as_its_json() -> None:
    raw = (b"apiVersion: notifier.x-k8s.io/v1alpha1\nkind: Notification\n"
           b"metadata: {name: snap, labels: {tier: db}}\n"
           b"spec:\n  selector:\n    matchLabels: {app: db}\n  notifier: quiesce\n"
           b"  parallelism: 2\n  containers: [db, sidecar]\n  rollback: ~\n")
    assert read(raw).value == {
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
        "metadata": {"name": "snap", "labels": {"tier": "db"}},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "quiesce",
                 "parallelism": 2, "containers": ["db", "sidecar"], "rollback": None}}


@pytest.mark.parametrize(("text", "value"), [
    (b"a: 1", 1), (b"a: 0x10", 16), (b"a: 1.5", 1.5), (b"a: true", True), (b"a: yes", True),
    (b"a: ~", None), (b"a: '1'", "1"), (b"a: 2026-01-01", "2026-01-01"),
    (b"a: !!binary aGk=", "aGk="), (b'a: "x\\ty"', "x\ty"),
])
def test_scalars_resolve_as_yaml_does_when_json_has_the_type(text: bytes, value: object) -> None:
    assert read(text).value == {"a": value}


def test_numeric_keys_are_strings_as_in_json() -> None:
    assert read(b"1: a\ntrue: b\n").value == {"1": "a", "true": "b"}


def test_duplicate_keys_reach_the_json_reader() -> None:
    document = read(b"spec:\n  notifier: BAD NAME\n  notifier: ok\n")
    assert document.value == {"spec": {"notifier": "ok"}}
    assert document.duplicates == ("spec.notifier",)


def test_aliases_are_refused() -> None:
    bomb = b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(errors.BadRequest, match="aliases are not accepted"):
        to_json(bomb, what="the body")


@pytest.mark.parametrize("raw", [b"[" * 100_000, b"a:\n" + b"".join(
    b"  " * i + b"b:\n" for i in range(1, 200))])
def test_deep_nesting_is_refused_without_recursion(raw: bytes) -> None:
    with pytest.raises(errors.BadRequest) as raised:
        read(raw)
    assert f"more than {MAX_DEPTH} levels" in raised.value.message or (
        "not valid YAML" in raised.value.message)


@pytest.mark.parametrize(("raw", "wording"), [
    (b"a: 1\n---\nb: 2\n", "one YAML document"),
    (b"", "is empty"),
    (b"a: [", "not valid YAML"),
    (b"? [a, b]\n: c\n", "mapping key must be a string"),
    ("a: b".encode("utf-16"), "not UTF-8"),
])
def test_what_is_not_one_document_is_400(raw: bytes, wording: str) -> None:
    with pytest.raises(errors.BadRequest, match=wording):
        to_json(raw, what="the body")


@pytest.mark.parametrize("raw", [b"a: .nan", b"a: .inf", b'a: "\\ud800"'])
def test_what_json_refuses_yaml_cannot_smuggle(raw: bytes) -> None:
    with pytest.raises(errors.BadRequest):
        read(raw)


def test_the_json_text_is_valid_json() -> None:
    assert json.loads(to_json(b"a: [1, {b: c}, []]\nd: {}\n", what="x")) == {
        "a": [1, {"b": "c"}, []], "d": {}}


HUGE_DECIMAL = "9" * 5000


@pytest.mark.parametrize(("text", "value"), [
    ("0x1f", 31), ("-0x1f", -31), ("0b101", 5), ("017", 15), ("1:30", 90), ("-1:30:00", -5400),
    ("1_000", 1000), ("+5", 5), ("0x7fffffffffffffff", 2**63 - 1),
    ("-0x8000000000000000", -(2**63)), ("190:20:30.15", 685230.15), ("1.", 1.0),
    ("0x_", "0x_"),
])
def test_integers_in_every_yaml_form_read_as_their_values(text: str, value: object) -> None:
    assert read(f"a: {text}".encode()).value == {"a": value}


@pytest.mark.parametrize(("text", "value"), [
    (HUGE_DECIMAL, float("inf")), ("-" + HUGE_DECIMAL, float("-inf")),
    ("0x" + "f" * 5000, float("inf")), ("-0b" + "1" * 5000, float("-inf")),
    ("0" + "7" * 5000, float("inf")), ("1" + ":59" * 5000, float("inf")),
    ("1" + ":59" * 5000 + ".5", float("inf")), ("1.5e+400", float("inf")),
    ("9223372036854775808", 9223372036854775808.0), ("0x8000000000000000", 2.0**63),
    ("0x" + "f" * 40, float(16**40 - 1)),
])
def test_integers_past_64_bits_read_as_the_json_reader_reads_them(text: str, value: object
                                                                   ) -> None:
    """Past int64 the nearest float, past the float range infinity: what the JSON reader makes
    of the same number, which every integer field refuses (422); never a ValueError of Python's
    integer-string conversion limit (issue 20)."""
    assert read(f"a: {text}".encode()).value == {"a": value}
    assert read(f"[{text}]".encode()).value == [value]


@pytest.mark.parametrize(("text", "name"), [
    ("!!int abc", "int"), ("!!int 1.5", "int"), ("!!float abc", "float"),
    ("!!bool maybe", "bool"), ("!!null x", "null"),
])
def test_an_explicit_tag_on_a_value_it_does_not_fit_is_400_naming_where(text: str, name: str
                                                                       ) -> None:
    with pytest.raises(errors.BadRequest) as raised:
        to_json(f"a: 1\nb: {text}\n".encode(), what="the body")
    assert f"(line 2, column 4) is not a valid {name}" in raised.value.message
    assert f"leave out the !!{name} tag" in raised.value.message


@pytest.mark.parametrize(("text", "value"), [
    ("!!int '0x10'", 16), ("!!float 1", 1), ("!!float 1.5", 1.5), ("!!bool yes", True),
    ("!!null ~", None), ("!!str 1", "1"), ("!!timestamp 2026-01-01", "2026-01-01"),
])
def test_an_explicit_tag_on_a_value_it_fits_reads_as_that_value(text: str, value: object
                                                                ) -> None:
    assert read(f"a: {text}".encode()).value == {"a": value}
