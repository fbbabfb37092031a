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
  JSON has no type for (timestamps, binary, other tags) stay the strings they were written as;
- a number is written into the JSON text as a JSON number, so that the JSON reader's rule for
  numbers applies to YAML too: beyond 64 bits an integer is read as the nearest float, and past
  the float range as infinity, which every field refuses (422 naming it). Its value is found in
  time linear in its length (a decimal integer is copied as it is written; hexadecimal, octal
  and binary digits convert in linear time; a sexagesimal one too long for 64 bits is summed as
  a float), so no integer conversion can reach Python's digit limit or take quadratic time;
- a scalar with an explicit tag (``!!int abc``) must be a valid value of that tag, else 400
  naming its line and column.

The events come from libyaml (PyYAML's C parser): the pure-Python one takes seconds for a
large body.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import yaml

from apiserver import errors
from apiserver.api.field_errors import show
from apiserver.api.json_input import MAX_DEPTH, utf8_text

_STR, _NULL, _BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{name}"
                                   for name in ("str", "null", "bool", "int", "float"))
_ACCEPTED_AS = {_NULL: (_NULL,), _BOOL: (_BOOL,), _INT: (_INT,), _FLOAT: (_FLOAT, _INT)}
"""The tags JSON has a type for, and the plain scalars each accepts when it is explicit
(``!!float 1`` is a float)."""
_IMPLICIT = yaml.resolver.Resolver.yaml_implicit_resolvers
_STARTS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_ENDS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_BASES = {"0b": 2, "0x": 16}
"""YAML 1.1 integer prefixes: ``0b101``, ``0x1f``; another integer starting with 0 is octal
(``017``)."""
_SEXAGESIMAL_PARTS = 12
_SEXAGESIMAL_FIRST_DIGITS = 19
"""A sexagesimal integer of more parts, or with more digits in its first part, does not fit in
64 bits (60**11 > 2**63): it is summed as a float."""


