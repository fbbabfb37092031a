"""The plugin's own small async client for kube-apiserver (httpx), given a `Connection`.

The plugin is a distribution of its own (`docs/kubectl-notify.md`, "Install"): it needs only
httpx and PyYAML, not the server, so it does not use the server's `apiserver.kube` client; this
one makes the few requests the plugin needs (GET, POST, watch). Errors come in two kinds, as
the server's: `KubeUnavailable` (no usable answer: connection failure, timeout, 502, 503, 504)
and `KubeRejected` (an error status, its Status in `answer`).

Every path is checked before it is sent (`check`): a pod name from the command line such as
``../secrets`` or ``db?x`` must not make the request address another URL.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from typing import Any
from urllib.parse import unquote

import httpx

from kubectl_notify.connection import Connection, Credentials
from kubectl_notify.errors import UsageError

UNAVAILABLE_CODES = frozenset({502, 503, 504})
USER_AGENT = "kubectl-notify"


class KubeUnavailable(Exception):
    """kube-apiserver could not be reached or could not answer. `status_code` is the answer's
    code (502, 503, 504), 0 when none came; `answer` its body, as `KubeRejected.answer` has it
    (``{"message": text}`` for a body that is no JSON)."""

    def __init__(self, message: str, *, status_code: int = 0,
                 answer: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.answer = dict(answer or {})


class KubeRejected(Exception):
    """kube-apiserver answered with an error status (`status_code`, its Status in `answer`)."""

    def __init__(self, status_code: int, answer: Mapping[str, Any]):
        self.status_code = status_code
        self.answer = dict(answer)
        super().__init__(f"kube-apiserver answered {status_code}: "
                         f"{self.answer.get('message', '')}")


def check(path: str) -> None:
    """Raise UsageError unless `path` is absolute, has no query or fragment and no empty,
    ``.`` or ``..`` segment (escaped or not)."""
    segments = [unquote(part) for part in path[1:].split("/")]
    if (not path.startswith("/") or "?" in path or "#" in path
            or any(part in ("", ".", "..") for part in segments)):
        raise UsageError(f"{path!r} is not a path this plugin sends: a name or namespace must "
                         "not be empty, '.' or '..', nor hold '?' or '#' (give a valid DNS-1123 "
                         "name)")


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
    """JSON requests to kube-apiserver as the connection's user."""

    def __init__(self, connection: Connection, *, timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = connection.base_url.rstrip("/")
        self._extensions = ({"sni_hostname": connection.tls_server_name}
                            if connection.tls_server_name else None)
        credentials = connection.credentials
        self._client = httpx.AsyncClient(
            base_url=self.base_url, verify=connection.ssl_context, timeout=timeout,
            auth=_Authorization(credentials) if credentials else None, transport=transport,
            proxy=connection.proxy or None,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT})

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._request("GET", path, params=params)

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._request("POST", path, params=params, json=body)

    async def watch(self, path: str, params: Mapping[str, str]
                    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the watch events of `path` (a collection) until the server ends the stream;
        the read timeout allows ``timeoutSeconds`` in `params` plus a margin."""
        check(path)
        query = {**params, "watch": "true"}
        timeout = httpx.Timeout(10.0, read=float(query.get("timeoutSeconds", 300)) + 30)
        try:
            async with self._client.stream("GET", path, params=query, timeout=timeout,
                                           extensions=self._extensions) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._raise_for(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"watch {path}: {type(error).__name__}: {error}") from error

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        check(path)
        try:
            response = await self._client.request(method, path, extensions=self._extensions,
                                                  **kwargs)
        except httpx.TransportError as error:
            raise KubeUnavailable(f"{method} {path}: {type(error).__name__}: {error}") from error
        if response.status_code >= 400:
            self._raise_for(response)
        try:
            answer = response.json()
        except ValueError:
            raise KubeUnavailable(f"{method} {path}: the answer is not JSON: "
                                  f"{response.text[:200]!r}") from None
        return answer if isinstance(answer, dict) else {"items": answer}

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
            raise KubeUnavailable(f"kube-apiserver answered {code}: {status.get('message', '')}",
                                  status_code=code, answer=status)
        raise KubeRejected(code, status)
