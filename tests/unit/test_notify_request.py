"""Validation of the pods/notify body: 400 for envelope problems, 422 for field values."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from apiserver.api.decoding import Body
from apiserver.api.status import status_body
from apiserver.api.types import MAX_TTL_SECONDS
from apiserver.errors import APIError
from apiserver.notifier.request import NotifyRequest, parse_body, validate

MAX_TIMEOUT = 600


def body(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "spec": {"notifier": "quiesce", **spec}}


def check(obj: dict[str, Any], namespace: str = "prod", pod: str = "db-0") -> NotifyRequest:
    return validate(Body(obj), namespace, pod, MAX_TIMEOUT)


def rejected(obj: dict[str, Any], code: int) -> dict[str, Any]:
    with pytest.raises(APIError) as caught:
        check(obj)
    assert caught.value.code == code, status_body(caught.value)
    assert status_body(caught.value)["code"] == code
    return status_body(caught.value)


def invalid_fields(obj: dict[str, Any]) -> list[str]:
    """The fields of the 422's causes."""
    answer = rejected(obj, 422)
    assert answer["reason"] == "Invalid"
    assert answer["details"]["kind"] == "PodNotifier"
    assert answer["details"]["group"] == "notifier.x-k8s.io"
    return [cause["field"] for cause in answer["details"]["causes"]]


# parse_body


def test_parse_body_object() -> None:
    assert parse_body(b'{"kind": "PodNotifier"}') == Body({"kind": "PodNotifier"})


@pytest.mark.parametrize("raw", [b"", b"{", b"kind: PodNotifier"])
def test_parse_body_not_json(raw: bytes) -> None:
    with pytest.raises(APIError) as caught:
        parse_body(raw)
    assert caught.value.code == 400
    assert status_body(caught.value)["reason"] == "BadRequest"
    assert "not valid JSON" in status_body(caught.value)["message"]


@pytest.mark.parametrize("raw", [b"[]", b'"PodNotifier"', b"42", b"null"])
def test_parse_body_not_an_object(raw: bytes) -> None:
    with pytest.raises(APIError) as caught:
        parse_body(raw)
    assert caught.value.code == 400
    assert "must be a JSON object" in status_body(caught.value)["message"]


# a valid request


def test_minimal_request() -> None:
    assert check(body()) == NotifyRequest(
        name="", generate_name="", labels={}, notifier="quiesce", containers=None,
        timeout_seconds=None, ttl_seconds_after_finished=None)


def test_full_request() -> None:
    obj = body(podName="db-0", containers=["db", "sidecar", "db"], timeoutSeconds=60,
               ttlSecondsAfterFinished=0, podUID="ignored", requestedBy={"username": "x"})
    obj["metadata"] = {"name": "db-0.quiesce", "namespace": "prod",
                       "labels": {"team": "db", "example.com/run": "nightly_1"},
                       "annotations": {"a": "b"}}
    obj["status"] = {"phase": "Succeeded"}
    original = copy.deepcopy(obj)

    ask = check(obj)

    assert ask == NotifyRequest(
        name="db-0.quiesce", generate_name="",
        labels={"team": "db", "example.com/run": "nightly_1"}, notifier="quiesce",
        containers=["db", "sidecar"], timeout_seconds=60, ttl_seconds_after_finished=0)
    assert obj == original


def test_generate_name_and_prefixed_notifier() -> None:
    obj = body(notifier="example.com/flush", timeoutSeconds=MAX_TIMEOUT)
    obj["metadata"] = {"generateName": "nightly-", "namespace": ""}
    ask = check(obj)
    assert ask.generate_name == "nightly-"
    assert ask.notifier == "example.com/flush"
    assert ask.timeout_seconds == MAX_TIMEOUT


def test_bounds_inclusive() -> None:
    ask = check(body(timeoutSeconds=1, ttlSecondsAfterFinished=MAX_TTL_SECONDS))
    assert ask.timeout_seconds == 1
    assert ask.ttl_seconds_after_finished == MAX_TTL_SECONDS


# 400: the envelope


