"""kubectl notify verify-window: how a snapshot time is read (the interval its last digit allows,
widened by the clock skew), which window each kind has, the command line, and the command
against a fake server (its report and exit code)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from kubectl_notify.cli import VerifyWindow, parse
from kubectl_notify.errors import FAILED, SUCCEEDED, PluginError, UsageError
from kubectl_notify.windows import parse_time, verify, window_of
from tests.unit.test_kubectl_notify_commands import API, FakeServer, run

WINDOW = {"quiescedTime": "2026-12-01T12:00:01.214Z", "releaseRequestedTime":
          "2026-12-01T12:00:38.020Z", "releaseTime": "2026-12-01T12:00:38.301Z",
          "unquiescedTime": "2026-12-01T12:00:39.012Z"}


def notification(**window: str) -> dict[str, Any]:
    return {"kind": "Notification", "metadata": {"name": "pg-snap"},
            "status": {"phase": "Succeeded", "window": window}}


def inside(time: str, skew: float = 0.0) -> bool:
    return verify(window_of("notification", notification(**WINDOW)), parse_time(time),
                  timedelta(seconds=skew)).inside


def test_a_whole_second_is_inside_only_if_all_of_it_is() -> None:
    assert not inside("2026-12-01T12:00:01Z")  # 12:00:01.000 is before 01.214
    assert inside("2026-12-01T12:00:02Z")
    assert inside("2026-12-01T12:00:37Z")  # to 38.000, before 38.301
    assert not inside("2026-12-01T12:00:38Z")  # to 39.000, after 38.301
    assert inside("2026-12-01T12:00:38.2Z")  # 38.2 to 38.3
    assert not inside("2026-12-01T12:00:38.3Z")  # 38.3 to 38.4


def test_the_clock_skew_widens_each_time_on_both_sides() -> None:
    assert inside("2026-12-01T12:00:02Z", skew=0.5)
    assert not inside("2026-12-01T12:00:02Z", skew=1.0)
    assert not inside("2026-12-01T12:00:37Z", skew=0.5)


def test_an_offset_is_honoured() -> None:
    assert inside("2026-12-01T13:00:05+01:00") and not inside("2026-12-01T12:00:05+01:00")


@pytest.mark.parametrize("text", ["2026-12-01 12:00:05Z", "2026-12-01T12:00:05", "yesterday",
                                  "2026-12-01T12:00:05.1234567Z"])
def test_a_time_that_is_not_rfc3339_is_a_usage_error_naming_it(text: str) -> None:
    with pytest.raises(UsageError, match="is not an RFC 3339 time"):
        parse_time(text)


def test_a_podnotifier_window_ends_when_its_release_was_requested() -> None:
    record = {"metadata": {"name": "mysql-0-lock-4fj2k"}, "status": {
        "heldTime": "2026-12-01T12:00:00.500Z", "releaseRequestedTime":
        "2026-12-01T12:00:10.000Z", "releasedTime": "2026-12-01T12:00:11.000Z"}}
    window = window_of("podnotifier", record)
    assert (window.start.text, window.end.text) == ("2026-12-01T12:00:00.500Z",
                                                    "2026-12-01T12:00:10.000Z")


def test_a_window_that_has_not_ended_is_not_verified() -> None:
    with pytest.raises(PluginError, match=r"has no status.window.releaseTime: its window has "
                                          r"not ended \(release it first\)") as raised:
        window_of("notification", notification(quiescedTime=WINDOW["quiescedTime"]))
    assert raised.value.exit_code == FAILED


def test_the_command_line() -> None:
    command = parse(["verify-window", "notification/pg-snap", "2026-12-01T12:00:05Z",
                     "2026-12-01T12:00:06Z", "--clock-skew", "500ms", "-n", "prod"])
    assert command.command == VerifyWindow("notifications", "pg-snap", (
        "2026-12-01T12:00:05Z", "2026-12-01T12:00:06Z"), 0.5)
    assert command.globals.namespace == "prod"
    with pytest.raises(UsageError, match="give notification/NAME or podnotifier/NAME"):
        parse(["verify-window", "pod/db-0", "2026-12-01T12:00:05Z"])


async def test_the_command_reports_each_time_and_fails_if_any_is_outside() -> None:
    server = FakeServer({("GET", f"{API}/notifications/pg-snap"): httpx.Response(
        200, json=notification(**WINDOW))})
    code, out = await run(server, VerifyWindow("notifications", "pg-snap", (
        "2026-12-01T12:00:05Z", "2026-12-01T12:00:38Z")))
    assert code == FAILED
    assert out.splitlines() == [
        "window of notification/pg-snap: 2026-12-01T12:00:01.214Z to 2026-12-01T12:00:38.301Z "
        "(37.087s; status.window.quiescedTime to status.window.releaseTime, the server's clock)",
        "each time is taken as the whole interval its last digit allows (whole seconds: a "
        "second), widened by 0s of clock skew on each side; inside only if all of it is",
        "2026-12-01T12:00:05Z  inside: 3.786s after it began, 32.301s before it ended",
        "2026-12-01T12:00:38Z  OUTSIDE: may lie 0.699s after the window ended"]
    code, _ = await run(server, VerifyWindow("notifications", "pg-snap",
                                             ("2026-12-01T12:00:05Z",)))
    assert code == SUCCEEDED
