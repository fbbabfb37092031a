"""A small async client for kube-apiserver, configured from a kubeconfig or in-cluster.

Errors come in two kinds: `KubeUnavailable` (no usable answer: connection failure, timeout, 502,
503, 504), which callers turn into 503 to fail closed, and `KubeRejected` (kube-apiserver answered
with another error status).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from apiserver.errors import InternalError, ServiceUnavailable

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
UNAVAILABLE_CODES = frozenset({502, 503, 504})


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept header for lists of metadata only; a watch with it streams PartialObjectMetadata."""
METADATA_ONLY_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


CONNECTION_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=128)
"""Enough kept-alive connections for a fan-out's parallel reads (httpx keeps 20 by default;
past that every request paid a new TLS handshake)."""


class KubeUnavailable(ServiceUnavailable):
    """kube-apiserver could not be reached or could not answer (the server fails closed)."""


class KubeRejected(InternalError):
    """kube-apiserver answered with an error status (`status_code`, its Status in `answer`).

    Callers that expect some answers (a 404 for an object that may be gone, a 410 for an
    expired watch) catch it and look at `status_code`; any other is the server's failure."""

    def __init__(self, status_code: int, answer: Mapping[str, Any]):
        self.status_code = status_code
        self.answer = dict(answer)
        super().__init__(f"kube-apiserver answered {status_code}: "
                         f"{self.answer.get('message', '')}")

    @property
    def answer_reason(self) -> str:
        return str(self.answer.get("reason", ""))


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used."""


class TokenFile:
    """A bearer token read from a file and re-read periodically, as projected tokens rotate."""

    def __init__(self, path: Path, reread_seconds: float = TOKEN_REREAD_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._path = path
        self._reread_seconds = reread_seconds
        self._clock = clock
        self._token = ""
        self._read_at = float("-inf")

    def token(self) -> str:
        now = self._clock()
        if now - self._read_at >= self._reread_seconds:
            self._token = self._path.read_text().strip()
            self._read_at = now
        return self._token


class _BearerAuth(httpx.Auth):
    def __init__(self, token: Callable[[], str]):
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token()}"
        yield request


@dataclass(frozen=True)
class Connection:
    """Where kube-apiserver is and how to authenticate to it."""

    base_url: str
    ssl_context: ssl.SSLContext
    token: Callable[[], str] | None = None


class KubeClient:
    """JSON requests to kube-apiserver.

    `ssl_context` and `auth_headers()` are public so that other transports (WebSocket exec to
    pods/exec) can reach kube-apiserver with the same identity.
    """

    def __init__(self, connection: Connection, *, timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = connection.base_url.rstrip("/")
        self.ssl_context = connection.ssl_context
        self._token = connection.token
        self.last_success: float | None = None
        """time.monotonic() of the last request kube-apiserver answered, or None."""
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            verify=self.ssl_context,
            timeout=timeout,
            auth=_BearerAuth(self._token) if self._token else None,
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": "container-notifier-apiserver"},
            limits=CONNECTION_LIMITS,
        )

    @classmethod
    def from_kubeconfig(cls, path: Path, **kwargs: Any) -> KubeClient:
        return cls(connection_from_kubeconfig(path), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeClient:
        return cls(in_cluster_connection(), **kwargs)

    def auth_headers(self) -> dict[str, str]:
        """Headers that authenticate a request (empty when a client certificate does)."""
        return {"Authorization": f"Bearer {self._token()}"} if self._token else {}

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]:
        """GET `path`; `accept` overrides the Accept header (e.g. METADATA_ONLY)."""
        headers = {"Accept": accept} if accept else None
        return await self._request("GET", path, params=params, headers=headers)

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._request("POST", path, params=params, json=body)

    async def watch(self, path: str, params: Mapping[str, str], accept: str | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the watch events of `path` (a collection) until the server ends the stream.

        Set ``timeoutSeconds`` in `params`: the read timeout allows it plus a margin. `accept`
        overrides the Accept header (e.g. METADATA_ONLY).
        """
        query = {**params, "watch": "true"}
        read_timeout = float(query.get("timeoutSeconds", 300)) + 30
        timeout = httpx.Timeout(10.0, read=read_timeout)
        try:
            headers = {"Accept": accept} if accept else None
            async with self._client.stream("GET", path, params=query, timeout=timeout,
                                           headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._raise_for(response)
                self.last_success = time.monotonic()
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"watch {path}: {type(error).__name__}: {error}") from error

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if response.status_code >= 400:
            self._raise_for(response)
        self.last_success = time.monotonic()
        return response.json()

    @staticmethod
    def _raise_for(response: httpx.Response) -> None:
        code = response.status_code
        try:
            status = response.json()
        except ValueError:
            status = {"message": response.text[:200]}
        if not isinstance(status, dict):
            status = {"message": str(status)[:200]}
        if code in UNAVAILABLE_CODES:
            raise KubeUnavailable(f"kube-apiserver answered {code}: {status.get('message', '')}")
        raise KubeRejected(code, status)