@pytest.mark.parametrize(("api_version", "kind"), [
    ("notifier.x-k8s.io/v1alpha1", "Notification"),
    ("notifier.x-k8s.io/v1", "PodNotifier"),
    ("v1", "Pod"),
    (None, "PodNotifier"),
    ("notifier.x-k8s.io/v1alpha1", None),
])
def test_wrong_kind_or_api_version(api_version: str | None, kind: str | None) -> None:
    obj = body()
    obj["apiVersion"], obj["kind"] = api_version, kind
    for key in ("apiVersion", "kind"):
        if obj[key] is None:
            del obj[key]
    answer = rejected(obj, 400)
    assert answer["reason"] == "BadRequest"
    assert 'the body must be a PodNotifier with apiVersion "notifier.x-k8s.io/v1alpha1"' in (
        answer["message"])


def test_namespace_mismatch() -> None:
    obj = body()
    obj["metadata"] = {"namespace": "staging"}
    answer = rejected(obj, 400)
    assert answer["message"] == ('metadata.namespace "staging" does not match the namespace '
                                 '"prod" in the URL; leave it empty or make them equal')


def test_pod_name_mismatch() -> None:
    answer = rejected(body(podName="db-1"), 400)
    assert answer["message"].startswith(
        'spec.podName "db-1" does not match the pod "db-0" in the URL')


@pytest.mark.parametrize("key", ["metadata", "spec"])
def test_metadata_or_spec_not_an_object(key: str) -> None:
    obj = body()
    obj[key] = ["quiesce"]
    answer = rejected(obj, 400)
    assert answer["message"] == f"{key} must be a JSON object"


def test_unknown_top_level_field() -> None:
    obj = body()
    obj["colour"] = "blue"
    answer = rejected(obj, 400)
    assert answer["message"] == 'strict decoding error: unknown field "colour"'
    assert answer["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": 'unknown field "colour"', "field": "colour"}]


def test_unknown_nested_fields() -> None:
    obj = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
           "metadata": {"name": "x", "finalizers": ["f"]},
           "spec": {"notifier": "quiesce", "colour": "blue", "timeoutSecond": 5}}
    answer = rejected(obj, 400)
    assert answer["message"] == (
        'strict decoding error: unknown field "metadata.finalizers", unknown field '
        '"spec.colour", unknown field "spec.timeoutSecond"')
    assert [c["field"] for c in answer["details"]["causes"]] == [
        "metadata.finalizers", "spec.colour", "spec.timeoutSecond"]
    assert all(c["reason"] == "FieldValueInvalid" for c in answer["details"]["causes"])


def test_free_form_fields_are_not_checked_for_unknown_keys() -> None:
    obj = body(requestedBy={"anything": 1})
    obj["metadata"] = {"labels": {"k": "v"}, "annotations": {"any/key": "x"}}
    obj["status"] = {"whatever": True}
    assert check(obj).labels == {"k": "v"}


# 422: values


@pytest.mark.parametrize("name", ["Db-0", "db_0", "-db", "db-", "a" * 254, "db..0"])
def test_bad_name(name: str) -> None:
    obj = body()
    obj["metadata"] = {"name": name}
    answer = rejected(obj, 422)
    assert answer["details"]["causes"][0]["field"] == "metadata.name"
    assert answer["message"].startswith(f'PodNotifier.notifier.x-k8s.io "{name}" is invalid: '
                                        "metadata.name: Invalid value: ")


def test_name_not_a_string() -> None:
    obj = body()
    obj["metadata"] = {"name": 7}
    assert invalid_fields(obj) == ["metadata.name"]


@pytest.mark.parametrize("prefix", ["Nightly-", "night_ly-", "-", "." + "a", "a" * 249])
def test_bad_generate_name(prefix: str) -> None:
    obj = body()
    obj["metadata"] = {"generateName": prefix}
    assert invalid_fields(obj) == ["metadata.generateName"]


def test_reserved_label_prefix() -> None:
    obj = body()
    obj["metadata"] = {"labels": {"notifier.x-k8s.io/pod": "db-0"}}
    answer = rejected(obj, 422)
    cause = answer["details"]["causes"][0]
    assert cause["field"] == "metadata.labels[notifier.x-k8s.io/pod]"
    assert "reserved for the server" in cause["message"]


