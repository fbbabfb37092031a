"""Running an ``http`` notifier: one request to the pod's own IP, its answer bounded.

The target is built from the pod's IP and the declared port only: no host, no redirects
followed, no proxy (``trust_env=False``: no ``HTTP_PROXY``, ``.netrc`` or ``SSL_CERT_*`` from
the server's environment), no connection reused (each request is sent on a connection of its
own, so a request is never sent twice by a retry of a stale connection). HTTPS is not
verified, as Kubernetes' probes do not verify it. The answer's head (its first
``head_bytes``) is kept, as an exec's output tails are bounded; the rest is not read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import httpx

from apiserver.notifier.http_declaration import HttpAction

log = logging.getLogger(__name__)

USER_AGENT = "container-notifier"


class HttpReason(StrEnum):
    """Outcome of one request, named as the PodNotifier container reasons."""

    COMPLETED = "Completed"
    """The pod answered 2xx."""
    NON_SUCCESS_STATUS_CODE = "NonSuccessStatusCode"
    """The pod answered, not 2xx (statusCode says what; redirects are not followed)."""
    CONNECTION_REFUSED = "ConnectionRefused"
    """Nothing listens on the port."""
    TIMEOUT = "Timeout"
    """No complete answer within timeoutSeconds."""
    REQUEST_FAILED = "RequestFailed"
    """Any other failure: no pod IP, a TLS handshake, a connection reset, a malformed answer."""


@dataclass(frozen=True)
class HttpResult:
    status_code: int | None
    """The answer's status code; None if there was none."""
    body: bytes
    """The head of the answer's body."""
    body_truncated: bool
    reason: HttpReason
    message: str
    started: datetime
    finished: datetime


def target(pod_ip: str, action: HttpAction) -> httpx.URL:
    """The request's URL: the pod's IP (``ValueError`` unless it is an IP address), the
    declared port (a number: resolved from its name before), path and scheme."""
    address = ipaddress.ip_address(pod_ip)
    if not isinstance(action.port, int):
        raise ValueError(f"port {action.port!r} was not resolved to a number")
    return httpx.URL(scheme=action.scheme.lower(), host=str(address), port=action.port,
                     raw_path=action.path.encode("ascii"))


class PodRequests:
    """Sends http notifiers' requests (``ContainerHttp``). Close it with ``aclose``."""

    def __init__(self) -> None:
        self._client = httpx.AsyncClient(
            trust_env=False, follow_redirects=False, verify=False,
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, pod_ip: str, action: HttpAction, *, timeout_seconds: float,
                       head_bytes: int) -> HttpResult:
        started = datetime.now(UTC)

        def result(reason: HttpReason, message: str, status_code: int | None = None,
                   body: bytes = b"", truncated: bool = False) -> HttpResult:
            return HttpResult(status_code, body[:head_bytes], truncated, reason, message,
                              started, datetime.now(UTC))

        if not isinstance(action.port, int):
            return result(HttpReason.REQUEST_FAILED,
                          f"port {action.port!r} names no port of the container, so nothing "
                          "was sent; declare that port in the container's ports, or give "
                          "the number in the notifier's action.http.port")
        try:
            url = target(pod_ip, action)
        except ValueError:
            return result(HttpReason.REQUEST_FAILED,
                          f"the pod has no IP address to send the request to (podIP "
                          f"{pod_ip!r}); it may not have started yet")
        request = self._client.build_request(
            action.method, url, headers=list(action.headers),
            content=None if action.body is None else action.body.encode("utf-8"),
            timeout=timeout_seconds)
        where = f"{action.method} {url}"
        try:
            async with asyncio.timeout(timeout_seconds):
                response = await self._client.send(request, stream=True)
                try:
                    body, truncated = await _head(response, head_bytes)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            return result(HttpReason.TIMEOUT,
                          f"{where}: no complete answer within {timeout_seconds:g} seconds")
        except httpx.ConnectError as error:
            if _refused(error):
                return result(HttpReason.CONNECTION_REFUSED,
                              f"{where}: connection refused (nothing listens on port "
                              f"{action.port} of the pod)")
            return result(HttpReason.REQUEST_FAILED, f"{where}: {_describe(error)}")
        except httpx.HTTPError as error:
            return result(HttpReason.REQUEST_FAILED, f"{where}: {_describe(error)}")
        answered = f"{where}: the pod answered {response.status_code} {response.reason_phrase}"
        if response.is_success:
            return result(HttpReason.COMPLETED, answered, response.status_code, body, truncated)
        if response.is_redirect:
            answered += " (redirects are not followed)"
        return result(HttpReason.NON_SUCCESS_STATUS_CODE, answered, response.status_code, body,
                      truncated)


async def _head(response: httpx.Response, head_bytes: int) -> tuple[bytes, bool]:
    """The first ``head_bytes`` of the body (as sent: no content decoding), and whether there
    was more."""
    head = bytearray()
    async for chunk in response.aiter_raw():
        head += chunk
        if len(head) > head_bytes:
            return bytes(head[:head_bytes]), True
    return bytes(head), False


def _refused(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "refused" in str(error).lower()


def _describe(error: httpx.HTTPError) -> str:
    detail = str(error) or type(error).__name__
    return f"the request failed ({type(error).__name__}: {detail})"
