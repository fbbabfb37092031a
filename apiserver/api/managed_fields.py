"""metadata.managedFields: which manager set which labels and annotations (server-side apply).

A reasonable subset of Kubernetes' structured-merge-diff for objects whose only mutable fields
are ``metadata.labels`` and ``metadata.annotations``: a field is one label or annotation key.

- An *Update* (a merge, JSON or strategic merge patch) makes its manager own the keys it added
  or changed; other managers lose them, and keys it removed leave every manager.
- An *Apply* (``application/apply-patch+yaml``) makes its manager own exactly the keys of its
  configuration: a key another manager owns with a different value is a conflict (409) unless
  forced, which moves the key to the applier; a key the applier owned before and no longer
  applies is removed from the object unless another manager still owns it.

Entries are ``metav1.ManagedFieldsEntry`` (operation, manager, apiVersion, time, fieldsType
FieldsV1, fieldsV1 such as ``{"f:metadata": {"f:labels": {"f:tier": {}}}}``); an entry left
without fields is dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apiserver import errors
from apiserver.api.patch import patch_options_invalid
from apiserver.errors import Cause

APPLY, UPDATE = "Apply", "Update"
MAPS = ("labels", "annotations")
MAX_MANAGER_LENGTH = 128

Field = tuple[str, str]
"""(``labels`` or ``annotations``, key)."""


@dataclass(frozen=True)
class Applied:
    """The result of an apply: the object's new labels and annotations and managedFields."""

    metadata: dict[str, Any]
    managed_fields: list[dict[str, Any]]


def field_path(field: Field) -> str:
    """A field as structured-merge-diff names it in conflicts: ``.metadata.labels.tier``."""
    return f".metadata.{field[0]}.{field[1]}"


def fields_of(metadata: Mapping[str, Any]) -> dict[Field, str]:
    """The labels and annotations of ``metadata``, by field."""
    found: dict[Field, str] = {}
    for kind in MAPS:
        values = metadata.get(kind)
        if isinstance(values, Mapping):
            found.update({(kind, key): value for key, value in values.items()})
    return found


def fields_v1(fields: Iterable[Field]) -> dict[str, Any]:
    """The FieldsV1 set of ``fields``."""
    document: dict[str, Any] = {}
    for kind, key in sorted(fields):
        document.setdefault(f"f:{kind}", {})[f"f:{key}"] = {}
    return {"f:metadata": document} if document else {}


def owned(entry: Mapping[str, Any]) -> set[Field]:
    """The label and annotation fields an entry's FieldsV1 holds (anything else is ignored)."""
    metadata = (entry.get("fieldsV1") or {}).get("f:metadata") or {}
    return {(kind, member[2:]) for kind in MAPS
            for member in metadata.get(f"f:{kind}") or {} if member.startswith("f:")}


def _entry(manager: str, operation: str, api_version: str, time: str,
           fields: Iterable[Field]) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "apiVersion": api_version,
            "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(fields)}


def check_manager(manager: str, *, apply: bool) -> None:
    """422 (PatchOptions) for a missing apply manager or a malformed one, worded as
    kube-apiserver's ValidatePatchOptions."""
    if apply and not manager:
        reason, problem = "FieldValueRequired", "Required value: is required for apply patch"
    elif len(manager) > MAX_MANAGER_LENGTH:
        reason, problem = ("FieldValueTooLong",
                           f"Too long: may not be more than {MAX_MANAGER_LENGTH} bytes")
    elif not manager.isprintable():
        reason, problem = ("FieldValueInvalid",
                           "Invalid value: must only contain printable characters")
    else:
        return
    raise patch_options_invalid("fieldManager", reason, problem)


