"""The extension server's trust in kube-apiserver: it fails closed while kube-apiserver is
down, and follows CA rotation in kube-system/extension-apiserver-authentication without a
restart. Both tests change shared state (they stop kube-apiserver, rewrite the ConfigMap) and
put it back before they end."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from certs.authority import KeyPair, issue, new_ca
from localcluster import plane
from tests.support.control_plane import restart_kube_apiserver
from tests.support.extension import (
    API,
    cluster_pair,
    direct,
    notify_body,
    notify_path,
    pem_certificates,
    read_trust_configmap,
    scrape,
    trust_configmap_restored,
    write_trust_data,
)
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster

FRONT_PROXY_CN = "front-proxy-client"


def test_requests_needing_a_review_get_503_while_kube_apiserver_is_down(
        cluster: Cluster) -> None:
    """Fail closed: a user whose access is not cached cannot be authorized, so 503, never
    allowed. And when kube-apiserver starts again it merges its own CAs and names into what
    the trust ConfigMap holds (a union): CAs that others added stay."""
    fresh = issue(cluster_pair(cluster, "ca"), f"fresh-{uuid.uuid4().hex[:8]}", client=True)
    added_ca = new_ca("added-before-restart")
    errors = "container_notifier_authorization_review_errors_total"
    with trust_configmap_restored(cluster) as data:
        own = {key: pem_certificates(data[key])
               for key in ("client-ca-file", "requestheader-client-ca-file")}
        added = added_ca.cert_pem().decode()
        write_trust_data(cluster, {
            **data,
            "client-ca-file": data["client-ca-file"] + added,
            "requestheader-client-ca-file": data["requestheader-client-ca-file"] + added,
            "requestheader-allowed-names": json.dumps([FRONT_PROXY_CN, "added-proxy"]),
        })
        plane.stop_component(cluster.layout, "kube-apiserver")
        try:
            errors_before = scrape(cluster)[errors]
            with direct(cluster, fresh) as server:
                answers = [server.get(API), server.get(f"{API}/namespaces/default/podnotifiers"),
                           server.post(notify_path("default", "p"), json=notify_body())]
            with direct(cluster) as server:
                token = {"Authorization": f"Bearer never-seen-{uuid.uuid4().hex}"}
                with_token = server.get(API, headers=token)
            after = scrape(cluster)
        finally:
            restart_kube_apiserver(cluster)
        for response in answers:
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["reason"] == "ServiceUnavailable"
            assert body["message"].startswith(
                "cannot authorize the request: kube-apiserver is unavailable")
        assert after[errors] - errors_before == len(answers)
        # A bearer token cannot be checked either (TokenReview): 503 too, not 401.
        assert with_token.status_code == 503, with_token.text
        assert with_token.json()["message"].startswith(
            "cannot authenticate the request: kube-apiserver is unavailable")
        assert after["container_notifier_authentication_review_errors_total"] >= 1

        merged = read_trust_configmap(cluster)["data"]
        for key, certificates in own.items():
            assert pem_certificates(merged[key]) == certificates | pem_certificates(added)
        assert json.loads(merged["requestheader-allowed-names"]) == [
            FRONT_PROXY_CN, "added-proxy"]


def _who(cluster: Cluster, cert: KeyPair, user: str) -> str:
    """How replica 0 treats `cert` with ``X-Remote-User: user`` on a new connection:
    "honoured" (403 naming `user`), "refused-tls" (handshake failed) or the HTTP code. (One
    replica: each follows the ConfigMap on its own, a moment apart.)"""
    try:
        with direct(cluster, cert, timeout=5, replica=0) as server:
            response = server.get(f"{API}/namespaces/default/podnotifiers",
                                  headers={"X-Remote-User": user})
    except httpx.TransportError:
        return "refused-tls"
    if response.status_code == 403 and f'User "{user}"' in response.json()["message"]:
        return "honoured"
    return str(response.status_code)


def test_request_header_ca_rotation_takes_effect_without_restart(cluster: Cluster) -> None:
    """Rotate the front-proxy CA between two CAs made here, keeping kube-apiserver's own
    (it would add it back anyway, and the aggregator needs it)."""
    ca_a, ca_b = new_ca("front-proxy-ca-a"), new_ca("front-proxy-ca-b")
    proxy_a = issue(ca_a, FRONT_PROXY_CN, client=True)
    proxy_b = issue(ca_b, FRONT_PROXY_CN, client=True)
    user_a, user_b = f"via-a-{uuid.uuid4().hex[:6]}", f"via-b-{uuid.uuid4().hex[:6]}"
    with trust_configmap_restored(cluster) as data:
        own_bundle = data["requestheader-client-ca-file"]
        assert _who(cluster, proxy_a, user_a) == "refused-tls"

        write_trust_data(cluster, {**data, "requestheader-client-ca-file":
                                   own_bundle + ca_a.cert_pem().decode()})
        wait_until(lambda: _who(cluster, proxy_a, user_a) == "honoured",
                   "CA-A's front-proxy certificate to be honoured", timeout=10, interval=0.1)
        kept_alive = direct(cluster, proxy_a, timeout=5, replica=0)
        with kept_alive:
            first = kept_alive.get(f"{API}/namespaces/default/podnotifiers",
                                   headers={"X-Remote-User": user_a})
            assert f'User "{user_a}"' in first.json()["message"]

            write_trust_data(cluster, {**data, "requestheader-client-ca-file":
                                       own_bundle + ca_b.cert_pem().decode()})
            wait_until(lambda: _who(cluster, proxy_b, user_b) == "honoured",
                       "CA-B's front-proxy certificate to be honoured", timeout=10,
                       interval=0.1)
            # A new connection with CA-A's certificate fails the TLS handshake.
            assert _who(cluster, proxy_a, user_a) == "refused-tls"
            # A connection opened while CA-A was trusted: the certificate is checked against
            # the current CAs on every request, so the headers no longer count (401). If the
            # server closed the idle connection, the new handshake fails instead.
            try:
                later = kept_alive.get(f"{API}/namespaces/default/podnotifiers",
                                       headers={"X-Remote-User": user_a})
            except httpx.TransportError:
                later = None
            if later is not None:
                assert later.status_code == 401, later.text
                assert later.json()["reason"] == "Unauthorized"
        # The cluster's own front proxy was trusted throughout.
        assert _who(cluster, cluster_pair(cluster, "front-proxy-client"), user_b) == "honoured"
