from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path

import httpx
import pytest
import yaml

from apiserver.kube import (
    Connection,
    KubeClient,
    KubeconfigError,
    KubeRejected,
    KubeUnavailable,
    TokenFile,
    connection_from_kubeconfig,
    in_cluster_connection,
)


def write_kubeconfig(directory: Path, cluster: dict, user: dict) -> Path:
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "contexts": [{"name": "other", "context": {"cluster": "nope", "user": "nope"}},
                     {"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }))
    return path


def test_kubeconfig_with_client_cert_data_and_ca_data(tmp_path, pki):
    path = write_kubeconfig(
        tmp_path,
        {"server": "https://127.0.0.1:6443",
         "certificate-authority-data": base64.b64encode(pki.serving_ca.cert_pem()).decode()},
        {"client-certificate-data": base64.b64encode(pki.alice.cert_pem()).decode(),
         "client-key-data": base64.b64encode(pki.alice.key_pem()).decode()},
    )
    connection = connection_from_kubeconfig(path)
    assert connection.base_url == "https://127.0.0.1:6443"
    assert connection.token is None
    assert connection.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert len(connection.ssl_context.get_ca_certs()) == 1


def test_kubeconfig_with_relative_files_and_token(tmp_path, pki):
    (tmp_path / "ca.crt").write_bytes(pki.serving_ca.cert_pem())
    pki.alice.write(tmp_path / "alice.crt", tmp_path / "alice.key")
    path = write_kubeconfig(tmp_path, {"server": "https://k:6443",
                                       "certificate-authority": "ca.crt"},
                            {"client-certificate": "alice.crt", "client-key": "alice.key",
                             "token": "secret"})
    connection = connection_from_kubeconfig(path)
    assert connection.token is not None and connection.token() == "secret"
    assert KubeClient(connection).auth_headers() == {"Authorization": "Bearer secret"}


def test_kubeconfig_refuses_exec_and_half_a_key_pair(tmp_path, pki):
    path = write_kubeconfig(tmp_path, {"server": "https://k"}, {"exec": {"command": "x"}})
    with pytest.raises(KubeconfigError, match="exec"):
        connection_from_kubeconfig(path)
    path = write_kubeconfig(tmp_path, {"server": "https://k"}, {
        "client-certificate-data": base64.b64encode(pki.alice.cert_pem()).decode()})
    with pytest.raises(KubeconfigError, match="together"):
        connection_from_kubeconfig(path)


def test_in_cluster(tmp_path, pki, monkeypatch):
    (tmp_path / "ca.crt").write_bytes(pki.serving_ca.cert_pem())
    (tmp_path / "token").write_text("tok-1\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    connection = in_cluster_connection(tmp_path)
    assert connection.base_url == "https://[fd00::1]:443"
    assert connection.token is not None and connection.token() == "tok-1"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeconfigError, match="--kubeconfig"):
        in_cluster_connection(tmp_path)


def test_token_file_is_reread_periodically(tmp_path):
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("one")
    tokens = TokenFile(path, reread_seconds=60, clock=lambda: now[0])
    assert tokens.token() == "one"
    path.write_text("two")
    now[0] = 59
    assert tokens.token() == "one"
    now[0] = 60
    assert tokens.token() == "two"


def client(handler) -> KubeClient:
    return KubeClient(Connection("https://kube.test", ssl.create_default_context(),
                                 token=lambda: "t0k"),
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
