"""YAML request bodies, turned into JSON text for the one guarded JSON reader.

kube-apiserver accepts ``application/yaml`` wherever it accepts JSON, converting the YAML to
JSON first (sigs.k8s.io/yaml). This module does the same, and then every guard of
``apiserver.api.json_input`` (UTF-8, depth, no NaN, no lone surrogates, duplicate fields, big
numbers) applies to YAML bodies unchanged:

- it walks PyYAML's event stream with an explicit stack, so nesting depth is bounded before
  anything recursive runs (PyYAML's composer recurses once per level);
- aliases are refused, so a small document cannot expand into a huge one ("billion laughs");
- mapping keys are written as they come, duplicates included, so the JSON reader reports a
  repeated field under ``fieldValidation`` exactly as it does for JSON;
- scalars resolve as YAML 1.1 does (``1`` an integer, ``true`` a boolean, ``~`` null); values
  JSON has no type for (timestamps, binary, other tags) stay the strings they were written as.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from apiserver import errors
from apiserver.api.json_input import MAX_DEPTH, utf8_text

_CONSTRUCTED = frozenset({"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool",
                          "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def to_json(raw: bytes, *, what: str, max_depth: int = MAX_DEPTH) -> str:
    """The one YAML document in `raw` (UTF-8) as JSON text; 400 saying why for anything else."""
    text = utf8_text(raw, what)
    try:
        return _Emitter(what, max_depth).emit(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise errors.bad_request(f"{what} is not valid YAML: {_problem(error)}") from None


def _problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{error.problem}{where}"
    return type(error).__name__


class _Emitter:
    def __init__(self, what: str, max_depth: int) -> None:
        self._what = what
        self._max_depth = max_depth

    def emit(self, events: Any) -> str:
        out: list[str] = []
        stack: list[list[Any]] = []
        """Per open collection: [is_mapping, items written, expecting a key]."""
        documents = 0
        for event in events:
            if isinstance(event, yaml.AliasEvent):
                raise errors.bad_request(
                    f"{self._what}: YAML aliases are not accepted; write the value out")
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise errors.bad_request(f"{self._what} must be one YAML document")
                continue
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                out.append("}" if stack.pop()[0] else "]")
                self._after_value(stack, out)
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            self._before(stack, out, event)
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                if len(stack) >= self._max_depth:
                    raise errors.bad_request(
                        f"{self._what} is nested more than {self._max_depth} levels deep")
                mapping = isinstance(event, yaml.MappingStartEvent)
                out.append("{" if mapping else "[")
                stack.append([mapping, 0, True])
                continue
            assert isinstance(event, yaml.ScalarEvent)
            if stack and stack[-1][0] and stack[-1][2]:
                out.append(json.dumps(event.value) + ":")
                stack[-1][2] = False
                continue
            out.append(json.dumps(_scalar(event)))
            self._after_value(stack, out)
        if documents == 0 or not out:
            raise errors.bad_request(f"{self._what} is empty")
        return "".join(out)

    def _before(self, stack: list[list[Any]], out: list[str], event: Any) -> None:
        """A separator before an item, and refuse a collection where a key must be."""
        if not stack:
            return
        top = stack[-1]
        if top[0] and top[2]:
            if not isinstance(event, yaml.ScalarEvent):
                raise errors.bad_request(
                    f"{self._what}: a mapping key must be a string, not a collection")
            if top[1]:
                out.append(",")
        elif not top[0] and top[1]:
            out.append(",")

    @staticmethod
    def _after_value(stack: list[list[Any]], out: list[str]) -> None:
        if stack:
            stack[-1][1] += 1
            stack[-1][2] = True


def _scalar(event: yaml.ScalarEvent) -> Any:
    """The scalar's value: typed as YAML resolves it when JSON has that type, else its text."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
    if tag in _CONSTRUCTED:
        node = yaml.ScalarNode(tag, event.value, style=event.style)
        return _CONSTRUCTOR.construct_object(node)
    return event.value
