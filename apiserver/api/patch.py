"""Patch documents, as kube-apiserver applies them to a custom resource: pure logic, no I/O.

- ``application/merge-patch+json``: RFC 7386 JSON merge patch (``merge_patch``).
- ``application/json-patch+json``: RFC 6902 JSON patch (``json_patch``): add, remove, replace,
  move, copy and test, with RFC 6901 JSON pointers; bounded as kube-apiserver bounds it (at most
  ``MAX_JSON_PATCH_OPERATIONS`` operations, 413) and in what it builds: the patched object may
  not grow past ``MAX_PATCHED_BYTES`` (413), so copy operations cannot double it with each
  operation, nor nest deeper than a body may (``json_input.MAX_DEPTH``, 422). Each operation
  then costs at most time linear in its own size and the patched object's.
- ``application/strategic-merge-patch+json``: applied as a merge patch (maps merge the same way;
  the objects here have no merge-keyed lists), after dropping the ordering directives kubectl
  adds (``$setElementOrder/...``, ``$retainKeys``); any other ``$`` directive is refused.
- ``application/apply-patch+yaml``: server-side apply (``apiserver.api.managed_fields``); the
  body is YAML or JSON, read by ``load_apply_config`` through the guarded YAML and JSON readers.

Only ``metadata.labels`` and ``metadata.annotations`` of a stored object may change through a
patch (``check_mutable``); a changed ``metadata.resourceVersion`` or ``metadata.uid`` is a
precondition, checked by the caller against the stored object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

from apiserver import errors
from apiserver.api import json_input, yaml_input
from apiserver.api.field_errors import FieldError, show
from apiserver.api.json_input import as_printable
from apiserver.api.validation import label_value_errors, qualified_name_errors
from apiserver.errors import Cause


class PatchType(Enum):
    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


PATCH_MEDIA_TYPES = tuple(kind.value for kind in PatchType)
MUTABLE_METADATA = ("labels", "annotations")
"""The members of metadata a patch may change."""
SERVER_METADATA = ("resourceVersion", "managedFields")
"""Members of metadata the server keeps: resourceVersion is a precondition, managedFields is
recorded by the server for each write."""
MAX_ANNOTATIONS_BYTES = 256 * 1024
"""kube-apiserver's bound on the total size of an object's annotations."""
RESERVED_LABEL_PREFIX = "notifier.x-k8s.io/"
MAX_JSON_PATCH_OPERATIONS = 10_000
"""kube-apiserver's bound on the operations of one JSON patch (k8s.io/apiserver)."""
MAX_PATCHED_BYTES = 1024 * 1024
"""Bound on the size (JSON) of an object while a JSON patch applies to it, counted as its size
before plus that of every value an operation adds or copies (kube-apiserver bounds the bytes
copy operations add alike, ``JSONPatchMaxCopyBytes``). A stored object is at most 256 KiB."""
_STRATEGIC_ORDERING = ("$setElementOrder/", "$retainKeys")