def _rewrite(managed: list[dict[str, Any]], drop: set[Field], keep: tuple[str, str] | None
             ) -> list[dict[str, Any]]:
    """``managed`` with ``drop`` removed from every entry but ``keep`` (manager, operation);
    entries left empty are dropped, ``keep``'s too (the caller adds it again)."""
    result = []
    for entry in managed:
        if keep is not None and (entry.get("manager"), entry.get("operation")) == keep:
            continue
        fields = owned(entry) - drop
        if fields:
            result.append({**copy.deepcopy(entry), "fieldsV1": fields_v1(fields)})
    return result


def record_update(managed: list[dict[str, Any]], manager: str, api_version: str, time: str,
                  old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """managedFields after an Update by ``manager`` changed metadata ``old`` into ``new``."""
    before, after = fields_of(old), fields_of(new)
    changed = {field for field, value in after.items() if before.get(field) != value}
    removed = set(before) - set(after)
    mine = next((owned(entry) for entry in managed
                 if (entry.get("manager"), entry.get("operation")) == (manager, UPDATE)), set())
    result = _rewrite(managed, changed | removed, (manager, UPDATE))
    fields = (mine | changed) - removed
    if fields:
        result.append(_entry(manager, UPDATE, api_version, time, fields))
    return result


def apply(metadata: Mapping[str, Any], managed: list[dict[str, Any]], config: Mapping[str, Any],
          *, manager: str, api_version: str, time: str, force: bool, resource: str, group: str,
          name: str) -> Applied:
    """The labels, annotations and managedFields after ``manager`` applied the metadata
    ``config``; 409 naming each conflicting field and its manager, unless ``force``."""
    current, wanted = fields_of(metadata), fields_of(config)
    me = (manager, APPLY)
    conflicts = [(field, str(entry.get("manager")), str(entry.get("apiVersion") or ""))
                 for entry in managed
                 if (entry.get("manager"), entry.get("operation")) != me
                 for field in sorted(owned(entry))
                 if field in wanted and current.get(field, wanted[field]) != wanted[field]]
    if conflicts and not force:
        raise _conflict(conflicts, resource, group, name)
    taken = {field for field, _, _ in conflicts}
    before = next((owned(entry) for entry in managed
                   if (entry.get("manager"), entry.get("operation")) == me), set())
    others = _rewrite(managed, taken, me)
    still_owned = set().union(*(owned(entry) for entry in others))
    dropped = {field for field in before - set(wanted) if field not in still_owned}
    result = {kind: dict(metadata.get(kind) or {}) for kind in MAPS}
    for (kind, key), value in wanted.items():
        result[kind][key] = value
    for kind, key in dropped:
        result[kind].pop(key, None)
    maps = {kind: values for kind, values in result.items() if values or kind in metadata}
    mine = next((entry for entry in managed
                 if (entry.get("manager"), entry.get("operation")) == me), None)
    unchanged = (mine is not None and not taken and not dropped and before == set(wanted)
                 and mine.get("apiVersion") == api_version
                 and all(maps.get(kind) == (metadata.get(kind) or {}) for kind in maps))
    if unchanged:  # a no-op apply keeps its entry's time, so it writes nothing (as Kubernetes)
        return Applied(maps, copy.deepcopy(managed))
    entries = others + ([_entry(manager, APPLY, api_version, time, wanted)] if wanted else [])
    return Applied(maps, entries)


def _conflict(conflicts: list[tuple[Field, str, str]], resource: str, group: str, name: str
              ) -> errors.Conflict:
    causes = [Cause("FieldManagerConflict", f'conflict with "{owner}"'
                    + (f" using {version}" if version else ""), field_path(field))
              for field, owner, version in conflicts]
    if len(causes) == 1:
        listed = f"1 conflict: {causes[0].message}: {causes[0].field}"
    else:
        listed = f"{len(causes)} conflicts: " + "\n".join(
            f"- {cause.message}: {cause.field}" for cause in causes)
    return errors.Conflict(
        f"Apply failed with {listed}\nApply with force (force=true, kubectl apply --server-side "
        "--force-conflicts) to take these fields over, or leave them out of your configuration",
        group=group, resource=resource, name=name, causes=causes)
