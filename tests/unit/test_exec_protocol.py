"""Exec channel protocol: frames, output tails and exit statuses, on byte fixtures."""

from __future__ import annotations

import json

import pytest

from apiserver.notifier.exec_protocol import (
    Channel,
    ExecReason,
    OutputTail,
    ProtocolError,
    classify_failure,
    interpret_status,
    parse_frame,
    runtime_detail,
    status_from_body,
)

# What kube-apiserver's stream translator writes for `exit 3` (codeExitToStatusError).
NON_ZERO_EXIT = (
    b'\x03{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit '
    b'code: command terminated with exit code 3","reason":"NonZeroExitCode","details":'
    b'{"causes":[{"reason":"ExitCode","message":"3"}]}}'
)
SUCCESS = b'\x03{"metadata":{},"status":"Success"}'
# apierrors.NewInternalError(err) around a wrapped Go exec error, as kwok may send it.
GENERIC_EXIT = (
    b'\x03{"metadata":{},"status":"Failure","message":"Internal error occurred: '
    b'error executing command: exit status 42","reason":"InternalError","details":'
    b'{"causes":[{"message":"error executing command: exit status 42"}]},"code":500}'
)


def status_of(frame: bytes) -> dict:
    channel, payload = parse_frame(frame)
    assert channel == Channel.STATUS
    return json.loads(payload)


def test_parse_frame_splits_channel_and_payload() -> None:
    assert parse_frame(b"\x01hello") == (Channel.STDOUT, b"hello")
    assert parse_frame(b"\x02") == (Channel.STDERR, b"")
    assert parse_frame(b"\xff\x00") == (Channel.CLOSE, b"\x00")
    assert parse_frame("\x01text") == (1, b"text")


def test_parse_frame_rejects_empty_message() -> None:
    with pytest.raises(ProtocolError):
        parse_frame(b"")


def test_success_is_exit_zero() -> None:
    outcome = interpret_status(status_of(SUCCESS))

    assert (outcome.reason, outcome.exit_code) == (ExecReason.COMPLETED, 0)


def test_non_zero_exit_from_cause() -> None:
    outcome = interpret_status(status_of(NON_ZERO_EXIT))

    assert (outcome.reason, outcome.exit_code) == (ExecReason.NON_ZERO_EXIT_CODE, 3)
    assert "non-zero exit code" in outcome.message


def test_cause_wins_over_message() -> None:
    status = status_of(NON_ZERO_EXIT)
    status["message"] = "exit status 9"

    assert interpret_status(status).exit_code == 3


def test_non_zero_exit_from_generic_message() -> None:
    outcome = interpret_status(status_of(GENERIC_EXIT))

    assert (outcome.reason, outcome.exit_code) == (ExecReason.NON_ZERO_EXIT_CODE, 42)
    assert outcome.message == "error executing command: exit status 42"


def test_doubled_internal_error_prefix_is_dropped() -> None:
    """kwok wraps an InternalError in another: the record keeps the runtime's message."""
    status = status_of(GENERIC_EXIT)
    status["message"] = ("Internal error occurred: Internal error occurred: error executing "
                         "command in container: cmd wait: /bin/sh -c exit 7: exit status 7")

    outcome = interpret_status(status)

    assert (outcome.reason, outcome.exit_code) == (ExecReason.NON_ZERO_EXIT_CODE, 7)
    assert outcome.message == ("error executing command in container: cmd wait: /bin/sh -c "
                               "exit 7: exit status 7")


def test_runtime_detail_keeps_a_prefix_inside_the_message() -> None:
    assert runtime_detail("Internal error occurred: a: Internal error occurred: b") == (
        "a: Internal error occurred: b")
    assert runtime_detail("container not found") == "container not found"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("exit status 3", 3),
        ("command terminated with non-zero exit code: exit status 255", 255),
        ("failed: exit code 7", 7),
        ("wrapped: exit status 1: more: exit status 2", 2),
    ],
)
def test_exit_code_shapes_in_messages(message: str, code: int) -> None:
    outcome = interpret_status({"status": "Failure", "message": message})

    assert outcome.exit_code == code


def test_non_zero_exit_reason_with_unreadable_cause_falls_back_to_message() -> None:
    status = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "message": "exit status 5",
        "details": {"causes": [{"reason": "ExitCode", "message": "five"}]},
    }

    assert interpret_status(status).exit_code == 5


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("Internal error occurred: signal: killed", ExecReason.EXEC_FAILED),
        ("exit status 0", ExecReason.EXEC_FAILED),
        ('unable to upgrade connection: container not found ("db")', "ContainerNotRunning"),
        ("container db is not valid for pod web-0", ExecReason.CONTAINER_NOT_RUNNING),
        ("pod web-0 does not have a host assigned", ExecReason.POD_NOT_RUNNING),
        ("", ExecReason.EXEC_FAILED),
    ],
)
def test_other_failures_are_not_exit_codes(message: str, reason: str) -> None:
    outcome = interpret_status({"status": "Failure", "message": message})

    assert outcome.exit_code is None
    assert outcome.reason == reason
    assert outcome.message


def test_classify_failure() -> None:
    assert classify_failure("cannot exec into a container in a completed pod") == "PodNotRunning"
    assert classify_failure("container is not running") == "ContainerNotRunning"
    assert classify_failure("forbidden") == "ExecFailed"


def test_status_from_body() -> None:
    body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","code":400}'

    assert status_from_body(body)["message"] == "m"
    assert status_from_body(b"<html>bad gateway</html>") is None
    assert status_from_body(b'{"kind":"Pod"}') is None
    assert status_from_body(b"\xff\xfe") is None


def test_tail_keeps_everything_under_the_limit() -> None:
    tail = OutputTail(8)
    tail.write(b"abc")
    tail.write(b"defgh")

    assert (tail.value(), tail.truncated) == (b"abcdefgh", False)


def test_tail_drops_the_oldest_bytes() -> None:
    tail = OutputTail(8)
    tail.write(b"abcdef")
    tail.write(b"ghij")

    assert (tail.value(), tail.truncated) == (b"cdefghij", True)


def test_tail_large_write_keeps_its_end() -> None:
    tail = OutputTail(4)
    tail.write(b"0123456789")

    assert (tail.value(), tail.truncated) == (b"6789", True)


def test_tail_exactly_the_limit_is_not_truncated_unless_it_replaces_data() -> None:
    exact = OutputTail(4)
    exact.write(b"abcd")
    replaced = OutputTail(4)
    replaced.write(b"x")
    replaced.write(b"abcd")

    assert (exact.value(), exact.truncated) == (b"abcd", False)
    assert (replaced.value(), replaced.truncated) == (b"abcd", True)


def test_tail_never_grows_past_the_limit() -> None:
    tail = OutputTail(16)
    for i in range(1000):
        tail.write(bytes([65 + i % 26]) * (i % 7))
        assert len(tail.value()) <= 16

    assert tail.truncated


def test_zero_limit_keeps_nothing() -> None:
    tail = OutputTail(0)
    tail.write(b"")
    assert not tail.truncated
    tail.write(b"x")

    assert (tail.value(), tail.truncated) == (b"", True)