@pytest.mark.parametrize("value", ["has space", "-x", "x" * 64, 5, None, "a,b"])
def test_bad_label_value(value: Any) -> None:
    obj = body()
    obj["metadata"] = {"labels": {"team": value}}
    assert invalid_fields(obj) == ["metadata.labels[team]"]


def test_bad_label_key_and_labels_not_a_map() -> None:
    obj = body()
    obj["metadata"] = {"labels": {"a/b/c": "v"}}
    assert invalid_fields(obj) == ["metadata.labels[a/b/c]"]
    obj["metadata"] = {"labels": ["team=db"]}
    assert invalid_fields(obj) == ["metadata.labels"]


def test_missing_notifier() -> None:
    obj = body()
    del obj["spec"]["notifier"]
    answer = rejected(obj, 422)
    assert answer["details"]["causes"] == [{
        "reason": "FieldValueRequired", "field": "spec.notifier",
        "message": "Required value: name the notifier to run, as the pod declares it"}]
    # Named by kind and generateName (the record would have), not by the pod of the URL; the
    # field once, in the summary.
    assert answer["message"] == (
        'PodNotifier.notifier.x-k8s.io "" is invalid: spec.notifier: Required value: name the '
        "notifier to run, as the pod declares it")


def test_invalid_names_the_generate_name() -> None:
    obj = body(timeoutSeconds=0)
    obj["metadata"] = {"generateName": "nightly-"}
    answer = rejected(obj, 422)
    assert answer["details"]["name"] == "nightly-"
    assert answer["message"] == (
        'PodNotifier.notifier.x-k8s.io "nightly-" is invalid: spec.timeoutSeconds: Invalid '
        f"value: 0: must be between 1 and {MAX_TIMEOUT}, inclusive")


def test_missing_spec_is_a_missing_notifier() -> None:
    obj = body()
    del obj["spec"]
    assert invalid_fields(obj) == ["spec.notifier"]


@pytest.mark.parametrize("notifier", [7, ["quiesce"], "a/b/c", "-quiesce", "quiesce now",
                                      "x" * 64, "/quiesce"])
def test_invalid_notifier(notifier: Any) -> None:
    fields = invalid_fields(body(notifier=notifier))
    assert fields and set(fields) == {"spec.notifier"}


@pytest.mark.parametrize("containers", ["db", [""], ["db", 1], {"db": True}])
def test_containers_not_a_list_of_names(containers: Any) -> None:
    assert invalid_fields(body(containers=containers)) == ["spec.containers"]


@pytest.mark.parametrize("value", [0, -1, MAX_TIMEOUT + 1, True, 1.5, "60"])
def test_bad_timeout_seconds(value: Any) -> None:
    assert invalid_fields(body(timeoutSeconds=value)) == ["spec.timeoutSeconds"]


def test_timeout_message_names_the_bounds() -> None:
    answer = rejected(body(timeoutSeconds=0), 422)
    assert answer["details"]["causes"][0]["message"] == (
        f"Invalid value: 0: must be between 1 and {MAX_TIMEOUT}, inclusive")


def test_bool_for_an_int_says_whole_number() -> None:
    answer = rejected(body(ttlSecondsAfterFinished=False), 422)
    assert answer["details"]["causes"][0]["message"] == (
        "Invalid value: false: must be a whole number")


@pytest.mark.parametrize("value", [-1, MAX_TTL_SECONDS + 1, True, "3600"])
def test_bad_ttl(value: Any) -> None:
    assert invalid_fields(body(ttlSecondsAfterFinished=value)) == [
        "spec.ttlSecondsAfterFinished"]


def test_every_problem_is_reported_at_once() -> None:
    obj = body(notifier="", containers="db", timeoutSeconds=0, ttlSecondsAfterFinished=-5)
    obj["metadata"] = {"name": "Bad", "labels": {"team": "a b"}}
    answer = rejected(obj, 422)
    assert [c["field"] for c in answer["details"]["causes"]] == [
        "metadata.name", "metadata.labels[team]", "spec.notifier", "spec.containers",
        "spec.timeoutSeconds", "spec.ttlSecondsAfterFinished"]
    assert answer["message"].startswith(
        'PodNotifier.notifier.x-k8s.io "Bad" is invalid: [metadata.name: Invalid value: "Bad": ')
    assert answer["details"]["name"] == "Bad"
