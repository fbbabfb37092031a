"""metadata.managedFields for labels and annotations: Update ownership, Apply ownership,
conflicts, force, removal of fields an applier stopped applying."""

from __future__ import annotations

import pytest

from apiserver import errors
from apiserver.api import managed_fields
from apiserver.api.managed_fields import APPLY, UPDATE, apply, check_manager, owned, record_update

V = "notifier.x-k8s.io/v1alpha1"


def entry(manager: str, operation: str, *labels: str, annotations: tuple[str, ...] = ()) -> dict:
    fields = {("labels", key) for key in labels} | {("annotations", key) for key in annotations}
    return {"manager": manager, "operation": operation, "apiVersion": V, "time": "t0",
            "fieldsType": "FieldsV1", "fieldsV1": managed_fields.fields_v1(fields)}


def by_manager(managed: list[dict]) -> dict[tuple[str, str], set]:
    return {(e["manager"], e["operation"]): owned(e) for e in managed}


def run_apply(metadata: dict, managed: list[dict], config: dict, manager: str = "me",
              force: bool = False) -> managed_fields.Applied:
    return apply(metadata, managed, config, manager=manager, api_version=V, time="t1",
                 force=force, resource="notifications", group="notifier.x-k8s.io", name="n")


def test_fields_v1_shape():
    assert managed_fields.fields_v1({("labels", "a"), ("annotations", "example.com/b")}) == {
        "f:metadata": {"f:annotations": {"f:example.com/b": {}}, "f:labels": {"f:a": {}}}}
    assert managed_fields.fields_v1(set()) == {}


def test_an_update_owns_what_it_changed_and_takes_it_from_others():
    managed = [entry("creator", UPDATE, "a", "b")]
    result = record_update(managed, "kubectl-label", V, "t1",
                           {"labels": {"a": "1", "b": "2"}},
                           {"labels": {"a": "9", "b": "2", "c": "3"}})
    assert by_manager(result) == {("creator", UPDATE): {("labels", "b")},
                                  ("kubectl-label", UPDATE): {("labels", "a"), ("labels", "c")}}
    label = next(e for e in result if e["manager"] == "kubectl-label")
    assert label["time"] == "t1" and label["fieldsType"] == "FieldsV1" and label[
        "apiVersion"] == V


def test_removed_fields_leave_every_manager_and_empty_entries_go():
    managed = [entry("creator", UPDATE, "a"), entry("me", APPLY, "a", "b")]
    result = record_update(managed, "kubectl-label", V, "t1", {"labels": {"a": "1", "b": "2"}},
                           {"labels": {"b": "2"}})
    assert by_manager(result) == {("me", APPLY): {("labels", "b")}}


def test_apply_owns_its_fields_and_sets_them():
    result = run_apply({"labels": {"x": "1"}}, [],
                       {"labels": {"a": "1"}, "annotations": {"note": "n"}})
    assert result.metadata == {"labels": {"x": "1", "a": "1"}, "annotations": {"note": "n"}}
    assert by_manager(result.managed_fields) == {
        ("me", APPLY): {("labels", "a"), ("annotations", "note")}}


def test_applying_the_same_value_shares_ownership():
    managed = [entry("kubectl-label", UPDATE, "a")]
    result = run_apply({"labels": {"a": "1"}}, managed, {"labels": {"a": "1"}})
    assert by_manager(result.managed_fields) == {("kubectl-label", UPDATE): {("labels", "a")},
                                                 ("me", APPLY): {("labels", "a")}}


def test_a_different_value_owned_by_another_manager_conflicts():
    managed = [entry("kubectl-label", UPDATE, "a"), entry("other", APPLY, "b")]
    with pytest.raises(errors.Conflict) as raised:
        run_apply({"labels": {"a": "1", "b": "2"}}, managed, {"labels": {"a": "9", "b": "8"}})
    error = raised.value
    assert [(c.reason, c.field) for c in error.causes] == [
        ("FieldManagerConflict", ".metadata.labels.a"),
        ("FieldManagerConflict", ".metadata.labels.b")]
    assert error.message.startswith('Apply failed with 2 conflicts: - conflict with '
                                    f'"kubectl-label" using {V}: .metadata.labels.a')
    assert "--force-conflicts" in error.message


def test_force_takes_conflicting_fields_over():
    managed = [entry("kubectl-label", UPDATE, "a", "c")]
    result = run_apply({"labels": {"a": "1", "c": "3"}}, managed, {"labels": {"a": "9"}},
                       force=True)
    assert result.metadata["labels"] == {"a": "9", "c": "3"}
    assert by_manager(result.managed_fields) == {("kubectl-label", UPDATE): {("labels", "c")},
                                                 ("me", APPLY): {("labels", "a")}}


def test_fields_no_longer_applied_are_removed_unless_someone_else_owns_them():
    managed = [entry("me", APPLY, "a", "b", annotations=("n",)), entry("other", UPDATE, "b")]
    result = run_apply({"labels": {"a": "1", "b": "2"}, "annotations": {"n": "x"}}, managed,
                       {"labels": {}})
    assert result.metadata == {"labels": {"b": "2"}, "annotations": {}}
    assert by_manager(result.managed_fields) == {("other", UPDATE): {("labels", "b")}}


def test_another_applier_is_a_different_manager():
    managed = [entry("other", APPLY, "a")]
    result = run_apply({"labels": {"a": "1"}}, managed, {"labels": {"b": "2"}})
    assert result.metadata["labels"] == {"a": "1", "b": "2"}
    assert by_manager(result.managed_fields) == {("other", APPLY): {("labels", "a")},
                                                 ("me", APPLY): {("labels", "b")}}


@pytest.mark.parametrize(("manager", "apply_patch", "wording"), [
    ("", True, "fieldManager: Required value: is required for apply patch"),
    ("x" * 129, False, "Too long"),
    ("a\nb", False, "printable"),
])
def test_field_manager_checks(manager, apply_patch, wording):
    with pytest.raises(errors.Invalid) as raised:
        check_manager(manager, apply=apply_patch)
    (cause,) = raised.value.causes
    assert cause.field == "fieldManager"
    assert raised.value.message == (
        f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {cause.message}')
    assert wording in raised.value.message


def test_an_update_needs_no_manager():
    check_manager("", apply=False)
    check_manager("kubectl-label", apply=True)


def test_applying_the_same_configuration_again_changes_nothing_not_even_the_time():
    first = run_apply({"labels": {"x": "1"}}, [], {"labels": {"team": "a"}})
    again = apply(first.metadata, first.managed_fields, {"labels": {"team": "a"}},
                  manager="me", api_version=V, time="t2", force=False, resource="notifications",
                  group="notifier.x-k8s.io", name="n")
    assert again.managed_fields == first.managed_fields  # "t1" kept: a no-op writes nothing
    assert again.metadata == first.metadata
    changed = apply(first.metadata, first.managed_fields, {"labels": {"team": "b"}},
                    manager="me", api_version=V, time="t2", force=False,
                    resource="notifications", group="notifier.x-k8s.io", name="n")
    assert [entry["time"] for entry in changed.managed_fields] == ["t2"]
