"""Validation of a Notification create request, and its selector as a label selector string."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.api.decoding import Body
from apiserver.api.status import status_body
from apiserver.api.types import MAX_DEADLINE_SECONDS
from apiserver.errors import APIError
from apiserver.fanout.spec import NotificationRequest, selector_string, validate

MAX_PARALLELISM = 100
MAX_TIMEOUT = 600
MAX_HOLD = 3600


def body(name: str = "pre-snapshot", **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
        "metadata": {"name": name} if name else {},
        "spec": {"selector": {"matchLabels": {"app": "postgres"}}, "notifier": "quiesce"},
    }
    obj["spec"].update(spec)
    return obj


def check(obj: dict[str, Any], namespace: str = "prod") -> NotificationRequest:
    return validate(Body(obj), namespace, max_parallelism=MAX_PARALLELISM,
                    max_timeout_seconds=MAX_TIMEOUT, max_hold_seconds=MAX_HOLD)


def rejected(obj: dict[str, Any], code: int = 422) -> dict[str, Any]:
    with pytest.raises(APIError) as caught:
        check(obj)
    assert caught.value.code == code, status_body(caught.value)
    return status_body(caught.value)


def invalid_fields(obj: dict[str, Any]) -> list[str]:
    answer = rejected(obj)
    assert answer["reason"] == "Invalid"
    assert answer["details"]["kind"] == "Notification"
    return [cause["field"] for cause in answer["details"]["causes"]]


# valid requests and defaults


def test_defaults() -> None:
    ask = check(body())
    assert ask.metadata == {"namespace": "prod", "labels": {}, "name": "pre-snapshot"}
    assert ask.spec == {
        "selector": {"matchLabels": {"app": "postgres"}, "matchExpressions": []},
        "notifier": "quiesce", "policy": "PreExistingPods", "failurePolicy": "Abort",
        "parallelism": 1,
    }
    assert selector_string(ask.spec["selector"]) == "app=postgres"


def test_everything_set() -> None:
    obj = body(
        selector={"matchLabels": {"app": "postgres", "tier": "db"}, "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "staging"]}]},
        notifier="example.com/quiesce", containers=["db", "db", "wal"], policy="AllPods",
        parallelism=MAX_PARALLELISM, failurePolicy="Continue",
        rollback={"notifier": "unquiesce"}, timeoutSeconds=MAX_TIMEOUT,
        activeDeadlineSeconds=MAX_DEADLINE_SECONDS,
        requestedBy={"username": "ignored"})
    obj["metadata"]["labels"] = {"team": "db"}
    obj["metadata"]["namespace"] = "prod"

    ask = check(obj)

    assert ask.spec == {
        "selector": obj["spec"]["selector"], "notifier": "example.com/quiesce",
        "policy": "AllPods", "failurePolicy": "Continue", "parallelism": MAX_PARALLELISM,
        "containers": ["db", "wal"], "rollback": {"notifier": "unquiesce"},
        "timeoutSeconds": MAX_TIMEOUT,
        "activeDeadlineSeconds": MAX_DEADLINE_SECONDS,
    }
    assert "requestedBy" not in ask.spec
    assert ask.metadata["labels"] == {"team": "db"}
    assert selector_string(ask.spec["selector"]) == "app=postgres,tier=db,env in (prod,staging)"


def test_generate_name_instead_of_name() -> None:
    obj = body(name="")
    obj["metadata"]["generateName"] = "pre-snapshot-"
    ask = check(obj)
    assert ask.metadata == {"namespace": "prod", "labels": {}, "generateName": "pre-snapshot-"}


def test_empty_selector_selects_every_pod() -> None:
    assert selector_string(check(body(selector={})).spec["selector"]) == ""


# 400: the envelope


def test_wrong_kind() -> None:
    obj = body()
    obj["kind"] = "PodNotifier"
    answer = rejected(obj, 400)
    assert 'the body must be a Notification with apiVersion' in answer["message"]


def test_unknown_nested_field() -> None:
    answer = rejected(body(selector={"matchLabels": {}, "matchFields": []},
                           rollback={"notifier": "u", "timeout": 1}), 400)
    assert answer["message"] == (
        'strict decoding error: unknown field "spec.selector.matchFields", '
        'unknown field "spec.rollback.timeout"')


def test_namespace_mismatch() -> None:
    obj = body()
    obj["metadata"]["namespace"] = "other"
    assert "does not match the namespace" in rejected(obj, 400)["message"]


# 422: names, choices, bounds


def test_name_or_generate_name_required() -> None:
    answer = rejected(body(name=""))
    assert answer["details"]["causes"] == [{
        "reason": "FieldValueRequired", "field": "metadata.name",
        "message": "Required value: name or generateName is required"}]


@pytest.mark.parametrize(("key", "value"), [
    ("name", "Pre-Snapshot"), ("name", "a" * 254), ("generateName", "Pre-"),
    ("generateName", "a" * 249 + "-"), ("name", 5),
])
def test_bad_names(key: str, value: Any) -> None:
    obj = body(name="")
    obj["metadata"][key] = value
    assert invalid_fields(obj) == [f"metadata.{key}"]


def test_reserved_label() -> None:
    obj = body()
    obj["metadata"]["labels"] = {"notifier.x-k8s.io/notification": "x"}
    assert invalid_fields(obj) == ["metadata.labels[notifier.x-k8s.io/notification]"]


@pytest.mark.parametrize("key", ["policy", "failurePolicy"])
def test_unsupported_choices(key: str) -> None:
    answer = rejected(body(**{key: "Sometimes"}))
    cause = answer["details"]["causes"][0]
    assert cause["reason"] == "FieldValueNotSupported"
    assert cause["field"] == f"spec.{key}"
    assert cause["message"].startswith('Unsupported value: "Sometimes": supported '
                                       "values: ")


@pytest.mark.parametrize("value", [0, -1, MAX_PARALLELISM + 1, True, 2.0, "5"])
def test_bad_parallelism(value: Any) -> None:
    assert invalid_fields(body(parallelism=value)) == ["spec.parallelism"]


@pytest.mark.parametrize(("key", "value"), [
    ("timeoutSeconds", 0), ("timeoutSeconds", MAX_TIMEOUT + 1), ("timeoutSeconds", False),
    ("activeDeadlineSeconds", 0),
    ("activeDeadlineSeconds", MAX_DEADLINE_SECONDS + 1),
])
def test_bad_durations(key: str, value: Any) -> None:
    assert invalid_fields(body(**{key: value})) == [f"spec.{key}"]


def test_bounds_are_inclusive() -> None:
    ask = check(body(parallelism=1, timeoutSeconds=1, activeDeadlineSeconds=1))
    assert (ask.spec["parallelism"], ask.spec["timeoutSeconds"],
            ask.spec["activeDeadlineSeconds"]) == (1, 1, 1)


@pytest.mark.parametrize("notifier", [None, "", 7, "a/b/c", "bad name"])
def test_bad_notifier(notifier: Any) -> None:
    obj = body()
    if notifier is None:
        del obj["spec"]["notifier"]
    else:
        obj["spec"]["notifier"] = notifier
    fields = invalid_fields(obj)
    assert fields and set(fields) == {"spec.notifier"}


def test_missing_notifier_is_required() -> None:
    obj = body()
    del obj["spec"]["notifier"]
    assert rejected(obj)["details"]["causes"][0]["reason"] == "FieldValueRequired"


@pytest.mark.parametrize(("rollback", "field"), [
    ({}, "spec.rollback.notifier"),
    ({"notifier": ""}, "spec.rollback.notifier"),
    ({"notifier": "bad name"}, "spec.rollback.notifier"),
    ("unquiesce", "spec.rollback"),
])
def test_bad_rollback(rollback: Any, field: str) -> None:
    assert invalid_fields(body(rollback=rollback)) == [field]


@pytest.mark.parametrize("containers", ["db", [""], [1]])
def test_bad_containers(containers: Any) -> None:
    assert invalid_fields(body(containers=containers)) == ["spec.containers"]


# selectors


def test_missing_selector() -> None:
    obj = body()
    del obj["spec"]["selector"]
    answer = rejected(obj)
    assert answer["details"]["causes"][0]["reason"] == "FieldValueRequired"
    assert answer["details"]["causes"][0]["field"] == "spec.selector"


@pytest.mark.parametrize(("selector", "field"), [
    ("app=postgres", "spec.selector"),
    ({"matchLabels": ["app"]}, "spec.selector.matchLabels"),
    ({"matchLabels": {"app": 1}}, "spec.selector.matchLabels[app]"),
    ({"matchLabels": {"app": "x" * 64}}, "spec.selector.matchLabels[app]"),
    ({"matchLabels": {"app": "a,b"}}, "spec.selector.matchLabels[app]"),
    ({"matchLabels": {"app": "a b"}}, "spec.selector.matchLabels[app]"),
    ({"matchLabels": {"app": "-x"}}, "spec.selector.matchLabels[app]"),
    ({"matchLabels": {"a/b/c": "x"}}, "spec.selector.matchLabels[a/b/c]"),
    ({"matchLabels": {"bad key": "x"}}, "spec.selector.matchLabels[bad key]"),
    ({"matchExpressions": {"key": "app"}}, "spec.selector.matchExpressions"),
    ({"matchExpressions": ["app"]}, "spec.selector.matchExpressions[0]"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "spec.selector.matchExpressions[0]"),
    ({"matchExpressions": [{"key": "app=x", "operator": "Exists"}]},
     "spec.selector.matchExpressions[0].key"),
    ({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]},
     "spec.selector.matchExpressions[0].operator"),
    ({"matchExpressions": [{"key": "app", "operator": "In"}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": []}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", 1]}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": "abc"}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a,b"]}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a)"]}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
     "spec.selector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist", "values": ["x"]}]},
     "spec.selector.matchExpressions[0].values"),
])
def test_bad_selector(selector: Any, field: str) -> None:
    assert invalid_fields(body(selector=selector)) == [field]


def test_unsupported_operator_lists_the_supported_ones() -> None:
    answer = rejected(body(selector={"matchExpressions": [
        {"key": "app", "operator": "Gt", "values": ["1"]}]}))
    cause = answer["details"]["causes"][0]
    assert cause["reason"] == "FieldValueNotSupported"
    assert cause["message"] == ('Unsupported value: '
                                '"Gt": supported values: In, NotIn, Exists, DoesNotExist')


def test_valid_expressions_of_each_operator() -> None:
    selector = {"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod"]},
        {"key": "example.com/tier", "operator": "NotIn", "values": ["cache", "web"]},
        {"key": "backup", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist", "values": []},
    ]}
    assert selector_string(check(body(selector=selector)).spec["selector"]) == (
        "env in (prod),example.com/tier notin (cache,web),backup,!legacy")


# selector_string


def test_selector_string_match_labels_sorted() -> None:
    assert selector_string({"matchLabels": {"tier": "db", "app": "pg"}}) == "app=pg,tier=db"


@pytest.mark.parametrize(("expression", "expected"), [
    ({"key": "env", "operator": "In", "values": ["a", "b"]}, "env in (a,b)"),
    ({"key": "env", "operator": "NotIn", "values": ["a"]}, "env notin (a)"),
    ({"key": "env", "operator": "Exists"}, "env"),
    ({"key": "env", "operator": "DoesNotExist"}, "!env"),
])
def test_selector_string_operators(expression: dict[str, Any], expected: str) -> None:
    assert selector_string({"matchExpressions": [expression]}) == expected
    assert selector_string({"matchLabels": {"app": "pg"}, "matchExpressions": [expression]}) == (
        f"app=pg,{expected}")


def test_selector_string_empty() -> None:
    assert selector_string({}) == ""
    assert selector_string({"matchLabels": {}, "matchExpressions": []}) == ""
