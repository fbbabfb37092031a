"""kubectl's ``--as`` and ``--as-group``: every request carries ``Impersonate-User`` and
``Impersonate-Group`` headers (the caller needs ``impersonate`` rights, as with kubectl)."""

from __future__ import annotations

import httpx

from kubectl_notify.connection import Connection


class Impersonating(httpx.AsyncBaseTransport):
    """The connection's own TLS and proxy settings, plus the impersonation headers."""

    def __init__(self, connection: Connection, user: str, groups: tuple[str, ...],
                 inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport(verify=connection.ssl_context,
                                                        proxy=connection.proxy or None)
        self._headers = [("Impersonate-User", user),
                         *(("Impersonate-Group", group) for group in groups)]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers = httpx.Headers([*request.headers.multi_items(), *self._headers])
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
