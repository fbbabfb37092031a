from __future__ import annotations

import asyncio
import json
import ssl

import httpx
import pytest

from apiserver.authn.trust import TrustMaterial, TrustStore, TrustWatcher
from apiserver.kube import Connection, KubeClient
from apiserver.kube.informer import Backoff
from certs.authority import new_ca


def test_parse_configmap(pki):
    material = pki.trust()
    assert material.client_cas == (pki.client_ca.cert,)
    assert material.requestheader_cas == (pki.front_proxy_ca.cert,)
    assert material.allowed_names == ("front-proxy-client",)
    assert material.username_headers == ("x-remote-user",)
    assert material.group_headers == ("x-remote-group",)
    assert material.extra_header_prefixes == ("x-remote-extra-",)
    assert material.uid_headers == ()
    bundle = material.ca_bundle_pem()
    assert bundle.count("BEGIN CERTIFICATE") == 2
    assert pki.client_ca.cert_pem().decode() in bundle


def test_parse_bundle_with_several_cas_and_missing_keys(pki):
    data = {"client-ca-file": (pki.client_ca.cert_pem() + pki.other_ca.cert_pem()).decode()}
    material = TrustMaterial.from_configmap_data(data)
    assert len(material.client_cas) == 2
    assert material.requestheader_cas == ()
    assert material.allowed_names == ()


@pytest.mark.parametrize(("key", "value"), [
    ("requestheader-allowed-names", "front-proxy-client"),
    ("requestheader-username-headers", '{"a": 1}'),
    ("client-ca-file", "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"),
])
def test_parse_rejects_malformed(pki, key, value):
    with pytest.raises(ValueError, match=key):
        TrustMaterial.from_configmap_data({**pki.configmap_data(), key: value})


def test_store_tells_subscribers(pki):
    store, seen = TrustStore(), []
    store.subscribe(seen.append)
    assert seen == []
    store.update(pki.trust())
    store.update(pki.trust())  # unchanged: not told again
    assert seen == [pki.trust()]
    late = []
    store.subscribe(late.append)
    assert late == [pki.trust()]


def fast() -> Backoff:
    return Backoff(initial=0.01, maximum=0.01)


def configmap(data: dict[str, str], resource_version: str) -> dict:
    return {"metadata": {"name": "extension-apiserver-authentication",
                         "namespace": "kube-system", "resourceVersion": resource_version},
            "data": data}


class ScriptedKube:
    """Answers the watcher's requests in order; the last step blocks until cancelled."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.steps:
            await asyncio.sleep(3600)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, list):  # watch events
            return httpx.Response(200, content="".join(json.dumps(e) + "\n" for e in step))
        return httpx.Response(200, json=step)

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


async def wait_for(condition, timeout=5.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_watcher_lists_watches_and_relists_after_expiry(pki):
    rotated_ca = new_ca("client-ca-2")
    v1 = pki.configmap_data()
    v2 = {**v1, "client-ca-file": rotated_ca.cert_pem().decode()}
    v3 = {**v1, "requestheader-allowed-names": '["other-proxy"]'}
    kube = ScriptedKube([
        {"kind": "ConfigMapList", "metadata": {"resourceVersion": "10"},
         "items": [configmap(v1, "9")]},
        [{"type": "MODIFIED", "object": configmap(v2, "11")},
         {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}],
        {"kind": "ConfigMapList", "metadata": {"resourceVersion": "20"},
         "items": [configmap(v3, "19")]},
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "25"}}}],
    ])
    store, seen = TrustStore(), []
    store.subscribe(seen.append)
    task = asyncio.create_task(TrustWatcher(kube.client(), store, backoff=fast()).run())
    try:
        await wait_for(lambda: len(kube.requests) == 5)
    finally:
        task.cancel()
    assert [m.client_cas[0] for m in seen[:2]] == [pki.client_ca.cert, rotated_ca.cert]
    assert seen[2].allowed_names == ("other-proxy",)
    assert len(seen) == 3
    params = [dict(r.url.params) for r in kube.requests]
    assert params[0] == {"fieldSelector": "metadata.name=extension-apiserver-authentication",
                         "limit": "500"}
    assert (params[1]["watch"], params[1]["resourceVersion"]) == ("true", "10")
    assert "watch" not in params[2]
    assert params[3]["resourceVersion"] == "20"
    assert params[4]["resourceVersion"] == "25"  # after the bookmark, the stream ended


async def test_watcher_retries_after_errors_and_keeps_last_good_material(pki):
    good = pki.configmap_data()
    kube = ScriptedKube([
        httpx.ConnectError("refused"),
        {"metadata": {"resourceVersion": "1"}, "items": [configmap(good, "1")]},
        [{"type": "MODIFIED", "object": configmap({**good, "client-ca-file": "junk"}, "2")},
         {"type": "DELETED", "object": configmap(good, "3")}],
    ])
    store = TrustStore()
    task = asyncio.create_task(
        TrustWatcher(kube.client(), store, backoff=fast()).run())
    try:
        await wait_for(lambda: len(kube.requests) == 4)
    finally:
        task.cancel()
    assert store.material == pki.trust()
    assert kube.requests[3].url.params["resourceVersion"] == "3"


async def test_watcher_waits_for_a_missing_configmap(pki, caplog):
    kube = ScriptedKube([
        {"kind": "ConfigMapList", "metadata": {"resourceVersion": "10"}, "items": None},
        [{"type": "ADDED", "object": configmap(pki.configmap_data(), "11")}],
    ])
    store = TrustStore()
    watcher = TrustWatcher(kube.client(), store, backoff=fast())
    task = asyncio.create_task(watcher.run())
    try:
        await wait_for(lambda: len(kube.requests) == 3)
    finally:
        task.cancel()
    assert watcher.informer.has_synced()
    assert store.material == pki.trust()
    assert "trust ConfigMap not found; waiting for it" in caplog.text
