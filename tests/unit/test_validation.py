"""Kubernetes name and label syntax (api/validation.py), the one place it is defined."""

from __future__ import annotations

from pathlib import Path

import pytest

from apiserver.api.validation import (
    DNS1123_LABEL_PROBLEM,
    DNS1123_SUBDOMAIN_PROBLEM,
    LABEL_VALUE_PROBLEM,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

APISERVER = Path(__file__).resolve().parents[2] / "apiserver"


@pytest.mark.parametrize("value", ["a", "db", "db-0", "0", "a" * 63, "1-2-3"])
def test_dns1123_labels_accepted(value: str) -> None:
    assert dns1123_label_errors(value) == []


@pytest.mark.parametrize("value", ["", "Db", "-db", "db-", "db.0", "db_0", "é"])
def test_dns1123_labels_rejected(value: str) -> None:
    assert dns1123_label_errors(value) == [DNS1123_LABEL_PROBLEM]


def test_dns1123_label_length() -> None:
    assert dns1123_label_errors("a" * 64) == ["must be no more than 63 characters"]


@pytest.mark.parametrize("value", ["a", "example.com", "db-0.quiesce", "a" * 253,
                                   ".".join(["a" * 63] * 3) + ".b"])
def test_dns1123_subdomains_accepted(value: str) -> None:
    assert dns1123_subdomain_errors(value) == []


@pytest.mark.parametrize("value", ["", "Example.com", "-a", "a-", "a..b", ".a", "a.", "a_b"])
def test_dns1123_subdomains_rejected(value: str) -> None:
    assert dns1123_subdomain_errors(value) == [DNS1123_SUBDOMAIN_PROBLEM]


def test_dns1123_subdomain_length() -> None:
    assert dns1123_subdomain_errors("a" * 254) == ["must be no more than 253 characters"]


@pytest.mark.parametrize("value", ["", "a", "MyValue", "my_value", "12345", "a.b-c_d", "x" * 63])
def test_label_values_accepted(value: str) -> None:
    assert label_value_errors(value) == []


@pytest.mark.parametrize("value", ["-x", "x-", "_x", "a b", "a,b", "a)", "a/b", "é"])
def test_label_values_rejected(value: str) -> None:
    assert label_value_errors(value) == [LABEL_VALUE_PROBLEM]


def test_label_value_too_long_and_malformed_reports_both() -> None:
    assert label_value_errors("x" * 64) == ["must be no more than 63 characters"]
    assert label_value_errors("-" * 64) == ["must be no more than 63 characters",
                                            LABEL_VALUE_PROBLEM]


@pytest.mark.parametrize("value", ["app", "App.Name_1", "example.com/app", "a" * 63,
                                   f"{'a' * 253}/x"])
def test_qualified_names_accepted(value: str) -> None:
    assert qualified_name_errors(value) == []


def test_qualified_name_reports_prefix_and_name_problems_together() -> None:
    problems = qualified_name_errors("Example.com/-x")
    assert len(problems) == 2
    assert problems[0].startswith("prefix part must be a lowercase DNS subdomain")
    assert problems[1].startswith("name part must consist of alphanumeric characters")


def test_the_syntax_is_defined_once() -> None:
    """The label-value and qualified-name patterns appear in validation.py and nowhere else in
    the server (they used to be copied into four modules)."""
    holders = sorted(path.relative_to(APISERVER).as_posix()
                     for path in APISERVER.rglob("*.py")
                     if "A-Za-z0-9_." in path.read_text() or "[-a-z0-9]*" in path.read_text())
    assert holders == ["api/validation.py"]
