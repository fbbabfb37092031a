"""A small HTTP server standing in for a pod's endpoint: it listens on the pod's (loopback) IP
and port, answers as told and records every request it receives, so tests count what an http
notifier sent as they count an exec's side effects."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes


@dataclass
class Answer:
    """What the server answers (to every request, until changed)."""

    status: int = 200
    body: bytes = b"ok\n"
    delay_seconds: float = 0.0
    """Wait this long before answering (an endpoint that hangs)."""
    headers: dict[str, str] = field(default_factory=dict)


class PodHttpServer:
    """Serves on ``host``:``port`` (0: any free port) in a thread; ``requests`` is every
    request received, in order (appended when its body has been read, before the answer)."""

    def __init__(self, host: str, port: int = 0, *, answer: Answer | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.answer = answer or Answer()
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append(Received(
                        self.command, self.path,
                        {name.lower(): value for name, value in self.headers.items()}, body))
                answer = server.answer
                if answer.delay_seconds:
                    time.sleep(answer.delay_seconds)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(answer.body)

            do_GET = do_POST = do_PUT = _handle  # noqa: N815

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"pod-http {host}:{self.port}")

    def __enter__(self) -> PodHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def count(self, path: str | None = None) -> int:
        """Requests received (to ``path`` only, if given)."""
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path == path)

