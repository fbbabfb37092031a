"""The real stack on loopback: uvicorn, PeerCertH11Protocol and ServingTLS."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from fastapi import APIRouter

from apiserver.authn.authenticator import Authenticator
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustStore
from apiserver.authz.sar import SubjectAccessReviewAuthorizer
from apiserver.handlers.caller import CurrentUser
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from apiserver.serving.protocol import client_cert_der
from apiserver.serving.server import uvicorn_config
from apiserver.serving.tls import ServingTLS
from certs.authority import KeyPair, issue


async def echo_cert(scope, receive, send):
    """Answers with the hex DER of the connection's client certificate, or "none"."""
    der = client_cert_der(scope)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": der.hex().encode() if der else b"none"})


@contextlib.asynccontextmanager
async def running(app, tls: ServingTLS) -> AsyncIterator[str]:
    server = uvicorn.Server(uvicorn_config(app, tls, "127.0.0.1", 0))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def client(trusted: KeyPair, cert: KeyPair | None, tmp_path: Path) -> httpx.AsyncClient:
    context = ssl.create_default_context(cadata=trusted.cert_pem().decode())
    if cert is not None:
        cert.write(tmp_path / "client.crt", tmp_path / "client.key")
        context.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
    return httpx.AsyncClient(verify=context)


async def get(url: str, trusted: KeyPair, cert: KeyPair | None, tmp_path: Path,
              **kwargs) -> httpx.Response:
    async with client(trusted, cert, tmp_path) as http:
        return await http.get(url, **kwargs)


def serving_tls(pki, tmp_path: Path, pair: KeyPair | None = None) -> ServingTLS:
    (pair or pki.serving).write(tmp_path / "tls.crt", tmp_path / "tls.key")
    tls = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    tls.set_client_trust(pki.trust().ca_bundle_pem())
    return tls


def peer_cert(response: httpx.Response) -> x509.Certificate:
    ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
    return x509.load_der_x509_certificate(ssl_object.getpeercert(binary_form=True))


async def test_client_cert_reaches_the_scope(pki, tmp_path):
    async with running(echo_cert, serving_tls(pki, tmp_path)) as url:
        without = await get(url, pki.serving_ca, None, tmp_path)
        alice = await get(url, pki.serving_ca, pki.alice, tmp_path)
        proxy = await get(url, pki.serving_ca, pki.front_proxy, tmp_path)
        with pytest.raises(httpx.TransportError):
            await get(url, pki.serving_ca, pki.stranger, tmp_path)
    assert without.text == "none"
    assert bytes.fromhex(alice.text) == pki.der(pki.alice)
    assert bytes.fromhex(proxy.text) == pki.der(pki.front_proxy)


async def test_tls_1_2_is_the_minimum(pki, tmp_path):
    tls = serving_tls(pki, tmp_path)
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    async with running(echo_cert, tls) as url:
        context = ssl.create_default_context(cadata=pki.serving_ca.cert_pem().decode())
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        async with httpx.AsyncClient(verify=context) as http:
            response = await http.get(url)
    ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
    assert ssl_object.version() == "TLSv1.2"


async def test_serving_cert_reloaded_when_files_change(pki, tmp_path):
    tls = serving_tls(pki, tmp_path)
    rotated = issue(pki.other_ca, "notifier-2", ip_addresses=("127.0.0.1",), server=True)
    async with running(echo_cert, tls) as url:
        async with client(pki.serving_ca, None, tmp_path) as kept_alive:
            before = await kept_alive.get(url)
            assert peer_cert(before).serial_number == pki.serving.cert.serial_number

            # Half a rotation (certificate without its key) keeps the old pair.
            (tmp_path / "tls.crt").write_bytes(rotated.cert_pem())
            assert peer_cert(await get(url, pki.serving_ca, None, tmp_path)).serial_number == (
                pki.serving.cert.serial_number)

            (tmp_path / "tls.key").write_bytes(rotated.key_pem())
            after = await get(url, pki.other_ca, None, tmp_path)
            assert peer_cert(after).serial_number == rotated.cert.serial_number
            with pytest.raises(httpx.ConnectError):
                await get(url, pki.serving_ca, None, tmp_path)
            # The client cert still reaches the scope on the new context.
            alice = await get(url, pki.other_ca, pki.alice, tmp_path)
            assert bytes.fromhex(alice.text) == pki.der(pki.alice)
            # An open connection keeps its certificate.
            assert (await kept_alive.get(url)).status_code == 200


async def test_client_trust_replaced_for_new_connections(pki, tmp_path):
    tls = serving_tls(pki, tmp_path)
    async with running(echo_cert, tls) as url:
        assert (await get(url, pki.serving_ca, pki.alice, tmp_path)).text != "none"
        tls.set_client_trust(pki.other_ca.cert_pem().decode())
        stranger = await get(url, pki.serving_ca, pki.stranger, tmp_path)
        assert bytes.fromhex(stranger.text) == pki.der(pki.stranger)
        with pytest.raises(httpx.TransportError):
            await get(url, pki.serving_ca, pki.alice, tmp_path)


async def test_front_proxy_identity_through_the_whole_stack(pki, fake_kube, tmp_path):
    router = APIRouter()

    @router.get("/apis/notifier.x-k8s.io/v1alpha1/namespaces/{namespace}/podnotifiers")
    async def whoami(user: CurrentUser) -> dict:
        return {"name": user.name, "groups": user.groups, "extra": user.extra}

    fake_kube.allow = lambda spec: spec["user"] == "bob"
    kube = fake_kube.client()
    store = TrustStore()
    store.update(pki.trust())
    app = create_app(
        authenticator=Authenticator(store, TokenReviewer(kube, 10)),
        authorizer=SubjectAccessReviewAuthorizer(kube, allowed_ttl=10, denied_ttl=10),
        readiness=Readiness(), resource_router=router)
    headers = [("X-Remote-User", "bob"), ("X-Remote-Group", "a,b"), ("X-Remote-Group", "c"),
               ("X-Remote-Extra-Reason", "why")]
    path = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers"
    async with running(app, serving_tls(pki, tmp_path)) as url:
        proxied = await get(url + path, pki.serving_ca, pki.front_proxy, tmp_path,
                            headers=headers)
        forged = await get(url + path, pki.serving_ca, pki.alice, tmp_path, headers=headers)
    assert proxied.status_code == 200
    assert proxied.json() == {"name": "bob", "groups": ["a,b", "c", "system:authenticated"],
                              "extra": {"reason": ["why"]}}
    assert forged.status_code == 403
    assert 'User "alice"' in forged.json()["message"]
