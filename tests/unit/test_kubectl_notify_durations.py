"""The plugin's own duration rules (it ships without the server) give the server's answers:
the Go duration syntax flags and --wait share, and the DURATION column."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.api.tables import run_length
from apiserver.config import parse_duration as server_parse_duration
from kubectl_notify.durations import format_duration, parse_duration


@given(st.floats(min_value=0, max_value=20 * 365 * 86400, allow_nan=False))
def test_format_duration_is_the_servers_duration_column(seconds: float) -> None:
    assert format_duration(seconds) == run_length(seconds)


@pytest.mark.parametrize("text", ["500ms", "30s", "1m30s", "2h", "1.5m", ".5s", "0", "1h2m3s4ms"])
def test_go_durations_parse_as_the_server_parses_them(text: str) -> None:
    assert parse_duration(text) == server_parse_duration(text)


def outcome(parse: Callable[[str], float], text: str) -> float | None:
    try:
        return parse(text)
    except ValueError:
        return None


@given(st.text(alphabet="0123456789.mhs", max_size=8).filter(
    lambda text: not re.fullmatch(r"\d+(\.\d+)?", text)))  # bare seconds: the plugin's own
def test_any_text_parses_or_fails_as_the_server_parses_it(text: str) -> None:
    assert outcome(parse_duration, text) == outcome(server_parse_duration, text)
