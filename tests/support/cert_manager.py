"""cert-manager simulated for the chart's cert-manager mode: no cert-manager runs here.

- CRDS: minimal Issuer and Certificate CustomResourceDefinitions of cert-manager.io/v1 (their
  schemas accept any fields: the real ones validate them; the chart's objects are only read).
- `issue` does what cert-manager's controllers do for the kinds the chart uses: a Certificate
  whose Issuer is `selfSigned` gets a self-signed CA (isCA), one whose Issuer is `ca` a leaf
  signed by that Issuer's Secret, with the Certificate's commonName and dnsNames, into its
  secretName (tls.crt, tls.key, ca.crt, as cert-manager writes them); the Certificate gets the
  condition Ready=True.
- `inject_ca` does what cainjector does for an APIService annotated
  cert-manager.io/inject-ca-from: <namespace>/<Certificate>: its spec.caBundle becomes the
  ca.crt of that Certificate's Secret.
Not simulated: renewal, private key options, usages, durations, the real CRDs' validation.
"""

from __future__ import annotations

import base64
from typing import Any

from certs.authority import KeyPair, issue, new_ca
from tests.support.kube import Cluster

GROUP = "cert-manager.io"
API = f"/apis/{GROUP}/v1"
INJECT_ANNOTATION = "cert-manager.io/inject-ca-from"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"


def _crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


CRDS = (_crd("Issuer", "issuers"), _crd("Certificate", "certificates"))


def install_crds(cluster: Cluster) -> None:
    cluster.apply(*CRDS)
    for crd in CRDS:
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        f"crd/{crd['metadata']['name']}")


def _key_pair(secret: dict[str, Any]) -> KeyPair:
    data = secret["data"]
    return KeyPair.from_pem(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))


def _secret(name: str, namespace: str, certificate: str, pair: KeyPair,
            ca_pem: bytes) -> dict[str, Any]:
    def b64(pem: bytes) -> str:
        return base64.b64encode(pem).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"cert-manager.io/certificate-name": certificate}},
            "data": {"tls.crt": b64(pair.cert_pem()), "tls.key": b64(pair.key_pem()),
                     "ca.crt": b64(ca_pem)}}


def issue_certificates(cluster: Cluster, namespace: str) -> list[str]:
    """Issue every Certificate of `namespace` whose Issuer can sign (CAs first); returns the
    Certificates' names in the order issued."""
    with cluster.admin() as kube:
        certificates = kube.get(f"{API}/namespaces/{namespace}/certificates").json()["items"]
        issuers = {i["metadata"]["name"]: i for i in
                   kube.get(f"{API}/namespaces/{namespace}/issuers").json()["items"]}
    issued: list[str] = []
    pending = list(certificates)
    while pending:
        progress = False
        for cert in list(pending):
            spec, name = cert["spec"], cert["metadata"]["name"]
            issuer = issuers[spec["issuerRef"]["name"]]["spec"]
            if "selfSigned" in issuer:
                assert spec.get("isCA"), f"Certificate {name}: only CAs are self-signed here"
                pair = new_ca(spec.get("commonName", name))
                ca_pem = pair.cert_pem()
            else:
                ca_secret = issuer["ca"]["secretName"]
                with cluster.admin() as kube:
                    found = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{ca_secret}")
                if found.status_code == 404:
                    continue  # its CA is issued in a later round
                ca = _key_pair(found.json())
                dns = tuple(spec.get("dnsNames", ()))
                pair = issue(ca, spec.get("commonName", dns[0]), dns_names=dns, server=True)
                ca_pem = ca.cert_pem()
            cluster.apply(_secret(spec["secretName"], namespace, name, pair, ca_pem))
            _mark_ready(cluster, namespace, name)
            issued.append(name)
            pending.remove(cert)
            progress = True
        assert progress, f"Certificates {[c['metadata']['name'] for c in pending]}: no issuer"
    return issued


def _mark_ready(cluster: Cluster, namespace: str, name: str) -> None:
    with cluster.admin() as kube:
        response = kube.patch(
            f"{API}/namespaces/{namespace}/certificates/{name}",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"status": {"conditions": [{"type": "Ready", "status": "True",
                                             "reason": "Issued",
                                             "message": "issued by the test's simulation"}]}})
    assert response.status_code == 200, response.text


def inject_ca(cluster: Cluster) -> list[str]:
    """Set spec.caBundle of every APIService annotated INJECT_ANNOTATION; returns their names."""
    injected = []
    with cluster.admin() as kube:
        for apiservice in kube.get(APISERVICES).json()["items"]:
            source = apiservice["metadata"].get("annotations", {}).get(INJECT_ANNOTATION)
            if not source:
                continue
            namespace, certificate = source.split("/", 1)
            cert = kube.get(f"{API}/namespaces/{namespace}/certificates/{certificate}")
            assert cert.status_code == 200, f"{INJECT_ANNOTATION}: {source}: {cert.text}"
            secret_name = cert.json()["spec"]["secretName"]
            secret = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{secret_name}")
            assert secret.status_code == 200, f"Secret {secret_name} of {source}: {secret.text}"
            name = apiservice["metadata"]["name"]
            response = kube.patch(f"{APISERVICES}/{name}",
                                  headers={"Content-Type": "application/merge-patch+json"},
                                  json={"spec": {"caBundle": secret.json()["data"]["ca.crt"]}})
            assert response.status_code == 200, response.text
            injected.append(name)
    return injected
