"""Run a command in a container through the kube-apiserver's ``pods/exec`` WebSocket.

One coroutine per exec, no threads. The stream is opened with stdout and stderr only (no TTY,
and no stdin except for a held notifier's command, whose stdin stays open until it is released),
speaking ``v5.channel.k8s.io`` or, from older servers, ``v4.channel.k8s.io``. Only the
last ``tail_bytes`` of each output are kept. Every failure, including a refused handshake or a
broken connection, is reported in the ``ExecResult``; only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus, WebSocketException
from websockets.http11 import Response
from websockets.typing import Subprotocol

from apiserver.kube import paths
from apiserver.kube.tls_sessions import remember
from apiserver.notifier.exec_protocol import (
    DEFAULT_TAIL_BYTES,
    Channel,
    ExecReason,
    Outcome,
    OutputTail,
    ProtocolError,
    Stop,
    classify_failure,
    interpret_status,
    parse_frame,
    runtime_detail,
    status_from_body,
)

V5 = Subprotocol("v5.channel.k8s.io")
SUBPROTOCOLS = (V5, Subprotocol("v4.channel.k8s.io"))
CLOSE_STDIN = bytes([Channel.CLOSE, Channel.STDIN])
"""v5: the frame that closes the command's stdin (v4 has no way to close one stream)."""
CLOSE_TIMEOUT_SECONDS = 1.0
"""How long closing the stream may take after the command's timeout."""

_MAX_MESSAGE_BYTES = 1 << 20
_MAX_STATUS_BYTES = 64 << 10
_MAX_SHOWN_BODY_CHARS = 1024


@dataclass(frozen=True)
class KubeEndpoint:
    """Where and as whom to reach the kube-apiserver.

    ``ssl_context`` carries the trust roots and, for x509 authentication, the client
    certificate; ``headers`` carry e.g. ``Authorization: Bearer ...``.
    """

    url: str
    ssl_context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    """The command's exit code; None if it did not run or its end was not seen."""
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    reason: ExecReason
    message: str
    started: datetime
    finished: datetime
    stopped: Stop | None = None
    """After a timeout: how the command was stopped; None if it did not time out."""


@dataclass(frozen=True)
class OutputTails:
    """The bounded tails of an exec's stdout and stderr, written as output arrives: whoever
    passed them to ``exec_in_container`` may read them while the command runs (a held
    command's output so far)."""

    stdout: OutputTail
    stderr: OutputTail

    @classmethod
    def bounded(cls, tail_bytes: int) -> OutputTails:
        return cls(OutputTail(tail_bytes), OutputTail(tail_bytes))


