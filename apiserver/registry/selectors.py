"""Kubernetes label and field selectors: parsing and matching.

Label selectors take the full set-based syntax: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a,b)``, ``k`` and ``!k``, comma-separated; ``!=`` and ``notin`` also match objects
without the label, as in Kubernetes. A metav1.LabelSelector object (``matchLabels``,
``matchExpressions``: a workload's ``spec.selector``, a Notification's) becomes the same
requirements (`LabelSelector.from_object`), and `str` writes either back in the string syntax.
Field selectors take ``f=v``, ``f==v`` and ``f!=v`` on the
resource's selectable fields; backslash escapes in values are not supported (none of the
selectable fields can hold ``,`` or ``=``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from apiserver.api.validation import label_value_errors, qualified_name_errors
from apiserver.registry.errors import InvalidSelector

_TOKEN = re.compile(r"\s*(?:(?P<op>!=|==|=|!|\(|\)|,)|(?P<word>[^\s!=(),]+))")
_SET_OPERATORS = ("in", "notin")
_OBJECT_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
"""A matchExpressions operator -> the Requirement operator."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """One of ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!exists``."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return present and labels[self.key] in self.values
            case _:  # "!=" and "notin"
                return not present or labels[self.key] not in self.values

    def __str__(self) -> str:
        values = ",".join(sorted(self.values))
        match self.operator:
            case "exists":
                return self.key
            case "!exists":
                return f"!{self.key}"
            case "in" | "notin":
                return f"{self.key} {self.operator} ({values})"
            case _:  # "=" and "!=": one value
                return f"{self.key}{self.operator}{values}"


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(requirement.matches(labels or {}) for requirement in self.requirements)

    def __str__(self) -> str:
        """The selector in the string syntax (``?labelSelector=``): label values cannot hold
        ``,``, ``(`` or spaces, so they are written unquoted."""
        return ",".join(str(requirement) for requirement in self.requirements)

    @classmethod
    def from_object(cls, selector: Mapping[str, Any]) -> LabelSelector:
        """A metav1.LabelSelector as Kubernetes reads it (LabelSelectorAsSelector): every
        ``matchLabels`` pair (sorted by key) and every ``matchExpressions`` entry must hold;
        ``{}`` matches every object. The object is one kube-apiserver or the API definition
        validated; an operator other than In, NotIn, Exists, DoesNotExist is InvalidSelector."""
        requirements = [Requirement(key, "=", frozenset({value}))
                        for key, value in sorted((selector.get("matchLabels") or {}).items())]
        for expression in selector.get("matchExpressions") or []:
            operator = expression.get("operator")
            if operator not in _OBJECT_OPERATORS:
                raise InvalidSelector("selector.matchExpressions", (
                    f"unknown operator {operator!r} for key {expression.get('key')!r}: use "
                    f"{', '.join(_OBJECT_OPERATORS)}"))
            requirements.append(Requirement(expression["key"], _OBJECT_OPERATORS[operator],
                                            frozenset(expression.get("values") or ())))
        return cls(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) != self.negated


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(requirement.matches(obj) for requirement in self.requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value at a dotted path, as a field selector sees it ("" if absent)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    return "" if value is None else str(value)


def parse_label_selector(text: str) -> LabelSelector:
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    position = 0
    while position < len(tokens):
        requirement, position = _requirement(tokens, position)
        requirements.append(requirement)
        if position < len(tokens):
            if tokens[position] != ("op", ","):
                raise _label_error(
                    f"expected ',' after a requirement, found {tokens[position][1]!r}"
                )
            position += 1
            if position == len(tokens):
                raise _label_error("a requirement must follow ','")
    return LabelSelector(tuple(requirements))


def parse_field_selector(text: str, supported: Collection[str]) -> FieldSelector:
    if not text.strip():
        return FieldSelector()
    requirements = []
    for term in text.split(","):
        match = re.fullmatch(r"\s*([^!=\s]+)\s*(!=|==|=)(.*)", term)
        if match is None:
            raise InvalidSelector(
                "fieldSelector",
                f"invalid field selector term {term.strip()!r}: use field=value or field!=value",
            )
        field, operator, value = match.group(1), match.group(2), match.group(3).strip()
        if field not in supported:
            listed = ", ".join(f'"{name}"' for name in supported)
            raise InvalidSelector(
                "fieldSelector",
                f'"{field}" is not a known field selector: only {listed}',
            )
        requirements.append(FieldRequirement(field, value, operator == "!="))
    return FieldSelector(tuple(requirements))


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens = []
    text = text.strip()
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _label_error(f"unexpected character at position {position}")
        kind = "op" if match.group("op") else "word"
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def _requirement(tokens: list[tuple[str, str]], position: int) -> tuple[Requirement, int]:
    def peek(at: int) -> tuple[str, str]:
        return tokens[at] if at < len(tokens) else ("end", "")

    if peek(position) == ("op", "!"):
        kind, key = peek(position + 1)
        if kind != "word":
            raise _label_error("expected a label key after '!'")
        return Requirement(_key(key), "!exists"), position + 2
    kind, key = peek(position)
    if kind != "word":
        raise _label_error(f"expected a label key, found {key or 'the end'!r}")
    key = _key(key)
    kind, operator = peek(position + 1)
    if kind == "end" or (kind, operator) == ("op", ","):
        return Requirement(key, "exists"), position + 1
    if operator in ("=", "==", "!="):
        equality = "!=" if operator == "!=" else "="
        kind, value = peek(position + 2)
        if kind == "word":
            return Requirement(key, equality, frozenset({_value(value)})), position + 3
        return Requirement(key, equality, frozenset({""})), position + 2
    if kind == "word" and operator in _SET_OPERATORS:
        return _set_requirement(tokens, key, operator, position + 2)
    raise _label_error(f"unknown operator {operator!r} after {key!r}: use =, !=, in or notin")


def _set_requirement(
    tokens: list[tuple[str, str]], key: str, operator: str, position: int
) -> tuple[Requirement, int]:
    if position >= len(tokens) or tokens[position] != ("op", "("):
        raise _label_error(f"expected '(' after {operator!r}")
    values: set[str] = set()
    position += 1
    expect_value = True
    while position < len(tokens) and tokens[position] != ("op", ")"):
        kind, text = tokens[position]
        if expect_value and kind == "word":
            values.add(_value(text))
        elif expect_value or text != ",":
            raise _label_error(f"unexpected {text!r} in the value list of {key!r}")
        expect_value = not expect_value
        position += 1
    if position >= len(tokens):
        raise _label_error(f"missing ')' after the values of {key!r}")
    if not values or expect_value:
        raise _label_error(f"the value list of {key!r} must hold values separated by ','")
    return Requirement(key, operator, frozenset(values)), position + 1


def _key(key: str) -> str:
    problems = qualified_name_errors(key)
    if problems:
        raise _label_error(f"invalid label key {key!r}: {'; '.join(problems)}")
    return key


def _value(value: str) -> str:
    problems = label_value_errors(value)
    if problems:
        raise _label_error(f"invalid label value {value!r}: {'; '.join(problems)}")
    return value


def _label_error(detail: str) -> InvalidSelector:
    return InvalidSelector("labelSelector", f"unable to parse requirement: {detail}")