def to_json(raw: bytes, *, what: str, max_depth: int = MAX_DEPTH) -> str:
    """The one YAML document in `raw` (UTF-8) as JSON text; 400 saying why for anything else."""
    text = utf8_text(raw, what)
    try:
        return _Emitter(what, max_depth).emit(yaml.parse(text, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as error:
        raise errors.bad_request(f"{what} is not valid YAML: {_problem(error)}") from None


def _problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        return f"{error.problem}{_at(error.problem_mark)}"
    return type(error).__name__


def _at(mark: Any) -> str:
    """Where a mark of PyYAML's (Python or libyaml's; lines and columns from 0) points."""
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


class _Emitter:
    def __init__(self, what: str, max_depth: int) -> None:
        self._what = what
        self._max_depth = max_depth

    def emit(self, events: Iterable[Any]) -> str:
        """The JSON text of the events; one pass, a few steps per event (a large body has
        hundreds of thousands)."""
        out: list[str] = []
        append = out.append
        stack: list[list[bool]] = []
        """Per open collection: [a mapping, its next node is a key, nothing written in it]."""
        documents = 0
        for event in events:
            kind = type(event)
            if kind is yaml.ScalarEvent or kind in _STARTS:
                if stack:
                    top = stack[-1]
                    if top[1]:
                        if kind is not yaml.ScalarEvent:
                            raise errors.bad_request(
                                f"{self._what}: a mapping key must be a string, not a "
                                "collection")
                        append(json.dumps(event.value) + ":" if top[2]
                               else "," + json.dumps(event.value) + ":")
                        top[1] = top[2] = False
                        continue
                    if top[0]:
                        top[1] = True
                    elif top[2]:
                        top[2] = False
                    else:
                        append(",")
                if kind is yaml.ScalarEvent:
                    append(_scalar(event, self._what))
                    continue
                if len(stack) >= self._max_depth:
                    raise errors.bad_request(
                        f"{self._what} is nested more than {self._max_depth} levels deep")
                mapping = kind is yaml.MappingStartEvent
                append("{" if mapping else "[")
                stack.append([mapping, mapping, True])
            elif kind in _ENDS:
                append("}" if stack.pop()[0] else "]")
            elif kind is yaml.AliasEvent:
                raise errors.bad_request(
                    f"{self._what}: YAML aliases are not accepted; write the value out")
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise errors.bad_request(f"{self._what} must be one YAML document")
        if documents == 0 or not out:
            raise errors.bad_request(f"{self._what} is empty")
        return "".join(out)


def _scalar(event: yaml.ScalarEvent, what: str) -> str:
    """The scalar as JSON text: typed as YAML resolves it when JSON has that type, else its
    text as a string."""
    value = event.value
    tag = event.tag
    if tag is None and event.implicit[0] and value.isascii() and value.isdigit() and (
            value[0] != "0"):
        return value  # the commonest number, [1-9][0-9]*, without the resolvers' patterns
    if tag is None or tag == "!":
        tag = _resolved(value) if event.implicit[0] else _STR
    elif tag in _ACCEPTED_AS:
        plain = _resolved(value)
        if plain not in _ACCEPTED_AS[tag]:
            name = tag.rpartition(":")[2]
            raise errors.bad_request(
                f"{what}: {show(value)}{_at(event.start_mark)} is not a valid {name}; write a "
                f"valid one or leave out the !!{name} tag")
        tag = plain
    if tag == _STR:
        return json.dumps(value)
    if tag == _NULL:
        return "null"
    if tag == _BOOL:
        return "true" if yaml.constructor.SafeConstructor.bool_values[value.lower()] else "false"
    if tag == _INT:
        return _integer(value.replace("_", "")) or json.dumps(value)
    if tag == _FLOAT:
        return _float(value.replace("_", "").lower())
    return json.dumps(value)


def _resolved(value: str) -> str:
    """The tag YAML 1.1 gives a plain scalar (PyYAML's implicit resolvers, looked up by the
    first character as PyYAML does)."""
    for tag, pattern in _IMPLICIT.get(value[:1], ()):
        if pattern.match(value):
            return str(tag)
    return _STR


def _integer(text: str) -> str | None:
    """A YAML 1.1 integer (without underscores) as a JSON number; None if it has no digits
    (``0x_``: a string, as Go's YAML reads it)."""
    sign = ""
    if text[0] in "+-":
        sign, text = ("-" if text[0] == "-" else ""), text[1:]
    if text[0] != "0":
        if ":" in text:
            return _sexagesimal(sign, text.split(":"))
        return sign + text  # decimal, [1-9][0-9]*: already a JSON number
    if text == "0":
        return "0"
    base = _BASES.get(text[:2], 8)
    digits = text[1:] if base == 8 else text[2:]
    if not digits:
        return None
    return _number(int(sign + digits, base))  # a power-of-two base: linear time


def _sexagesimal(sign: str, parts: list[str]) -> str:
    """``1:30:00`` (base 60): summed exactly while it may fit in 64 bits, else as a float."""
    if len(parts) <= _SEXAGESIMAL_PARTS and len(parts[0]) <= _SEXAGESIMAL_FIRST_DIGITS:
        value = 0
        for part in parts:
            value = value * 60 + int(part)
        return _number(-value if sign else value)
    approximate = 0.0
    for part in parts:
        approximate = approximate * 60 + float(part)
    return _float_number(-approximate if sign else approximate)


def _number(value: int) -> str:
    """An integer as a JSON number: in decimal when it has at most 64 bits (the JSON reader
    decides whether it fits in an int64), else the float it reads as."""
    if value.bit_length() <= 64:
        return str(value)
    try:
        return _float_number(float(value))
    except OverflowError:
        return _float_number(math.inf if value > 0 else -math.inf)


def _float(text: str) -> str:
    """A YAML 1.1 float (lower-cased, without underscores; maybe sexagesimal, ``1:30.5``) as
    JSON text: ``.inf`` and ``.nan`` as the constants the JSON reader refuses, any other as a
    JSON number."""
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text in (".inf", ".nan"):
        return json.dumps(sign * float(text[1:]))
    *whole, fraction = text.split(":")
    value = 0.0
    for part in whole:
        value = value * 60 + float(part)
    return _float_number(sign * (value * 60 + float(fraction)))


def _float_number(value: float) -> str:
    """A float as a JSON number; one past the float range as a literal the JSON reader reads
    as infinity, as it reads ``1e400``."""
    if math.isinf(value):
        return "-1e999" if value < 0 else "1e999"
    return repr(value)
