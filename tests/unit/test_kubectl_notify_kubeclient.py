"""The plugin's own kube-apiserver client: a name cannot change the URL a request addresses,
and answers become KubeRejected (an error Status) or KubeUnavailable (no usable answer)."""

from __future__ import annotations

import ssl

import httpx
import pytest

from kubectl_notify.connection import Connection, Credentials
from kubectl_notify.errors import USAGE, UsageError
from kubectl_notify.kubeclient import KubeClient, KubeRejected, KubeUnavailable

sent: list[httpx.Request] = []


def client(status: int, body: object) -> KubeClient:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(status, json=body)
    return KubeClient(Connection("https://kube.test", ssl.create_default_context(),
                                 Credentials("Bearer t")), transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("path", ["/api/v1/namespaces/ns/pods/..", "/api/v1/namespaces/ns/pods/",
                                  "/api/v1/namespaces/ns/pods/%2e%2E", "/api/v1/pods/db?x=1",
                                  "/api/v1/pods/db#x"])
async def test_a_path_that_would_address_another_url_is_not_sent(path: str) -> None:
    sent.clear()
    with pytest.raises(UsageError) as raised:
        await client(200, {}).get(path)
    assert raised.value.exit_code == USAGE and not sent


async def test_answers_carry_the_credentials_and_errors_their_status() -> None:
    sent.clear()
    assert await client(200, {"kind": "Pod"}).get("/api/v1/namespaces/ns/pods/db") == {
        "kind": "Pod"}
    assert sent[0].headers["Authorization"] == "Bearer t"
    assert sent[0].headers["User-Agent"] == "kubectl-notify"
    with pytest.raises(KubeRejected) as rejected:
        await client(403, {"kind": "Status", "reason": "Forbidden"}).get("/api/v1/pods")
    assert (rejected.value.status_code, rejected.value.answer["reason"]) == (403, "Forbidden")
    with pytest.raises(KubeUnavailable, match="answered 503"):
        await client(503, {"message": "down"}).post("/api/v1/pods", {})