def patch_type(content_type: str | None) -> PatchType:
    """The patch type a Content-Type names; 415 listing the supported ones otherwise."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    for kind in PatchType:
        if kind.value == media_type:
            return kind
    raise errors.unsupported_media_type(PATCH_MEDIA_TYPES)


def patch_options_invalid(field: str, reason: str, problem: str) -> errors.Invalid:
    """422 for a query parameter of a PATCH, worded as kube-apiserver's ValidatePatchOptions
    (the cause's message without the field, as Go's field errors)."""
    return errors.Invalid(f'PatchOptions.meta.k8s.io "" is invalid: {field}: {problem}',
                          group="meta.k8s.io", resource="PatchOptions",
                          causes=[Cause(reason, problem, field)])


def decode(kind: PatchType, raw: bytes) -> Any:
    """The patch document of a body: a JSON value (400 if it is none), or for apply the
    applied configuration (``load_apply_config``)."""
    if kind is PatchType.APPLY:
        return load_apply_config(raw)
    document = json_input.read(raw, what=f"the {kind.value} body").value
    if kind is PatchType.JSON:
        if not isinstance(document, list) or not all(isinstance(op, dict) for op in document):
            raise errors.bad_request(
                'a JSON patch must be a list of operations, e.g. [{"op": "add", "path": '
                '"/metadata/labels/tier", "value": "db"}]')
        if len(document) > MAX_JSON_PATCH_OPERATIONS:
            raise errors.request_entity_too_large(
                f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
                f"got {len(document)}; send the changes in several patches")
    elif not isinstance(document, dict):
        raise errors.bad_request(
            f'a {kind.value} patch must be a JSON object, e.g. {{"metadata": {{"labels": '
            '{"tier": "db"}}}')
    return document


def load_apply_config(raw: bytes) -> dict[str, Any]:
    """The object of an apply body (YAML, or JSON, which is YAML), read through the same guards
    as every body (apiserver.api.yaml_input, json_input); 400 if it is not one object."""
    what = "the apply configuration"
    document = json_input.read(yaml_input.to_json(raw, what=what), what=what).value
    if not isinstance(document, dict):
        raise errors.bad_request(
            f"{what} must be one object (apiVersion, kind, metadata, ...)")
    return document


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` merged into ``target`` (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_as_merge(patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch as the merge patch it means here: ordering directives dropped;
    400 for a directive that would mean something else (``$patch``, ``$deleteFromPrimitiveList``,
    ...)."""
    result: dict[str, Any] = {}
    for key, value in patch.items():
        if key.startswith(_STRATEGIC_ORDERING):
            continue
        if key.startswith("$"):
            raise errors.bad_request(
                f"strategic merge patch directive {errors.quoted(key)} is not supported by this "
                "server; send a JSON merge patch (application/merge-patch+json, kubectl patch "
                "--type merge)")
        result[key] = strategic_as_merge(value) if isinstance(value, dict) else value
    return result


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902: the operations applied in order to a copy of ``target``; 400 for a malformed
    operation, 422 for one that cannot apply (a missing path, a failed test), 413 past the
    bounds of the module docstring."""
    text = json.dumps(target)
    growth = _Growth(len(text), json_input.nesting_depth(text))
    document = json.loads(text)
    for index, operation in enumerate(operations):
        document = _apply_operation(document, operation, index, growth)
    return document


class _Growth:
    """Bounds on what a JSON patch builds: the patched object's size (its size before, plus
    every value added or copied, whatever is removed) and how deeply it may nest (an upper
    bound: a move adds the difference of its paths' lengths)."""

    def __init__(self, size: int, depth: int) -> None:
        self.size = size
        self.depth = depth

    def copy(self, value: Any, path: list[str], where: str) -> Any:
        """A copy of ``value`` to add at ``path`` (JSON text and back: fast, and it measures
        the copy), counted."""
        text = json.dumps(value)
        self.size += len(text)
        if self.size > MAX_PATCHED_BYTES:
            raise errors.request_entity_too_large(
                f"{where}: the patched object would be larger than {MAX_PATCHED_BYTES} bytes "
                "(its size before and every value added or copied); send a smaller patch")
        self.deepen(len(path) + json_input.nesting_depth(text), where)
        return json.loads(text)

    def deepen(self, depth: int, where: str) -> None:
        if depth > json_input.MAX_DEPTH:
            raise _unprocessable(f"{where}: the patched object would be nested more than "
                                 f"{json_input.MAX_DEPTH} levels deep")
        self.depth = max(self.depth, depth)


def _apply_operation(document: Any, operation: dict[str, Any], index: int, growth: _Growth
                     ) -> Any:
    op = operation.get("op")
    where = f"JSON patch operation {index}"
    if op not in ("add", "remove", "replace", "move", "copy", "test"):
        raise errors.bad_request(
            f"{where}: unsupported op {show(op)}; use add, remove, replace, move, copy or "
            "test")
    path = _pointer(operation, "path", where)
    where = f"{where} ({op} {show(operation['path'])})"
    if op in ("add", "replace", "test") and "value" not in operation:
        raise errors.bad_request(f'{where}: a "{op}" operation needs a "value"')
    if op == "add":
        return _add(document, path, growth.copy(operation["value"], path, where), where)
    if op == "remove":
        return _remove(document, path, where)[0]
    if op == "replace":
        document = _remove(document, path, where)[0]
        return _add(document, path, growth.copy(operation["value"], path, where), where)
    if op == "test":
        found = _get(document, path, where)
        if not json_equal(found, operation["value"]):
            raise _unprocessable(f"{where}: test failed: the value is {show(found)}, not "
                                 f"{show(operation['value'])}")
        return document
    source = _pointer(operation, "from", where)
    if op == "move":
        if path[:len(source)] == source and len(path) > len(source):
            raise _unprocessable(
                f"{where}: cannot move {show(operation['from'])} into its own child")
        growth.deepen(growth.depth + len(path) - len(source), where)
        document, value = _remove(document, source, where)
        return _add(document, path, value, where)
    return _add(document, path, growth.copy(_get(document, source, where), path, where), where)


def json_equal(left: Any, right: Any) -> bool:
    """Equality of JSON values (a boolean is not a number, as in Python it is)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right


def _pointer(operation: dict[str, Any], member: str, where: str) -> list[str]:
    """An RFC 6901 JSON pointer as its reference tokens; 400 if malformed."""
    text = operation.get(member)
    if not isinstance(text, str):
        raise errors.bad_request(f'{where}: "{member}" must be a JSON pointer string, e.g. '
                                 '"/metadata/labels/tier"')
    if text == "":
        return []
    if not text.startswith("/"):
        raise errors.bad_request(f'{where}: "{member}" {show(text)} must start with "/"')
    return [token.replace("~1", "/").replace("~0", "~") for token in text[1:].split("/")]


def _unprocessable(message: str) -> errors.Invalid:
    return errors.Invalid(message)


def _index(container: list[Any], token: str, where: str, *, end_ok: bool) -> int:
    if token == "-" and end_ok:
        return len(container)
    if not (token.isascii() and token.isdigit()) or (token.startswith("0") and token != "0"):
        raise _unprocessable(f"{where}: {show(token)} is not an array index")
    index = int(token) if len(token) <= len(str(len(container))) else len(container) + 1
    if index > len(container) or (index == len(container) and not end_ok):
        raise _unprocessable(f"{where}: index {show(token)} is out of range (length "
                             f"{len(container)})")
    return index


def _parent(document: Any, path: list[str], where: str) -> Any:
    parent = document
    for token in path[:-1]:
        if isinstance(parent, dict) and token in parent:
            parent = parent[token]
        elif isinstance(parent, list):
            parent = parent[_index(parent, token, where, end_ok=False)]
        else:
            raise _unprocessable(f"{where}: the path does not exist")
    if not isinstance(parent, dict | list):
        raise _unprocessable(f"{where}: the parent of the path is not an object or an array")
    return parent


def _get(document: Any, path: list[str], where: str) -> Any:
    if not path:
        return document
    parent = _parent(document, path, where)
    if isinstance(parent, list):
        return parent[_index(parent, path[-1], where, end_ok=False)]
    if path[-1] not in parent:
        raise _unprocessable(f"{where}: the path does not exist")
    return parent[path[-1]]


def _add(document: Any, path: list[str], value: Any, where: str) -> Any:
    if not path:
        return value
    parent = _parent(document, path, where)
    if isinstance(parent, list):
        parent.insert(_index(parent, path[-1], where, end_ok=True), value)
    else:
        parent[path[-1]] = value
    return document


def _remove(document: Any, path: list[str], where: str) -> tuple[Any, Any]:
    """(the document without the value at ``path``, that value)."""
    if not path:
        return None, document
    parent = _parent(document, path, where)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, path[-1], where, end_ok=False))
    if path[-1] not in parent:
        raise _unprocessable(f"{where}: the path does not exist")
    return document, parent.pop(path[-1])


def apply_patch(kind: PatchType, target: dict[str, Any], document: Any) -> Any:
    """``target`` patched by a decoded JSON, merge or strategic merge patch document."""
    if kind is PatchType.JSON:
        return json_patch(target, document)
    if kind is PatchType.STRATEGIC:
        document = strategic_as_merge(document)
    return merge_patch(target, document)


def _part(obj: Mapping[str, Any], key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else None


def check_mutable(kind: str, group: str, old: Mapping[str, Any], new: Any) -> None:
    """422 unless ``new`` differs from ``old`` only in metadata.labels and metadata.annotations
    (and the server's members of metadata), and those are valid; each cause names its field."""
    name = str(_part(_part(old, "metadata") or {}, "name") or "")
    if not isinstance(new, dict):
        raise errors.invalid(kind, group, name, [FieldError.invalid(
            "", new, "the patched object must be a JSON object").as_cause()])
    causes = [_immutable(path, value) for key in sorted(set(old) | set(new)) if key != "metadata"
              for path, value in changes(as_printable(key), old.get(key), new.get(key))]
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata")
    if not isinstance(new_meta, dict):
        causes.append(FieldError.invalid("metadata", new_meta, "must be an object").as_cause())
    else:
        causes += [_immutable(path, value) for key in sorted(set(old_meta) | set(new_meta))
                   if key not in MUTABLE_METADATA and key not in SERVER_METADATA
                   for path, value in changes(f"metadata.{as_printable(key)}", old_meta.get(key),
                                              new_meta.get(key))]
        causes += _label_problems(old_meta.get("labels") or {}, new_meta.get("labels"))
        causes += _annotation_problems(new_meta.get("annotations"))
    if causes:
        raise errors.invalid(kind, group, name, causes)


def changes(path: str, old: Any, new: Any) -> list[tuple[str, Any]]:
    """The field paths (``spec.notifier``) where ``new`` differs from ``old``, with the new
    values (None where removed): objects are compared member by member, anything else whole."""
    if json_equal(old, new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return [found for key in sorted(set(old) | set(new))
                for found in changes(f"{path}.{as_printable(key)}", old.get(key), new.get(key))]
    return [(path, new)]


def _immutable(field: str, value: Any) -> Cause:
    return FieldError.invalid(field, value, "field is immutable; only metadata.labels and "
                                            "metadata.annotations may change").as_cause()


def _string_map_problem(field: str, value: Any) -> Cause | None:
    if value is None or (isinstance(value, dict)
                         and all(isinstance(item, str) for item in value.values())):
        return None
    return FieldError.invalid(field, value, "must be a map of string keys to string values"
                              ).as_cause()


def _label_problems(old: Mapping[str, Any], new: Any) -> list[Cause]:
    problem = _string_map_problem("metadata.labels", new)
    if problem:
        return [problem]
    new = new or {}
    causes = []
    for key in sorted(set(old) | set(new)):
        field = f"metadata.labels[{as_printable(key)}]"
        if key.startswith(RESERVED_LABEL_PREFIX):
            if old.get(key) != new.get(key):
                causes.append(FieldError.invalid(field, new.get(key), (
                    f"the {RESERVED_LABEL_PREFIX} label prefix is reserved for the server; "
                    "leave these labels as they are")).as_cause())
            continue
        if key not in new:
            continue
        for message in qualified_name_errors(key) + label_value_errors(new[key]):
            causes.append(FieldError.invalid(field, new[key], message).as_cause())
    return causes


def _annotation_problems(annotations: Any) -> list[Cause]:
    problem = _string_map_problem("metadata.annotations", annotations)
    if problem:
        return [problem]
    annotations = annotations or {}
    causes = [FieldError.invalid(f"metadata.annotations[{as_printable(key)}]", key, message
                                 ).as_cause()
              for key in sorted(annotations) for message in qualified_name_errors(key)]
    size = sum(len(key) + len(value) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        causes.append(Cause("FieldValueTooLong", "Too long: may not be "
                            f"more than {MAX_ANNOTATIONS_BYTES} bytes (they are {size})",
                            "metadata.annotations"))
    return causes