class StdoutFilter(Protocol):
    """Sees standard output before its tail is kept, and may hold back part of it."""

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` that belongs to the command's output."""
        ...

    def end(self) -> bytes:
        """At the end of the stream: what was held back and belongs to the output after all."""
        ...


def exec_url(
    base_url: str, namespace: str, pod: str, container: str, command: Sequence[str],
    *, stdin: bool = False,
) -> str:
    """The WebSocket URL of ``pods/exec`` for a non-interactive command (with ``stdin``, its
    standard input is a stream the caller can close)."""
    base = urlsplit(base_url)
    scheme = {"https": "wss", "http": "ws"}.get(base.scheme, base.scheme)
    path = base.path.rstrip("/") + paths.namespaced(paths.CORE, namespace, "pods", pod, "exec")
    query = urlencode(
        [("command", argument) for argument in command]
        + [
            ("container", container),
            ("stdin", "true" if stdin else "false"),
            ("stdout", "true"),
            ("stderr", "true"),
            ("tty", "false"),
        ]
    )
    return urlunsplit((scheme, base.netloc, path, query, ""))


async def exec_in_container(
    endpoint: KubeEndpoint,
    namespace: str,
    pod: str,
    container: str,
    command: Sequence[str],
    *,
    timeout_seconds: float,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    stdout_filter: StdoutFilter | None = None,
    close_stdin: asyncio.Event | None = None,
    tails: OutputTails | None = None,
) -> ExecResult:
    """Run ``command`` in the container and wait for it to exit, at most ``timeout_seconds``.

    On timeout the stream is closed and the result has reason ``Timeout``. Closing the stream
    does not stop the process in the container: it may still be running, and finish later.
    The call returns at most ``CLOSE_TIMEOUT_SECONDS`` after the timeout. ``stdout_filter``,
    if given, sees standard output first (``apiserver.notifier.stopping`` reads the wrapper's
    PID marker with it). With ``close_stdin``, the command's stdin is open (and empty) until
    the event is set, then closed: with ``v5.channel.k8s.io`` by a CLOSE frame, with v4 it stays
    open until the stream ends. ``tails``, if given, are the tails to keep the output in
    (instead of new ones of ``tail_bytes``), so that the caller can read them while it runs.
    """
    started = datetime.now(UTC)
    tails = tails or OutputTails.bounded(tail_bytes)
    stdout, stderr = tails.stdout, tails.stderr
    url = exec_url(endpoint.url, namespace, pod, container, command,
                   stdin=close_stdin is not None)
    try:
        async with asyncio.timeout(timeout_seconds):
            outcome = await _stream(endpoint, url, _Filtered(stdout, stdout_filter), stderr,
                                    close_stdin)
    except TimeoutError:
        outcome = Outcome(
            ExecReason.TIMEOUT,
            None,
            f"no exit status within {timeout_seconds:g}s; the exec stream was closed, but the "
            "command may still be running in the container",
        )
    if stdout_filter is not None:
        stdout.write(stdout_filter.end())
    return ExecResult(
        exit_code=outcome.exit_code,
        stdout=stdout.value(),
        stderr=stderr.value(),
        stdout_truncated=stdout.truncated,
        stderr_truncated=stderr.truncated,
        reason=outcome.reason,
        message=outcome.message,
        started=started,
        finished=datetime.now(UTC),
    )


class _Filtered:
    """An output tail written through a ``StdoutFilter``."""

    def __init__(self, tail: OutputTail, stdout_filter: StdoutFilter | None) -> None:
        self._tail = tail
        self._filter = stdout_filter

    def write(self, data: bytes) -> None:
        self._tail.write(data if self._filter is None else self._filter.feed(data))


async def _stream(
    endpoint: KubeEndpoint, url: str, stdout: _Filtered, stderr: OutputTail,
    close_stdin: asyncio.Event | None = None,
) -> Outcome:
    tls: dict[str, Any] = {}
    if url.startswith("wss:") and endpoint.ssl_context is not None:
        tls["ssl"] = endpoint.ssl_context
    try:
        async with connect(
            url,
            subprotocols=SUBPROTOCOLS,
            additional_headers=dict(endpoint.headers),
            user_agent_header="container-notifier",
            compression=None,
            proxy=None,  # like the kubernetes client: no proxy from the environment
            open_timeout=None,  # the caller's timeout covers the handshake
            ping_interval=None,  # the caller's timeout bounds the stream; no keepalive needed
            close_timeout=CLOSE_TIMEOUT_SECONDS,
            max_size=_MAX_MESSAGE_BYTES,
            **tls,
        ) as connection:
            closer = (None if close_stdin is None else
                      asyncio.create_task(_close_stdin_when(connection, close_stdin)))
            try:
                return await _read(connection, stdout, stderr)
            finally:
                # the next exec resumes this connection's TLS session (its ticket came with
                # the stream's first data)
                remember(endpoint.ssl_context, connection.transport.get_extra_info("ssl_object"))
                if closer is not None:
                    closer.cancel()
                    await asyncio.gather(closer, return_exceptions=True)
    except InvalidStatus as refused:
        return _refused(refused.response)
    except (OSError, WebSocketException) as error:
        return Outcome(ExecReason.EXEC_FAILED, None, f"cannot open the exec stream: {error}")


async def _close_stdin_when(connection: ClientConnection, event: asyncio.Event) -> None:
    """Once ``event`` is set, close the command's stdin (v5 only; a failure to send means the
    stream is ending anyway)."""
    await event.wait()
    if connection.subprotocol == V5:
        with contextlib.suppress(WebSocketException, OSError):
            await connection.send(CLOSE_STDIN)


async def _read(connection: ClientConnection, stdout: _Filtered, stderr: OutputTail) -> Outcome:
    status = bytearray()
    try:
        async for message in connection:
            if not message:
                continue
            channel, payload = parse_frame(message)
            if channel == Channel.STDOUT:
                stdout.write(payload)
            elif channel == Channel.STDERR:
                stderr.write(payload)
            elif channel == Channel.STATUS:
                status += payload
                decoded = _complete_status(status)
                if decoded is not None:
                    return interpret_status(decoded)
    except ConnectionClosedError as closed:
        return Outcome(
            ExecReason.EXEC_FAILED,
            None,
            f"the exec stream broke before the exit status arrived: {closed}",
        )
    except ProtocolError as error:
        return Outcome(ExecReason.EXEC_FAILED, None, f"the exec stream is malformed: {error}")
    return Outcome(ExecReason.EXEC_FAILED, None, "the exec stream ended without an exit status")


def _complete_status(buffer: bytearray) -> dict[str, Any] | None:
    """The status once its JSON is complete (it may span frames); None while it is not."""
    if len(buffer) > _MAX_STATUS_BYTES:
        raise ProtocolError(f"status larger than {_MAX_STATUS_BYTES} bytes")
    try:
        decoded = json.loads(buffer)
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        raise ProtocolError("the status channel did not carry a JSON object")
    return decoded


def _refused(response: Response) -> Outcome:
    status = status_from_body(bytes(response.body))
    if status is not None:
        detail = runtime_detail(str(status.get("message") or status.get("reason") or ""))
    else:
        detail = bytes(response.body).decode(errors="replace").strip()[:_MAX_SHOWN_BODY_CHARS]
    message = f"kube-apiserver refused the exec (HTTP {response.status_code})" + (
        f": {detail}" if detail else ""
    )
    if response.status_code == 400:
        return Outcome(classify_failure(detail), None, message)
    if response.status_code == 404 and status is not None and _is_pod_not_found(status):
        return Outcome(ExecReason.POD_DELETED, None, message)
    return Outcome(ExecReason.EXEC_FAILED, None, message)


def _is_pod_not_found(status: Mapping[str, Any]) -> bool:
    details = status.get("details")
    return (
        status.get("reason") == "NotFound"
        and isinstance(details, dict)
        and (details.get("kind") == "pods")
    )
