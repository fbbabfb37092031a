"""The pure patch logic: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge patch as
merge patch, apply configurations (YAML without aliases), media types and immutability."""

from __future__ import annotations

import json

import pytest

from apiserver import errors
from apiserver.api.json_input import MAX_DEPTH
from apiserver.api.openapi import openapi_v2, openapi_v3_group_version
from apiserver.api.patch import (
    MAX_ANNOTATIONS_BYTES,
    MAX_JSON_PATCH_OPERATIONS,
    MAX_PATCHED_BYTES,
    PATCH_MEDIA_TYPES,
    PatchType,
    apply_patch,
    changes,
    check_mutable,
    decode,
    json_equal,
    json_patch,
    load_apply_config,
    merge_patch,
    patch_type,
    strategic_as_merge,
)

OBJ = {
    "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
    "metadata": {"name": "n", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                 "labels": {"team": "a", "notifier.x-k8s.io/pod": "web-0"},
                 "annotations": {"note": "x"}},
    "spec": {"notifier": "quiesce", "selector": {"matchLabels": {"app": "db"}},
             "containers": ["a", "b"]},
    "status": {"phase": "Running"},
}


# RFC 7386 (its appendix A examples)

@pytest.mark.parametrize(("target", "patch", "result"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_rfc7386_examples(target, patch, result):
    assert merge_patch(target, patch) == result


def test_merge_patch_leaves_its_arguments_alone():
    target, patch = {"a": {"b": 1}}, {"a": {"c": 2}}
    merge_patch(target, patch)
    assert target == {"a": {"b": 1}} and patch == {"a": {"c": 2}}


# RFC 6902

def test_json_patch_operations():
    doc = {"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]}
    result = json_patch(doc, [
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "remove", "path": "/list/0"},
        {"op": "add", "path": "/list/-", "value": 4},
        {"op": "add", "path": "/list/0", "value": 0},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/c"},
        {"op": "move", "from": "/metadata/labels/b", "path": "/metadata/labels/d"},
        {"op": "test", "path": "/list", "value": [0, 2, 3, 4]},
    ])
    assert result == {"metadata": {"labels": {"a": "9", "c": "9", "d": "2"}},
                      "list": [0, 2, 3, 4]}
    assert doc == {"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]}


def test_json_pointer_escapes():
    doc = {"metadata": {"annotations": {"example.com/a~b": "x"}}}
    result = json_patch(doc, [{"op": "replace", "path": "/metadata/annotations/example.com~1a~0b",
                               "value": "y"}])
    assert result == {"metadata": {"annotations": {"example.com/a~b": "y"}}}


@pytest.mark.parametrize(("operation", "wording"), [
    ({"op": "test", "path": "/a", "value": "2"}, "test failed"),
    ({"op": "test", "path": "/n", "value": True}, "test failed"),
    ({"op": "remove", "path": "/missing"}, "does not exist"),
    ({"op": "replace", "path": "/missing", "value": 1}, "does not exist"),
    ({"op": "add", "path": "/missing/child", "value": 1}, "does not exist"),
    ({"op": "move", "from": "/missing", "path": "/b"}, "does not exist"),
    ({"op": "copy", "from": "/missing", "path": "/b"}, "does not exist"),
    ({"op": "move", "from": "/o", "path": "/o/inner"}, "its own child"),
    ({"op": "add", "path": "/l/5", "value": 1}, "out of range"),
    ({"op": "remove", "path": "/l/01"}, "not an array index"),
    ({"op": "add", "path": "/a/x", "value": 1}, "not an object or an array"),
])
def test_json_patch_failures_are_422(operation, wording):
    with pytest.raises(errors.Invalid) as raised:
        json_patch({"a": "1", "n": 1, "o": {}, "l": [1]}, [operation])
    assert wording in raised.value.message
    assert "JSON patch operation 0" in raised.value.message


@pytest.mark.parametrize(("operation", "wording"), [
    ({"op": "frobnicate", "path": "/a"}, "unsupported op"),
    ({"path": "/a"}, "unsupported op"),
    ({"op": "add", "path": "/a"}, 'needs a "value"'),
    ({"op": "remove", "path": "a"}, 'must start with "/"'),
    ({"op": "remove"}, "JSON pointer"),
    ({"op": "move", "path": "/a"}, '"from"'),
])
def test_malformed_json_patch_operations_are_400(operation, wording):
    with pytest.raises(errors.BadRequest) as raised:
        json_patch({"a": "1"}, [operation])
    assert wording in raised.value.message


def test_a_failed_operation_leaves_nothing_half_done():
    doc = {"a": "1"}
    with pytest.raises(errors.Invalid):
        json_patch(doc, [{"op": "add", "path": "/b", "value": 2},
                         {"op": "test", "path": "/a", "value": "2"}])
    assert doc == {"a": "1"}


def test_json_equal_tells_booleans_from_numbers():
    assert json_equal(1, 1.0) and json_equal({"a": [1]}, {"a": [1]})
    assert not json_equal(True, 1) and not json_equal(0, False) and not json_equal("1", 1)
    assert not json_equal({"a": 1}, {"a": 1, "b": 2}) and not json_equal([1], [1, 2])


# strategic merge patch

def test_strategic_merge_patch_drops_ordering_directives():
    patch = {"metadata": {"labels": {"a": "1"}, "$setElementOrder/finalizers": ["x"]},
             "$retainKeys": ["spec"]}
    assert strategic_as_merge(patch) == {"metadata": {"labels": {"a": "1"}}}


def test_strategic_merge_patch_refuses_other_directives():
    with pytest.raises(errors.BadRequest, match=r"\$patch.*merge"):
        strategic_as_merge({"metadata": {"labels": {"$patch": "replace"}}})


def test_apply_patch_by_type():
    target = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert apply_patch(PatchType.MERGE, target, {"metadata": {"labels": {"b": None}}}) == {
        "metadata": {"labels": {"a": "1"}}}
    assert apply_patch(PatchType.STRATEGIC, target, {"metadata": {"labels": {"c": "3"}}}) == {
        "metadata": {"labels": {"a": "1", "b": "2", "c": "3"}}}
    assert apply_patch(PatchType.JSON, target, [
        {"op": "remove", "path": "/metadata/labels/a"}]) == {"metadata": {"labels": {"b": "2"}}}


# media types and decoding

@pytest.mark.parametrize("content_type", PATCH_MEDIA_TYPES)
def test_patch_types(content_type):
    assert patch_type(f"{content_type}; charset=utf-8").value == content_type


@pytest.mark.parametrize("content_type", [None, "", "application/json", "application/yaml",
                                          "text/plain"])
def test_other_media_types_are_415_listing_the_supported(content_type):
    with pytest.raises(errors.UnsupportedMediaType) as raised:
        patch_type(content_type)
    assert all(media_type in raised.value.message for media_type in PATCH_MEDIA_TYPES)


@pytest.mark.parametrize(("kind", "raw", "wording"), [
    (PatchType.MERGE, b"{", "not valid JSON"),
    (PatchType.MERGE, b"[1]", "must be a JSON object"),
    (PatchType.STRATEGIC, b'"x"', "must be a JSON object"),
    (PatchType.JSON, b'{"op": "add"}', "list of operations"),
    (PatchType.JSON, b"[1]", "list of operations"),
    (PatchType.APPLY, b"a: [", "not valid YAML"),
    (PatchType.APPLY, b"- 1", "must be one object"),
    (PatchType.APPLY, b"a: 1\n---\nb: 2\n", "must be one YAML document"),
    (PatchType.APPLY, b"- a\n- b\n", "must be one object"),
])
def test_bodies_that_are_no_patch_are_400(kind, raw, wording):
    with pytest.raises(errors.BadRequest, match=wording):
        decode(kind, raw)


def test_apply_configuration_yaml_and_json():
    yaml_body = b"apiVersion: v1\nkind: X\nmetadata:\n  labels:\n    a: '1'\n"
    assert load_apply_config(yaml_body) == {"apiVersion": "v1", "kind": "X",
                                            "metadata": {"labels": {"a": "1"}}}
    assert load_apply_config(b'{"kind": "X"}') == {"kind": "X"}
    # as sigs.k8s.io/yaml converts it: a timestamp JSON has no type for stays its text
    assert load_apply_config(b"a: 2026-01-01\n") == {"a": "2026-01-01"}


def test_apply_configuration_refuses_aliases():
    bomb = b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(errors.BadRequest, match="aliases are not accepted"):
        load_apply_config(bomb)


# immutability

def changed(**edits):
    new = merge_patch(OBJ, edits)
    return new


def test_labels_and_annotations_may_change():
    check_mutable("notifications", "notifier.x-k8s.io", OBJ, changed(metadata={
        "labels": {"team": "b", "tier": "db"}, "annotations": None,
        "managedFields": [{"manager": "m"}], "resourceVersion": "8"}))


def test_spec_status_and_other_metadata_are_immutable_naming_each_field():
    new = changed(spec={"notifier": "reload", "containers": ["a"]}, status={"phase": "Failed"},
                  metadata={"name": "other", "finalizers": ["f"]}, extra={"x": 1})
    with pytest.raises(errors.Invalid) as raised:
        check_mutable("Notification", "notifier.x-k8s.io", OBJ, new)
    fields = [cause.field for cause in raised.value.causes]
    assert fields == ["extra", "spec.containers", "spec.notifier", "status.phase",
                      "metadata.finalizers", "metadata.name"]
    assert raised.value.message.startswith(
        'Notification.notifier.x-k8s.io "n" is invalid: [extra: Invalid value: {"x": 1}: field '
        "is immutable")
    assert 'spec.notifier: Invalid value: "reload": field is immutable' in raised.value.message


def test_removing_the_spec_is_immutable_too():
    with pytest.raises(errors.Invalid) as raised:
        check_mutable("notifications", "notifier.x-k8s.io", OBJ, changed(spec=None))
    assert [cause.field for cause in raised.value.causes] == ["spec"]


def test_server_labels_are_kept_as_they_are():
    for labels in ({"notifier.x-k8s.io/pod": "web-1"}, {"notifier.x-k8s.io/pod": None},
                   {"notifier.x-k8s.io/new": "x"}):
        with pytest.raises(errors.Invalid, match="reserved for the server"):
            check_mutable("podnotifiers", "notifier.x-k8s.io", OBJ,
                          changed(metadata={"labels": labels}))


@pytest.mark.parametrize(("metadata", "field"), [
    ({"labels": {"bad key": "x"}}, "metadata.labels[bad key]"),
    ({"labels": {"a": "not a label value"}}, "metadata.labels[a]"),
    ({"labels": {"a": 1}}, "metadata.labels"),
    ({"labels": ["a"]}, "metadata.labels"),
    ({"annotations": {"a": True}}, "metadata.annotations"),
    ({"annotations": {"bad key": "x"}}, "metadata.annotations[bad key]"),
    ({"annotations": {"big": "x" * MAX_ANNOTATIONS_BYTES}}, "metadata.annotations"),
])
def test_labels_and_annotations_must_be_valid(metadata, field):
    with pytest.raises(errors.Invalid) as raised:
        check_mutable("notifications", "notifier.x-k8s.io", OBJ, changed(metadata=metadata))
    assert [cause.field for cause in raised.value.causes] == [field]


def test_a_patched_object_that_is_no_object_is_422():
    with pytest.raises(errors.Invalid, match="must be a JSON object"):
        check_mutable("notifications", "notifier.x-k8s.io", OBJ, ["x"])
    with pytest.raises(errors.Invalid, match="metadata: Invalid value"):
        check_mutable("notifications", "notifier.x-k8s.io", OBJ, {**OBJ, "metadata": "x"})


def test_changes_descends_objects_only():
    assert changes("spec", {"a": {"b": 1, "c": [1]}}, {"a": {"b": 2, "c": [1, 2]}}) == [
        ("spec.a.b", 2), ("spec.a.c", [1, 2])]
    assert changes("spec", {"a": 1}, {"a": 1}) == []
    assert changes("spec", {"a": 1}, "x") == [("spec", "x")]


def test_openapi_patch_operations_consume_the_served_patch_types():
    for plural, kind in (("notifications", "Notification"), ("podnotifiers", "PodNotifier")):
        path = f"/apis/notifier.x-k8s.io/v1alpha1/namespaces/{{namespace}}/{plural}/{{name}}"
        v2 = openapi_v2()["paths"][path]["patch"]
        assert v2["consumes"] == list(PATCH_MEDIA_TYPES)
        assert v2["x-kubernetes-action"] == "patch"
        assert v2["x-kubernetes-group-version-kind"]["kind"] == kind
        assert {p["name"] for p in v2["parameters"]} >= {"body", "dryRun", "fieldManager",
                                                         "force"}
        v3 = openapi_v3_group_version()["paths"][path]["patch"]
        assert sorted(v3["requestBody"]["content"]) == sorted(PATCH_MEDIA_TYPES)


def test_a_json_patch_of_more_operations_than_kube_apiserver_allows_is_413() -> None:
    operations = [{"op": "test", "path": "/a", "value": "1"}] * MAX_JSON_PATCH_OPERATIONS
    assert decode(PatchType.JSON, json.dumps(operations).encode()) == operations
    with pytest.raises(errors.RequestEntityTooLarge) as raised:
        decode(PatchType.JSON, json.dumps([*operations, operations[0]]).encode())
    assert raised.value.message == (
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got "
        "10001; send the changes in several patches")


def test_copies_that_double_the_object_stop_at_the_bound_on_its_size() -> None:
    """Issue 20: each copy of the object into itself doubled its time and memory, unbounded."""
    doubling = [{"op": "copy", "from": "/o", "path": f"/o/{index}"} for index in range(16)]
    with pytest.raises(errors.RequestEntityTooLarge) as raised:
        json_patch({"o": {"a": "x" * 1000}}, doubling)
    assert f"larger than {MAX_PATCHED_BYTES} bytes" in raised.value.message
    assert "JSON patch operation 10 (copy \"/o/10\")" in raised.value.message


def test_added_values_count_toward_the_bound_too() -> None:
    value = "x" * (MAX_PATCHED_BYTES // 4)
    adds = [{"op": "add", "path": "/a", "value": value}, {"op": "remove", "path": "/a"}] * 4
    with pytest.raises(errors.RequestEntityTooLarge):
        json_patch({}, adds)
    assert json_patch({}, adds[:6]) == {}


def deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("operations", [
    [{"op": "add", "path": "/a", "value": deep(MAX_DEPTH - 2)},
     {"op": "add", "path": "/a" * (MAX_DEPTH - 2) + "/b", "value": deep(3)}],
    [{"op": "add", "path": "/a", "value": deep(MAX_DEPTH - 2)},
     {"op": "copy", "from": "/a", "path": "/a/a/b"}],
    [{"op": "add", "path": "/a", "value": deep(MAX_DEPTH - 2)},
     {"op": "add", "path": "/b", "value": {"c": {}}},
     {"op": "move", "from": "/a", "path": "/b/c/a"}],
])
def test_the_patched_object_nests_no_deeper_than_a_body_may(operations) -> None:
    """Else copies and moves could nest it without bound, and whatever recurses over it (a
    copy, a comparison, the answer's JSON) would fail."""
    assert json_patch({}, operations[:-1])
    with pytest.raises(errors.Invalid, match=f"nested more than {MAX_DEPTH} levels deep"):
        json_patch({}, operations)


@pytest.mark.parametrize("token", ["9" * 5000, "\u0661", "\u00b2"])
def test_an_array_index_is_ascii_digits_of_any_length(token: str) -> None:
    """int() of these raised ValueError (the digit limit; digits that are not ASCII)."""
    with pytest.raises(errors.Invalid, match="out of range|not an array index"):
        json_patch({"l": [1]}, [{"op": "remove", "path": f"/l/{token}"}])


def test_messages_show_long_or_unprintable_pointers_shortened_and_escaped() -> None:
    with pytest.raises(errors.Invalid) as raised:
        json_patch({}, [{"op": "remove", "path": "/\u001b[31m" + "x" * 5000}])
    assert raised.value.message.isprintable() and len(raised.value.message) < 300
