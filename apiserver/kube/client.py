"""A small async client for kube-apiserver (httpx), given a `Connection` (see `config`).

Paths are built with `paths` (names escaped) and checked by `paths.check` before each request:
the client never sends a path whose query, fragment or dot segments would change the object it
names. Errors come in two kinds: `KubeUnavailable` (no usable answer: connection failure,
timeout, 502, 503, 504), which callers turn into 503 to fail closed, and `KubeRejected`
(kube-apiserver answered with another error status).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from pathlib import Path
from typing import Any

import httpx

from apiserver.errors import InternalError, ServiceUnavailable
from apiserver.kube import paths
from apiserver.kube.config import (
    Connection,
    Credentials,
    connection_from_kubeconfig,
    in_cluster_connection,
)

UNAVAILABLE_CODES = frozenset({502, 503, 504})


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept header for lists of metadata only; a watch with it streams PartialObjectMetadata."""
METADATA_ONLY_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


CONNECTION_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=32)
"""Kept-alive connections to kube-apiserver. httpcore's pool looks at every connection it holds
(an idle one's socket polled for readability) each time it hands one to a request, so each
kept connection costs every request: with 128 kept, that was 19% of the fan-out leader's busy
samples at parallelism 50, against 10% with 32 (py-spy; 17.7 against 13.7 CPU ms per pod). A
connection opened beyond them pays a TLS handshake, which resumes the session
(``tls_sessions``): kube-apiserver's CPU per pod did not rise."""


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


class _Authorization(httpx.Auth):
    """Sets the credentials' Authorization header, refreshing them first when due."""

    def __init__(self, credentials: Credentials):
        self._credentials = credentials

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._credentials.header()
        yield request

    async def async_auth_flow(self, request: httpx.Request
                              ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        await self._credentials.refresh()
        request.headers["Authorization"] = self._credentials.header()
        yield request


class KubeClient:
    """JSON requests to kube-apiserver.

    `ssl_context` and `auth_headers()` are public so that other transports (WebSocket exec to
    pods/exec) can reach kube-apiserver with the same identity.
    """

    def __init__(self, connection: Connection, *, timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = connection.base_url.rstrip("/")
        self.ssl_context = connection.ssl_context
        self._credentials = connection.credentials
        self._extensions = ({"sni_hostname": connection.tls_server_name}
                            if connection.tls_server_name else None)
        self.last_success: float | None = None
        """time.monotonic() of the last request kube-apiserver answered, or None."""
        self._next_answer = asyncio.Event()
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            verify=self.ssl_context,
            timeout=timeout,
            auth=_Authorization(self._credentials) if self._credentials else None,
            transport=transport,
            proxy=connection.proxy or None,
            headers={"Accept": "application/json", "User-Agent": "container-notifier-apiserver"},
            limits=CONNECTION_LIMITS,
        )

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None, *,
                        flag: str = "--kubeconfig", **kwargs: Any) -> KubeClient:
        """The client of the kubeconfig `path`; `flag` (the option that named it) is what
        its errors tell the user to fix."""
        return cls(connection_from_kubeconfig(path, context, flag=flag), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeClient:
        return cls(in_cluster_connection(), **kwargs)

    def auth_headers(self) -> dict[str, str]:
        """Headers that authenticate a request (empty when a client certificate does)."""
        return {"Authorization": self._credentials.header()} if self._credentials else {}

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]:
        """GET `path`; `accept` overrides the Accept header (e.g. METADATA_ONLY)."""
        headers = {"Accept": accept} if accept else None
        return await self._request("GET", path, params=params, headers=headers)

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._request("POST", path, params=params, json=body)

    async def put(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("PUT", path, json=body)

    async def delete(self, path: str, body: Mapping[str, Any] | None = None,
                     params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """DELETE `path` (an object, or a collection selected by `params`); `body` is
        DeleteOptions (preconditions, propagationPolicy)."""
        return await self._request("DELETE", path, params=params, json=body)

    async def patch(self, path: str, body: Mapping[str, Any],
                    content_type: str = "application/merge-patch+json") -> dict[str, Any]:
        return await self._request("PATCH", path, content=json.dumps(body).encode(),
                                   headers={"Content-Type": content_type})

    async def watch(self, path: str, params: Mapping[str, str], accept: str | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the watch events of `path` (a collection) until the server ends the stream.

        Set ``timeoutSeconds`` in `params`: the read timeout allows it plus a margin. `accept`
        overrides the Accept header (e.g. METADATA_ONLY).
        """
        paths.check(path)
        query = {**params, "watch": "true"}
        read_timeout = float(query.get("timeoutSeconds", 300)) + 30
        timeout = httpx.Timeout(10.0, read=read_timeout)
        try:
            headers = {"Accept": accept} if accept else None
            async with self._client.stream("GET", path, params=query, timeout=timeout,
                                           headers=headers,
                                           extensions=self._extensions) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._raise_for(response)
                self._answered()
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"watch {path}: {type(error).__name__}: {error}") from error

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        paths.check(path)
        try:
            response = await self._client.request(method, path, extensions=self._extensions,
                                                  **kwargs)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if response.status_code >= 400:
            self._raise_for(response)
        self._answered()
        return response.json()

    async def next_answer(self) -> None:
        """Return once kube-apiserver has answered a request of this client (any, with
        success) made after the call: who waits for kube-apiserver to come back (an informer
        backing off) retries at once when another component's request (a Lease renewal every
        few seconds) gets through."""
        await self._next_answer.wait()

    def _answered(self) -> None:
        self.last_success = time.monotonic()
        answered, self._next_answer = self._next_answer, asyncio.Event()
        answered.set()

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
