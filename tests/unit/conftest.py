"""Fixtures for unit tests: a PKI like a cluster's, a fake kube-apiserver (MockTransport), the
registry's SQLite database, the storage backends of the unit run (tests/support/backends.py), the
whole server in-process (``InProcessServer``), the logging configuration restored after a test
that configures it, and the hypothesis profiles."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import settings

from apiserver.authn.trust import TrustMaterial
from apiserver.kube import Connection, KubeClient
from apiserver.registry.resources import ResourceType
from apiserver.registry.sqlite_database import DEFAULT_EVENT_RETENTION, SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from certs.authority import KeyPair, issue, new_ca
from tests.support.backends import UNIT_BACKENDS, Backend

FRONT_PROXY_CN = "front-proxy-client"


@dataclass(frozen=True)
class PKI:
    client_ca: KeyPair
    front_proxy_ca: KeyPair
    other_ca: KeyPair
    serving_ca: KeyPair
    serving: KeyPair
    front_proxy: KeyPair
    """Issued by the front-proxy CA, CN front-proxy-client, clientAuth."""
    front_proxy_wrong_cn: KeyPair
    front_proxy_server_only: KeyPair
    """Issued by the front-proxy CA with the allowed CN, but only the serverAuth usage."""
    alice: KeyPair
    """Issued by the client CA: CN alice, O team-a and team-b."""
    client_ca_front_proxy_cn: KeyPair
    """Issued by the client CA with the front proxy's CN: must not be trusted for headers."""
    stranger: KeyPair
    """Issued by a CA nobody trusts."""

    @staticmethod
    def der(pair: KeyPair) -> bytes:
        return pair.cert.public_bytes(Encoding.DER)

    def trust(self, allowed_names: tuple[str, ...] = (FRONT_PROXY_CN,)) -> TrustMaterial:
        return TrustMaterial.from_configmap_data(self.configmap_data(allowed_names))

    def configmap_data(self, allowed_names: tuple[str, ...] = (FRONT_PROXY_CN,)
                       ) -> dict[str, str]:
        return {
            "client-ca-file": self.client_ca.cert_pem().decode(),
            "requestheader-client-ca-file": self.front_proxy_ca.cert_pem().decode(),
            "requestheader-allowed-names": json.dumps(list(allowed_names)),
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }


@pytest.fixture(scope="session")
def pki() -> PKI:
    client_ca, front_proxy_ca = new_ca("client-ca"), new_ca("front-proxy-ca")
    other_ca, serving_ca = new_ca("other-ca"), new_ca("serving-ca")
    return PKI(
        client_ca=client_ca,
        front_proxy_ca=front_proxy_ca,
        other_ca=other_ca,
        serving_ca=serving_ca,
        serving=issue(serving_ca, "notifier", dns_names=("localhost",),
                      ip_addresses=("127.0.0.1",), server=True),
        front_proxy=issue(front_proxy_ca, FRONT_PROXY_CN, client=True),
        front_proxy_wrong_cn=issue(front_proxy_ca, "someone-else", client=True),
        front_proxy_server_only=issue(front_proxy_ca, FRONT_PROXY_CN, server=True),
        alice=issue(client_ca, "alice", organizations=("team-a", "team-b"), client=True),
        client_ca_front_proxy_cn=issue(client_ca, FRONT_PROXY_CN, client=True),
        stranger=issue(other_ca, "mallory", client=True),
    )


