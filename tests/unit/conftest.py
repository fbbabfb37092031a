"""Fixtures for unit tests: a PKI like a cluster's, a fake kube-apiserver (MockTransport), the
registry's SQLite database, and the storage backends the store conformance suite runs against."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from apiserver.authn.trust import TrustMaterial
from apiserver.kube import Connection, KubeClient
from apiserver.registry.resources import ResourceType
from apiserver.registry.sqlite_database import DEFAULT_EVENT_RETENTION, SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import DEFAULT_MAX_OBJECT_BYTES, ObjectStore
from apiserver.registry.watch import DEFAULT_MAX_QUEUED_EVENTS
from certs.authority import KeyPair, issue, new_ca

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

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else {}
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


class Backend:
    """A storage backend under the store conformance suite (tests/unit/test_store_conformance).

    `store` opens the store of one resource; every store of one Backend shares its
    resourceVersion counter and keeps `history` resourceVersions of history. A new backend
    adds a parameter to the `backend` fixture that builds one of these.
    """

    history = 20

    def __init__(self, open_store: Callable[[ResourceType, int, int], ObjectStore]) -> None:
        self._open_store = open_store
        self.stores: list[ObjectStore] = []

    def store(self, resource: ResourceType, *, max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
              max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS) -> ObjectStore:
        opened = self._open_store(resource, max_object_bytes, max_queued_events)
        self.stores.append(opened)
        return opened


@contextlib.asynccontextmanager
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    database = await SqliteDatabase.open(tmp_path / "backend", event_retention=Backend.history)
    try:
        yield Backend(lambda resource, max_bytes, max_queued: SqliteObjectStore(
            database, resource, max_object_bytes=max_bytes, max_queued_events=max_queued))
    finally:
        await database.close()


BACKENDS: dict[str, Callable[[Path], contextlib.AbstractAsyncContextManager[Backend]]] = {
    "sqlite": sqlite_backend,
}
"""Every storage backend, by name: each must pass the store conformance suite."""


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async with BACKENDS[request.param](tmp_path) as opened:
        try:
            yield opened
        finally:
            for store in opened.stores:
                store.close()