def in_cluster_connection(directory: Path = SERVICE_ACCOUNT_DIR) -> Connection:
    """The service account's connection, from KUBERNETES_SERVICE_HOST/PORT and its files."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set; "
                              "pass --kubeconfig")
    if ":" in host:
        host = f"[{host}]"
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    return Connection(f"https://{host}:{port}", context, TokenFile(directory / "token").token)


def connection_from_kubeconfig(path: Path) -> Connection:
    """The connection of the kubeconfig's current context.

    Supported: server, certificate-authority(-data), insecure-skip-tls-verify,
    client-certificate(-data) with client-key(-data), token and tokenFile.
    Relative file names are relative to the kubeconfig's directory.
    """
    config = yaml.safe_load(path.read_text()) or {}
    context_name = config.get("current-context")
    context = _named(config, "contexts", context_name, "context")
    cluster = _named(config, "clusters", context.get("cluster"), "cluster")
    user = _named(config, "users", context.get("user"), "user") if context.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise KubeconfigError(f"{path}: exec and auth-provider users are not supported")
    base = path.parent
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: cluster {context.get('cluster')!r} has no server")

    ca_file = _file_or_data(base, cluster, "certificate-authority")
    if cluster.get("insecure-skip-tls-verify"):
        ssl_context = ssl.create_default_context()
        ssl_context.check_hostname = False
        ssl_context.verify_mode = ssl.CERT_NONE
    elif ca_file is not None:
        ssl_context = ssl.create_default_context(cadata=ca_file.decode())
    else:
        ssl_context = ssl.create_default_context()

    cert = _file_or_data(base, user, "client-certificate")
    key = _file_or_data(base, user, "client-key")
    if (cert is None) != (key is None):
        raise KubeconfigError(f"{path}: client-certificate and client-key must come together")
    if cert is not None and key is not None:
        _load_cert_chain(ssl_context, cert, key)

    token: Callable[[], str] | None = None
    if user.get("token"):
        token = _constant(str(user["token"]))
    elif user.get("tokenFile"):
        token = TokenFile(base / user["tokenFile"]).token
    return Connection(server, ssl_context, token)


def _constant(value: str) -> Callable[[], str]:
    return lambda: value


def _named(config: dict[str, Any], section: str, name: str | None, key: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return entry.get(key) or {}
    raise KubeconfigError(f"kubeconfig has no {key} named {name!r}")


def _file_or_data(base: Path, section: dict[str, Any], field: str) -> bytes | None:
    if section.get(f"{field}-data"):
        return base64.b64decode(section[f"{field}-data"])
    if section.get(field):
        return (base / section[field]).read_bytes()
    return None


def _load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl reads certificates only from files: write them to private temporary ones."""
    with tempfile.TemporaryDirectory(prefix="kubeclient-") as directory:
        cert_path, key_path = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path)