@dataclass
class FakeKube:
    """Answers TokenReviews from `tokens` and SubjectAccessReviews with `allow(spec)`.

    `down` makes every request fail to connect; `error_code` makes reviews answer that code.
    """

    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    allow: Callable[[dict[str, Any]], bool] = lambda spec: False
    down: bool = False
    error_code: int | None = None
    reviews: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    """coordination.k8s.io Leases by name (the replica and leader Leases of build_app)."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else {}
        if "/apis/coordination.k8s.io/" in request.url.path:
            return self._lease(request, body)
        self.reviews.append((request.url.path, body))
        if self.error_code is not None:
            return httpx.Response(self.error_code, json={
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "nope", "reason": "Forbidden", "code": self.error_code})
        spec = body.get("spec", {})
        if request.url.path.endswith("/tokenreviews"):
            user = self.tokens.get(spec.get("token"))
            status = {"authenticated": True, "user": user} if user else {"authenticated": False}
            return httpx.Response(201, json={**body, "status": status})
        if request.url.path.endswith("/subjectaccessreviews"):
            allowed = self.allow(spec)
            return httpx.Response(201, json={**body, "status": {"allowed": allowed}})
        return httpx.Response(404, json={"kind": "Status", "code": 404})

    def _lease(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        """Leases without resourceVersion checks; watches are refused (informers relist)."""
        _, _, name = request.url.path.partition("/leases/")
        if request.method == "POST":
            name = body["metadata"]["name"]
            if name in self.leases:
                return httpx.Response(409, json={"kind": "Status", "code": 409})
        if request.method in ("POST", "PUT"):
            body["metadata"] = {**body["metadata"], "uid": f"uid-{name}",
                                "resourceVersion": str(len(self.reviews) + 1)}
            self.leases[name] = body
            return httpx.Response(201 if request.method == "POST" else 200, json=body)
        if request.method == "DELETE" and self.leases.pop(name, None) is not None:
            return httpx.Response(200, json={"kind": "Status", "status": "Success"})
        if request.method == "GET" and name in self.leases:
            return httpx.Response(200, json=self.leases[name])
        return httpx.Response(404, json={"kind": "Status", "code": 404})

    def paths(self) -> list[str]:
        return [path for path, _ in self.reviews]

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


@pytest.fixture
def fake_kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def event_retention() -> int:
    """The resourceVersions of history `database` keeps; override it in a module to test
    expiry with few writes."""
    return DEFAULT_EVENT_RETENTION


@pytest.fixture
async def database(tmp_path: Path, event_retention: int) -> AsyncIterator[SqliteDatabase]:
    """The registry's SQLite database in `tmp_path / "data"`, closed after the test."""
    opened = await SqliteDatabase.open(tmp_path / "data", event_retention=event_retention)
    yield opened
    await opened.close()


@pytest.fixture(params=sorted(UNIT_BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Each backend of the unit run (tests/support/backends.py); the same suites run against
    the real control plane's Kubernetes backend from tests/cluster."""
    async with UNIT_BACKENDS[request.param](tmp_path) as opened:
        try:
            yield opened
        finally:
            opened.close()


# Hypothesis: few examples, so the unit suite stays fast; derandomized on CI (CI set) so that a
# failure found there is found again on a developer's machine. HYPOTHESIS_PROFILE=hunt searches
# longer (about a minute per property test module).
settings.register_profile("unit", max_examples=60, deadline=None)
settings.register_profile("hunt", max_examples=1500, deadline=None)
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else
                      os.environ.get("HYPOTHESIS_PROFILE", "unit"))


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as the app sent it (a streamed answer: what came before the client left)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header_values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name.lower()]


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [key, *strings(item)]]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


IN_PROCESS_POD = {"metadata": {"name": "db-0", "namespace": "default", "uid": "uid-db-0",
                               "resourceVersion": "1"},
                  "spec": {"containers": [{"name": "db"}]}, "status": {"phase": "Running"}}
SCOPED_POD = {**IN_PROCESS_POD, "metadata": {**IN_PROCESS_POD["metadata"], "annotations": {
    "notifier.x-k8s.io/notifiers": json.dumps({"db": [
        {"name": "quiesce", "action": {"exec": {"command": ["true"]}}}]})}}}
"""IN_PROCESS_POD as a Notification's scope listing (of its namespace) sees it: declaring
quiesce, so that a Notification of it is not refused as a no-op. The pod cache and notify's
reads see it without, so a pods/notify of it stores nothing."""


