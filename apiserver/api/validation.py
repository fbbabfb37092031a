"""Kubernetes name and label syntax: DNS-1123 labels and subdomains, qualified names (label
keys, notifier names) and label values.

Each function returns why a value is not valid (one message per problem, worded as
``k8s.io/apimachinery/pkg/util/validation`` words it, without the regex), or an empty list if it
is. Callers put the messages into field errors or selector parse errors.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

DNS1123_LABEL_PROBLEM = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
)
DNS1123_SUBDOMAIN_PROBLEM = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com')"
)
LABEL_VALUE_PROBLEM = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or "
    "'12345')"
)


def _too_long(limit: int) -> str:
    return f"must be no more than {limit} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS-1123 label (a container name, a namespace)."""
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        return [_too_long(DNS1123_LABEL_MAX_LENGTH)]
    return [] if _DNS1123_LABEL.fullmatch(value) else [DNS1123_LABEL_PROBLEM]


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS-1123 subdomain (an object name)."""
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        return [_too_long(DNS1123_SUBDOMAIN_MAX_LENGTH)]
    return [] if _DNS1123_SUBDOMAIN.fullmatch(value) else [DNS1123_SUBDOMAIN_PROBLEM]


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a Kubernetes qualified name (label-key syntax: an optional DNS
    subdomain prefix and '/', then a name of at most 63 characters)."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "must be a name with an optional DNS subdomain prefix and '/', "
            "e.g. 'quiesce' or 'example.com/quiesce'"
        ]
    errors: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > DNS1123_SUBDOMAIN_MAX_LENGTH:
            errors.append(f"prefix part {_too_long(DNS1123_SUBDOMAIN_MAX_LENGTH)}")
        elif not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            errors.append(
                "prefix part must be a lowercase DNS subdomain: lower case alphanumeric "
                "characters, '-' or '.', starting and ending with an alphanumeric character "
                "(e.g. 'example.com')"
            )
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errors.append(f"name part {_too_long(QUALIFIED_NAME_MAX_LENGTH)}")
    elif not _QUALIFIED_NAME_PART.fullmatch(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or "
            "'123-abc')"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a label value (empty, or at most 63 characters of alphanumerics,
    '-', '_' and '.', starting and ending with an alphanumeric)."""
    errors = []
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        errors.append(_too_long(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(LABEL_VALUE_PROBLEM)
    return errors
