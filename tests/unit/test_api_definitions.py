"""The typed definitions (api/types.py) and what is derived from them: the OpenAPI schemas,
strict decoding, field errors and table columns."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from apiserver.api import types
from apiserver.api.decoding import Body, decode, path_of
from apiserver.api.field_errors import CauseReason
from apiserver.api.model import (
    APIModel,
    Bounds,
    Invalid,
    NotAccepted,
    OneOf,
    Problem,
    Required,
    ServerSet,
)
from apiserver.api.schema import description_of, field_schema, json_name
from apiserver.api.status import status_body
from apiserver.api.tables import NOTIFICATION_TABLE, PODNOTIFIER_TABLE, field_column
from apiserver.api.types import SCHEMAS, Notification, PodNotifier
from apiserver.errors import APIError
from apiserver.notifier.declarations import NotifierDeclaration, parse_notifiers

MODELS = sorted((value for value in vars(types).values()
                 if isinstance(value, type) and issubclass(value, APIModel)
                 and value.schema_name), key=lambda model: model.schema_name)
LIMITS = {"max_timeout_seconds": 600, "max_parallelism": 10}


def pod_notifier(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "spec": {"notifier": "quiesce", **spec}}


def rejected(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(APIError) as raised:
        decode(PodNotifier, Body(body), namespace="prod", limits=LIMITS)
    return status_body(raised.value)


# schemas


def test_every_model_is_a_component_described_by_its_docstring() -> None:
    assert len(MODELS) > 20
    for model in MODELS:
        schema = SCHEMAS[model.schema_name]
        assert schema["description"] == description_of(model) != "", model


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_every_field_appears_with_its_description(model: type[APIModel]) -> None:
    properties = SCHEMAS[model.schema_name].get("properties", {})
    assert set(properties) == {json_name(name, info) for name, info in
                               model.model_fields.items()}
    for name, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{name} has no description"
        assert properties[json_name(name, info)]["description"] == info.description


def test_required_bounds_and_choices_come_from_the_markers() -> None:
    spec = SCHEMAS[f"{types.OURS}.NotificationSpec"]
    assert spec["required"] == ["selector", "notifier"]
    assert spec["properties"]["parallelism"] == {
        "type": "integer", "format": "int32", "minimum": 1, "default": 1,
        "description": spec["properties"]["parallelism"]["description"]}
    assert spec["properties"]["activeDeadlineSeconds"]["format"] == "int64"
    assert spec["properties"]["activeDeadlineSeconds"]["maximum"] == types.MAX_DEADLINE_SECONDS
    assert spec["properties"]["failurePolicy"]["enum"] == ["Abort", "Continue"]
    assert SCHEMAS[f"{types.OURS}.PodNotifierStatus"]["properties"]["phase"]["enum"] == [
        "Pending", "Running", "Held", "Succeeded", "Failed"]
    owner = SCHEMAS[f"{types.META}.OwnerReference"]
    assert owner["required"] == ["apiVersion", "kind", "name", "uid"]
    assert owner["x-kubernetes-map-type"] == "atomic"


def test_json_names_are_camel_case_unless_the_definition_says() -> None:
    spec = SCHEMAS[f"{types.OURS}.PodNotifierSpec"]["properties"]
    assert {"podName", "podUID", "ttlSecondsAfterFinished", "requestedBy"} <= set(spec)
    container = SCHEMAS[f"{types.OURS}.ContainerNotifierStatus"]["properties"]
    assert {"containerID", "exitCode", "stdoutTruncated"} <= set(container)
    assert "continue" in SCHEMAS[f"{types.META}.ListMeta"]["properties"]


def test_lists_are_derived_for_each_kind() -> None:
    for kind in ("PodNotifier", "Notification"):
        listed = SCHEMAS[f"{types.OURS}.{kind}List"]
        assert listed["properties"]["items"]["items"] == {
            "$ref": f"#/components/schemas/{types.OURS}.{kind}"}
        assert listed["x-kubernetes-group-version-kind"][0]["kind"] == f"{kind}List"


def test_a_type_without_a_schema_is_refused() -> None:
    class Odd(APIModel):
        """Odd."""

        schema_name = "odd"
        value: Annotated[float, Field(description="A float.")]

    from apiserver.api.schema import object_schema

    with pytest.raises(TypeError, match="no OpenAPI schema"):
        object_schema(Odd)


# strict decoding


def test_an_unknown_field_is_refused_with_the_strict_decoding_wording() -> None:
    answer = rejected(pod_notifier(x=1))
    assert answer["code"] == 400
    assert answer["message"] == 'strict decoding error: unknown field "spec.x"'
    assert answer["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": 'unknown field "spec.x"', "field": "spec.x"}]


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_every_model_refuses_unknown_fields(model: type[APIModel]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as raised:
        model.model_validate({"surelyNotAField": 1}, context=LIMITS)
    assert ("extra_forbidden", ("surelyNotAField",)) in [
        (error["type"], error["loc"]) for error in raised.value.errors()]


def test_a_field_the_server_does_not_take_is_refused_as_unknown() -> None:
    body = pod_notifier()
    body["metadata"] = {"uid": "u-1", "resourceVersion": "5"}
    assert rejected(body)["message"] == (
        'strict decoding error: unknown field "metadata.uid", unknown field '
        '"metadata.resourceVersion"')


def test_fields_the_server_sets_are_ignored_unchecked() -> None:
    body = pod_notifier(podUID=["not", "a", "uid"], requestedBy="me")
    body["status"] = {"phase": "Nonsense", "extra": True}
    decoded = decode(PodNotifier, Body(body), namespace="prod", limits=LIMITS)
    assert decoded.errors == []
    assert decoded.obj is not None
    assert (decoded.obj.spec.pod_uid, decoded.obj.spec.requested_by, decoded.obj.status) == (
        None, None, None)


def test_an_unknown_field_below_a_worded_field_is_still_a_400() -> None:
    body = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "n"},
            "spec": {"notifier": "q", "selector": {"matchExpressions": [
                {"key": "app", "operator": "Exists", "value": "x"}]}}}
    with pytest.raises(APIError) as raised:
        decode(Notification, Body(body), namespace="prod", limits=LIMITS)
    assert raised.value.message == (
        'strict decoding error: unknown field "spec.selector.matchExpressions[0].value"')


def test_values_are_not_coerced() -> None:
    decoded = decode(PodNotifier, Body(pod_notifier(containers=("db",), timeoutSeconds="60",
                                                    ttlSecondsAfterFinished=60.0)),
                     namespace="prod", limits=LIMITS)
    assert [error.field for error in decoded.errors] == [
        "spec.containers", "spec.timeoutSeconds", "spec.ttlSecondsAfterFinished"]


def test_a_named_limit_comes_from_the_context() -> None:
    decoded = decode(PodNotifier, Body(pod_notifier(timeoutSeconds=60)), namespace="prod",
                     limits={"max_timeout_seconds": 30})
    assert [error.message for error in decoded.errors] == [
        "Invalid value: 60: must be between 1 and 30, inclusive"]


# markers and field errors


class Sample(APIModel):
    """A model for the markers."""

    name: Annotated[str | None, Field(description="n"), Invalid("must be a string"),
                    Required("name it")] = None
    size: Annotated[int | None, Field(description="s"), Bounds(2, 4)] = None
    colour: Annotated[str, Field(description="c"), OneOf(("red", "blue"))] = "red"
    hidden: Annotated[str | None, Field(description="h"), ServerSet()] = None
    refused: Annotated[str | None, Field(description="r"), NotAccepted()] = None


def sample_errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    from pydantic import ValidationError

    from apiserver.api.decoding import _field_errors

    try:
        Sample.model_validate(data)
    except ValidationError as error:
        return [(found.field, found.message) for detail in error.errors()
                for found in _field_errors(detail)]
    return []


def test_markers_word_their_errors() -> None:
    assert sample_errors({"name": "a", "hidden": 5}) == []
    assert sample_errors({}) == [("name", "Required value: name it")]
    assert sample_errors({"name": 5, "size": 5, "colour": "green"}) == [
        ("name", "Invalid value: 5: must be a string"),
        ("size", "Invalid value: 5: must be between 2 and 4, inclusive"),
        ("colour", 'Unsupported value: "green": supported values: red, blue'),
    ]


def test_a_type_error_no_marker_words_keeps_pydantics_message() -> None:
    assert sample_errors({"name": "a", "size": "big"}) == [
        ("size", 'Invalid value: "big": Input should be a valid integer')]


def test_problems_carry_their_own_path_and_value() -> None:
    problem = Problem(CauseReason.INVALID, "bad", at="[k]", value="v")
    error = problem.at_path("metadata.labels", {"k": "v"})
    assert (error.field, error.value, error.message) == (
        "metadata.labels[k]", "v", 'Invalid value: "v": bad')


def test_paths_are_kubernetes_field_paths() -> None:
    assert path_of(("spec", "selector", "matchExpressions", 0, "key")) == (
        "spec.selector.matchExpressions[0].key")
    assert path_of((2, "name")) == "[2].name"
    assert path_of(()) == ""


# tables


def test_field_columns_take_the_fields_description_and_type() -> None:
    columns = {column.name: column for column in PODNOTIFIER_TABLE.columns}
    assert columns["Pod"].description == field_schema(PodNotifier, "spec", "podName")[
        "description"]
    counts = {column.name: column for column in NOTIFICATION_TABLE.columns}
    failed = field_schema(Notification, "status", "counts", "failed")
    assert (counts["Failed"].type, counts["Failed"].description) == (
        failed["type"], failed["description"]) == ("integer", failed["description"])


def test_a_column_of_a_field_the_definition_lacks_fails_at_definition() -> None:
    with pytest.raises(KeyError):
        field_column("Colour", PodNotifier, "spec", "colour")


# the annotation


def test_unknown_annotation_fields_list_the_definitions_fields() -> None:
    from apiserver.notifier.declarations import InvalidNotifiers

    with pytest.raises(InvalidNotifiers) as raised:
        parse_notifiers('{"db": [{"name": "q", "action": {"signal": "SIGHUP"}, "colour": 1}]}')
    [error] = raised.value.errors
    listed = ", ".join(f'"{json_name(name, info)}"'
                       for name, info in NotifierDeclaration.model_fields.items())
    assert error.message.endswith(f"supported values: {listed}")
    assert listed == ('"name", "timeoutSeconds", "terminationGracePeriodSeconds", "action", '
                      '"hold"')


def test_explain_shows_the_defaults_and_no_held_notification() -> None:
    """What ``kubectl explain`` prints comes from these schemas: a Notification is never
    Held (a PodNotifier is), and the defaults a user must know are in the descriptions
    (kubectl explain prints descriptions and enums, not ``default``)."""
    ours = "io.x-k8s.notifier.v1alpha1"
    notification_phase = SCHEMAS[f"{ours}.NotificationStatus"]["properties"]["phase"]
    assert notification_phase["enum"] == ["Pending", "Running", "Succeeded", "Failed"]
    assert "Held" not in notification_phase["description"]
    assert "Held" in SCHEMAS[f"{ours}.PodNotifierStatus"]["properties"]["phase"]["enum"]
    parallelism = SCHEMAS[f"{ours}.NotificationSpec"]["properties"]["parallelism"]
    assert parallelism["default"] == 1
    assert "Default 1; at most the server's --max-notification-parallelism (100 " in (
        parallelism["description"])
    ttl = SCHEMAS[f"{ours}.PodNotifierSpec"]["properties"]["ttlSecondsAfterFinished"]
    assert "Default: the server's --default-ttl-seconds-after-finished (3600 " in (
        ttl["description"])
