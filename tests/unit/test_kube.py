"""KubeClient: JSON requests and watches, and how failures are classified."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest
from kubernetes.client import Configuration

from apiserver.kube import Connection, Credentials, KubeClient, KubeRejected, KubeUnavailable


def bearer(token: str) -> Credentials:
    configuration = Configuration()
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return Credentials(configuration)


def client(handler) -> KubeClient:
    return KubeClient(Connection("https://kube.test", ssl.create_default_context(),
                                 credentials=bearer("t0k")),
                      transport=httpx.MockTransport(handler))


async def test_requests_carry_the_token_and_return_json():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "ConfigMapList"})

    kube = client(handler)
    assert kube.last_success is None
    assert await kube.get("/api/v1/configmaps", {"limit": "1"}) == {"kind": "ConfigMapList"}
    assert seen[0].headers["authorization"] == "Bearer t0k"
    assert seen[0].url.params["limit"] == "1"
    assert kube.last_success is not None


async def test_connection_failure_is_unavailable():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(KubeUnavailable):
        await client(handler).post("/x", {})


@pytest.mark.parametrize("code", [502, 503, 504])
async def test_gateway_and_unavailable_codes_are_unavailable(code):
    with pytest.raises(KubeUnavailable):
        await client(lambda request: httpx.Response(code, text="busy")).get("/x")


async def test_error_status_is_kube_error():
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
    with pytest.raises(KubeRejected) as caught:
        await client(lambda request: httpx.Response(403, json=status)).get("/x")
    assert (caught.value.status_code, caught.value.answer_reason) == (403, "Forbidden")


async def test_watch_yields_events():
    events = [{"type": "ADDED", "object": {"metadata": {"resourceVersion": "5"}}},
              {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}}]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["watch"] == "true"
        body = "\n".join(json.dumps(event) for event in events) + "\n\n"
        return httpx.Response(200, content=body.encode())

    got = [event async for event in client(handler).watch("/api/v1/configmaps",
                                                           {"timeoutSeconds": "5"})]
    assert got == events


async def test_watch_error_status_raises():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(410, json={"kind": "Status", "code": 410, "reason": "Expired"})

    with pytest.raises(KubeRejected) as caught:
        async for _ in client(handler).watch("/x", {}):
            pass
    assert caught.value.status_code == 410