class InProcessServer:
    """``apiserver.server.build_app`` (the composition root, every real component) on a SQLite
    database in ``data_dir``, its lifespan running on an event loop of its own thread, in front
    of a FakeKube that allows every review and serves one pod (``IN_PROCESS_POD``).

    Synchronous tests (hypothesis drives those) send raw requests with ``request``: the target is
    sent as given (percent-encoded or not), as a client on a socket could send it.
    """

    TOKEN = "good"

    def __init__(self, data_dir: Path, pki: PKI) -> None:
        self.kube = FakeKube(tokens={self.TOKEN: {"username": "carol", "groups": ["team-c"]}},
                             allow=lambda spec: True)
        self._configmap = {"metadata": {"name": "extension-apiserver-authentication"},
                           "data": pki.configmap_data()}
        self._data_dir = data_dir
        pki.serving.write(data_dir / "tls.crt", data_dir / "tls.key")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="in-process-server",
                                        daemon=True)
        self._thread.start()
        self.database: SqliteDatabase
        self._run(self._start())

    def _kube(self, request: httpx.Request) -> httpx.Response:
        """The trust ConfigMap, one pod (SCOPED_POD in its namespace's list), empty lists of
        everything else; watches fail (the informers back off and list again)."""
        if request.method == "GET" and "watch" not in request.url.params:
            path = request.url.path
            items: list[Any] | None = None
            if path.endswith("/configmaps"):
                items = [self._configmap]
            elif path == "/api/v1/pods":
                items = [IN_PROCESS_POD]
            elif path == "/api/v1/namespaces/default/pods":
                items = [SCOPED_POD]
            return httpx.Response(200, json={"items": items,
                                             "metadata": {"resourceVersion": "1"}})
        return self.kube.handle(request)

    async def _start(self) -> None:
        from apiserver.config import SQLITE, ServerOptions
        from apiserver.handlers.watch_response import Watches
        from apiserver.server import build_app
        from apiserver.serving.health import Draining
        from apiserver.serving.tls import ServingTLS

        options = ServerOptions(tls_cert_file=self._data_dir / "tls.crt",
                                tls_private_key_file=self._data_dir / "tls.key",
                                data_dir=self._data_dir / "data", storage=SQLITE)
        self.database = await SqliteDatabase.open(options.data_dir)
        self.draining = Draining()
        kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self._kube))
        self.app = build_app(options, kube, ServingTLS(options.tls_cert_file,
                                                       options.tls_private_key_file),
                             self.database, Watches(), self.draining, replica="unit-test")
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        async with asyncio.timeout(10):
            while (await self.call("GET", b"/readyz", {}, b"")).status != 200:
                await asyncio.sleep(0.01)

    def _run(self, coroutine: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def request(self, method: str, target: bytes | str, *, body: bytes = b"",
                headers: dict[str, str] | None = None, token: bool = True) -> Answer:
        """``method target`` with ``body``, authenticated by a bearer token unless not
        ``token``."""
        sent = dict(headers or {})
        if token:
            sent.setdefault("authorization", f"Bearer {self.TOKEN}")
        raw = target.encode() if isinstance(target, str) else target
        return self._run(self.call(method, raw, sent, body))

    async def call(self, method: str, target: bytes, headers: dict[str, str], body: bytes
                   ) -> Answer:
        """One ASGI request (awaited on the server's loop: in a coroutine given to ``run``), as
        uvicorn makes it from a request line: the path percent-decoded (invalid UTF-8
        replaced), the query as sent. A streamed answer (a watch) is read for a moment, then the
        client disconnects."""
        raw_path, _, query = target.partition(b"?")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": method, "scheme": "https",
            "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path,
            "query_string": query, "root_path": "",
            "headers": [(key.lower().encode(), value.encode("latin-1"))
                        for key, value in headers.items()]
                       + [(b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 50000), "server": ("notifier.test", 443),
            "extensions": {"tls": {"client_cert_der": None}},
        }
        sent: list[dict[str, Any]] = []
        body_read = False
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal body_read
            if not body_read:
                body_read = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.start":
                asyncio.get_running_loop().call_later(0.05, gone.set)

        async with asyncio.timeout(20):
            await self.app(scope, receive, send)
        start = next(message for message in sent if message["type"] == "http.response.start")
        return Answer(start["status"],
                      [(key.decode("latin-1"), value.decode("latin-1"))
                       for key, value in start.get("headers", [])],
                      b"".join(message.get("body", b"") for message in sent
                               if message["type"] == "http.response.body"))

    def resource_version(self) -> int:
        """The database's resourceVersion: it moves with every write of any resource."""
        from apiserver.registry import sqlite_database

        return self._run(self.database.run(sqlite_database.resource_version))

    def create_finished(self, resource: ResourceType, obj: dict[str, Any]) -> None:
        """Store ``obj`` (a PodNotifier of IN_PROCESS_POD or a Notification) as a run that
        just succeeded and is kept 30 days: no background work of the server changes it."""
        from apiserver.api.types import MAX_TTL_SECONDS
        from apiserver.timestamps import timestamp

        now = timestamp()
        finished = {**obj, "status": {"phase": "Succeeded", "startTime": now,
                                      "completionTime": now}}
        if resource.kind == "PodNotifier":
            finished["spec"] = {**obj["spec"], "podName": "db-0", "podUID": "uid-db-0",
                                "ttlSecondsAfterFinished": MAX_TTL_SECONDS}
        self._run(SqliteObjectStore(self.database, resource).create(finished))

    def run(self, coroutine: Any, timeout: float = 30) -> Any:
        """Run ``coroutine`` on the server's loop."""
        return self._run(coroutine, timeout)

    def close(self) -> None:
        self._run(self._lifespan.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@pytest.fixture(scope="module")
def in_process_server(tmp_path_factory: pytest.TempPathFactory, pki: PKI
                      ) -> Iterator[InProcessServer]:
    """One whole server per test module (starting one takes a moment)."""
    server = InProcessServer(tmp_path_factory.mktemp("server"), pki)
    yield server
    server.close()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put back the root logger's handlers and level, and httpx's level, that a test's call of
    the server's logging configuration changed."""
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    saved = (root.handlers[:], root.level, httpx_logger.level)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    httpx_logger.setLevel(saved[2])
