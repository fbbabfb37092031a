"""A label selector as kubectl takes it (``app=db,tier!=cache,env in (a,b),!legacy``), turned
into the LabelSelector object a Notification's ``spec.selector`` holds."""

from __future__ import annotations

import re
from typing import Any

_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<not>!?)\s*(?P<key>[^\s!=(),]+)$")


def label_selector(text: str) -> dict[str, Any]:
    """The LabelSelector `text` means; ValueError naming the requirement that does not parse."""
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for requirement in _requirements(text):
        if match := _SET.match(requirement):
            values = [v.strip() for v in match["values"].split(",") if v.strip()]
            expressions.append({"key": match["key"], "operator": match["op"].capitalize()
                                if match["op"] == "in" else "NotIn", "values": values})
        elif match := _EQUALITY.match(requirement):
            if match["op"] == "!=":
                expressions.append({"key": match["key"], "operator": "NotIn",
                                    "values": [match["value"]]})
            elif match_labels.get(match["key"], match["value"]) != match["value"]:
                raise ValueError(f"selector {text!r}: {match['key']} is required to equal "
                                 "two different values")
            else:
                match_labels[match["key"]] = match["value"]
        elif match := _EXISTS.match(requirement):
            expressions.append({"key": match["key"],
                                "operator": "DoesNotExist" if match["not"] else "Exists"})
        else:
            raise ValueError(f"selector {text!r}: cannot parse {requirement!r}; use key=value, "
                             "key!=value, key in (a,b), key notin (a,b), key or !key")
    selector: dict[str, Any] = {}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def _requirements(text: str) -> list[str]:
    """`text` split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    if depth != 0 or any(not part for part in parts):
        raise ValueError(f"selector {text!r}: unbalanced parentheses or an empty requirement")
    return parts
