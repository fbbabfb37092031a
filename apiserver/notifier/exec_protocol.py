"""The ``v4``/``v5.channel.k8s.io`` exec stream protocol: frames, output tails, exit status.

Pure functions and small buffers, no I/O; ``exec_stream`` drives them over a WebSocket.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

DEFAULT_TAIL_BYTES = 4096


class Channel(IntEnum):
    """The channels of an exec stream (4, resize, is never used; 0, stdin, only to close a held
    command's)."""

    STDIN = 0
    STDOUT = 1
    STDERR = 2
    STATUS = 3
    CLOSE = 255
    """v5 only: the peer closes the stream named by the frame's second byte."""


class ExecReason(StrEnum):
    """Outcome of one exec, named as the PodNotifier container reasons."""

    COMPLETED = "Completed"
    NON_ZERO_EXIT_CODE = "NonZeroExitCode"
    TIMEOUT = "Timeout"
    CONTAINER_NOT_RUNNING = "ContainerNotRunning"
    POD_NOT_RUNNING = "PodNotRunning"
    POD_DELETED = "PodDeleted"
    EXEC_FAILED = "ExecFailed"


class Stop(StrEnum):
    """What the server did to a command that outlived its timeout, named as the PodNotifier
    container's ``stopped`` field."""

    TERMINATED = "Terminated"
    """It exited after SIGTERM, within the grace period."""
    KILLED = "Killed"
    """It was still running at the end of the grace period and got SIGKILL."""
    EXITED = "Exited"
    """It had already exited when SIGTERM was to be sent."""
    NOT_STOPPED = "NotStopped"
    """It could not be signalled (no shell in the container, no PID reported, the stop failed):
    it may still run."""


@dataclass(frozen=True)
class Outcome:
    reason: ExecReason
    exit_code: int | None
    message: str


class ProtocolError(ValueError):
    """A frame that does not follow the channel protocol."""


def parse_frame(message: bytes | str) -> tuple[int, bytes]:
    """Split a WebSocket message into its channel number and payload."""
    data = message.encode() if isinstance(message, str) else message
    if not data:
        raise ProtocolError("empty WebSocket message: every frame starts with a channel byte")
    return data[0], data[1:]


class OutputTail:
    """The last ``limit`` bytes written, and whether anything before them was dropped.

    Never holds more than ``limit`` bytes, however much is written.
    """

    def __init__(self, limit: int = DEFAULT_TAIL_BYTES) -> None:
        if limit < 0:
            raise ValueError("limit must not be negative")
        self._limit = limit
        self._buffer = bytearray()
        self.truncated = False

    def write(self, data: bytes) -> None:
        if len(data) >= self._limit:
            self.truncated = self.truncated or bool(self._buffer) or len(data) > self._limit
            self._buffer[:] = data[len(data) - self._limit :]
            return
        excess = len(self._buffer) + len(data) - self._limit
        if excess > 0:
            del self._buffer[:excess]
            self.truncated = True
        self._buffer += data

    def value(self) -> bytes:
        return bytes(self._buffer)


_EXIT_STATUS = (
    re.compile(r"exit status (\d+)"),
    re.compile(r"exit code:? (\d+)"),
)

# kube-apiserver and kubelet messages when the target cannot be exec'd into.
_POD_NOT_RUNNING = ("does not have a host assigned", "completed pod")
_CONTAINER_NOT_RUNNING = (
    "is not valid for pod",
    "container not found",
    "not running",
    "is waiting to start",
    "is terminated",
)


def interpret_status(status: Mapping[str, Any]) -> Outcome:
    """What a ``metav1.Status`` from the status channel says about the command.

    ``Success`` is exit code 0. A non-zero exit comes in two shapes: reason ``NonZeroExitCode``
    with an ``ExitCode`` cause (kube-apiserver, kubelet), or a generic failure whose message
    ends in Go's ``exit status N`` (what a runtime that wraps the command's error, such as kwok,
    may send). Anything else is a failure to run the command, not a result of it. The message
    is kept without its "Internal error occurred: " prefixes (``runtime_detail``).
    """
    message = runtime_detail(str(status.get("message") or ""))
    if status.get("status") == "Success":
        return Outcome(ExecReason.COMPLETED, 0, message)
    code = _exit_code_cause(status) if status.get("reason") == "NonZeroExitCode" else None
    if code is None:
        code = _exit_code_in_message(message)
    if code is not None and code != 0:
        return Outcome(ExecReason.NON_ZERO_EXIT_CODE, code, message)
    return Outcome(classify_failure(message), None, message or "exec failed without a message")


_INTERNAL_ERROR_PREFIX = "Internal error occurred: "


def runtime_detail(message: str) -> str:
    """A message from the exec's status without apimachinery's ``Internal error occurred: ``
    prefixes: the kubelet wraps the runtime's error in an InternalError, and kwok wraps one that
    is already wrapped, so records read ``Internal error occurred: Internal error occurred:
    error executing command ...``; the container's reason already says what happened."""
    while message.startswith(_INTERNAL_ERROR_PREFIX):
        message = message[len(_INTERNAL_ERROR_PREFIX):]
    return message


def classify_failure(message: str) -> ExecReason:
    """The reason for a failure to exec, from the server's message."""
    if any(marker in message for marker in _POD_NOT_RUNNING):
        return ExecReason.POD_NOT_RUNNING
    if any(marker in message for marker in _CONTAINER_NOT_RUNNING):
        return ExecReason.CONTAINER_NOT_RUNNING
    return ExecReason.EXEC_FAILED


def status_from_body(body: bytes) -> dict[str, Any] | None:
    """The ``metav1.Status`` in an HTTP error body, if it holds one."""
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return decoded
    return None


def _exit_code_cause(status: Mapping[str, Any]) -> int | None:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else ():
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                return None
    return None


def _exit_code_in_message(message: str) -> int | None:
    for pattern in _EXIT_STATUS:
        found = pattern.findall(message)
        if found:
            return int(found[-1])
    return None
