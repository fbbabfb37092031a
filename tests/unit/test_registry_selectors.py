"""Label and field selector parsing and matching."""

from __future__ import annotations

import pytest

from apiserver.api.validation import label_value_errors
from apiserver.registry.errors import InvalidSelector
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.selectors import (
    LabelSelector,
    Requirement,
    field_value,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "db", "tier": "backend", "example.com/team": "a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("   ", True),
        ("app=db", True),
        ("app==db", True),
        ("app = db", True),
        ("app=web", False),
        ("app!=web", True),
        ("app!=db", False),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app in (web)", False),
        ("app notin (web,cache)", True),
        ("app notin (db)", False),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("example.com/team=a", True),
        ("app=db,tier=backend", True),
        ("app=db, tier=frontend", False),
        ("app in (db),!missing,tier", True),
        ("missing=", False),
    ],
)
def test_label_selector_matches(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


def test_empty_value_matches_empty_label() -> None:
    assert parse_label_selector("flag=").matches({"flag": ""})
    assert parse_label_selector("flag=").requirements == (
        Requirement("flag", "=", frozenset({""})),
    )


def test_no_labels_at_all() -> None:
    assert parse_label_selector("!app").matches(None)
    assert not parse_label_selector("app").matches(None)


def test_set_requirement_parses_values() -> None:
    selector = parse_label_selector("app in (a, b,c)")

    assert selector.requirements == (Requirement("app", "in", frozenset({"a", "b", "c"})),)


@pytest.mark.parametrize("text", [
    "app=db", "app!=db", "app in (db,web)", "app notin (web)", "tier", "!tier",
    "example.com/team=a,app in (db),!missing", "flag=", "",
])
def test_the_string_form_parses_back(text: str) -> None:
    selector = parse_label_selector(text)
    assert str(selector) == text
    assert parse_label_selector(str(selector)) == selector


@pytest.mark.parametrize(("selector", "text", "matches"), [
    ({}, "", True),
    ({"matchLabels": {}, "matchExpressions": []}, "", True),
    ({"matchLabels": {"tier": "backend", "app": "db"}}, "app=db,tier=backend", True),
    ({"matchLabels": {"app": "web"}}, "app=web", False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]},
     "app in (db,web)", True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
     "app notin (db)", False),
    ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["db"]}]},
     "missing notin (db)", True),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, "tier", True),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist", "values": []}]},
     "!tier", False),
    ({"matchLabels": {"app": "db"},
      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend"]}]},
     "app=db,tier in (frontend)", False),
])
def test_a_label_selector_object_is_read_as_kubernetes_reads_it(
        selector: dict, text: str, matches: bool) -> None:
    """matchLabels and matchExpressions (a workload's spec.selector) all hold; the string form
    is the one a ?labelSelector= takes, and parses to the same requirements."""
    read = LabelSelector.from_object(selector)
    assert read.matches(LABELS) is matches
    assert str(read) == text
    assert parse_label_selector(text) == read


def test_a_label_selector_object_with_an_unknown_operator_is_refused() -> None:
    with pytest.raises(InvalidSelector, match="unknown operator 'Gt' for key 'app': use In, "
                       "NotIn, Exists, DoesNotExist"):
        LabelSelector.from_object({"matchExpressions": [{"key": "app", "operator": "Gt"}]})


@pytest.mark.parametrize(
    "selector",
    [
        "app=db,",
        ",app",
        "app in db",
        "app in (db",
        "app in ()",
        "app in (a,)",
        "app in (a b)",
        "app > 3",
        "app=db tier=x",
        "!",
        "!app=db",
        "-bad=x",
        "app=-bad",
        f"app={'x' * 64}",
        "a/b/c=x",
        "app=(x)",
    ],
)
def test_bad_label_selectors(selector: str) -> None:
    with pytest.raises(InvalidSelector) as raised:
        parse_label_selector(selector)

    assert raised.value.code == 400
    assert raised.value.causes[0].field == "labelSelector"
    assert raised.value.message.startswith("unable to parse requirement")


OBJECT = {
    "metadata": {"name": "n1", "namespace": "ns"},
    "spec": {"podName": "web-0", "notifier": "quiesce"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("spec.podName=web-0", True),
        ("spec.podName==web-0", True),
        ("spec.podName!=web-0", False),
        ("status.phase=Running,spec.notifier=quiesce", True),
        ("status.phase=Running,spec.notifier!=quiesce", False),
        ("metadata.name=n1", True),
        ("metadata.namespace=other", False),
        (" status.phase = Running ", True),
        ("status.phase=", False),
    ],
)
def test_field_selector_matches(selector: str, matches: bool) -> None:
    parsed = parse_field_selector(selector, PODNOTIFIERS.selectable_fields)

    assert parsed.matches(OBJECT) is matches


def test_absent_field_is_empty() -> None:
    selector = parse_field_selector("status.phase=", PODNOTIFIERS.selectable_fields)

    assert selector.matches({"metadata": {}})
    assert field_value({"spec": "scalar"}, "spec.podName") == ""


def test_unsupported_field_names_the_supported_ones() -> None:
    with pytest.raises(InvalidSelector) as raised:
        parse_field_selector("spec.containers=db", PODNOTIFIERS.selectable_fields)

    assert raised.value.causes[0].field == "fieldSelector"
    assert '"spec.containers" is not a known field selector' in raised.value.message
    assert '"spec.podName"' in raised.value.message


@pytest.mark.parametrize("selector", ["status.phase", "status.phase=Running,", "=x", "a b=c"])
def test_malformed_field_selectors(selector: str) -> None:
    with pytest.raises(InvalidSelector):
        parse_field_selector(selector, PODNOTIFIERS.selectable_fields)


def test_bad_label_values_are_worded_by_the_validation_module() -> None:
    with pytest.raises(InvalidSelector) as raised:
        parse_label_selector(f"app={'x' * 64}")

    assert raised.value.message == (
        f"unable to parse requirement: invalid label value {'x' * 64!r}: "
        f"{'; '.join(label_value_errors('x' * 64))}")
    assert "must be no more than 63 characters" in raised.value.message
