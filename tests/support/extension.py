"""Helpers for tests of the extension server: its own ports (HAProxy's, or one replica's), its
metrics and request logs summed over the replicas, and the trust ConfigMap that kube-apiserver
publishes."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from certs.authority import KeyPair
from localcluster import plane, processes
from localcluster.notifier import APISERVICE_NAME
from tests.support.kube import Cluster, User

API = "/apis/notifier.x-k8s.io/v1alpha1"
TRUST_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
FORBIDDEN_OR_UNAUTHORIZED = (401, 403)


def notify_path(namespace: str, pod: str) -> str:
    return f"{API}/namespaces/{namespace}/pods/{pod}/notify"


def notify_body(notifier: str = "reload") -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "spec": {"notifier": notifier}}


def cluster_pair(cluster: Cluster, stem: str) -> KeyPair:
    """A certificate and key of the local control plane's pki/ directory."""
    return KeyPair.load(cluster.layout.pki / f"{stem}.crt", cluster.layout.pki / f"{stem}.key")


_LAST_BUNDLE: dict[Path, str] = {}
"""Each plane's CA bundle as last read, for tests that reach the server while kube-apiserver is
stopped."""


def serving_ca_bundle(cluster: Cluster) -> str:
    """The CAs the aggregator trusts for the server: the APIService's caBundle, which the
    replicas keep equal to their bootstrapped CA bundle (docs/certificates.md); the last one
    read while kube-apiserver does not answer."""
    try:
        with cluster.admin(timeout=10.0) as admin:
            answer = admin.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}")
    except httpx.TransportError:
        if cluster.layout.root in _LAST_BUNDLE:
            return _LAST_BUNDLE[cluster.layout.root]
        raise
    answer.raise_for_status()
    bundle = base64.b64decode(answer.json()["spec"]["caBundle"]).decode()
    _LAST_BUNDLE[cluster.layout.root] = bundle
    return bundle


def server_ssl_context(cluster: Cluster, cert: KeyPair | None = None,
                       ca: str | None = None) -> ssl.SSLContext:
    """Trusts the extension server's serving CA bundle, as the aggregator does (or, given `ca`,
    pki/<ca>.crt); presents `cert` as the client certificate. The bootstrapped certificate
    names the Service (container-notifier.container-notifier.svc), not the loopback address
    dialed here, so only the chain is verified, not the name."""
    if ca is None:
        context = ssl.create_default_context(cadata=serving_ca_bundle(cluster))
        context.check_hostname = False
    else:
        context = ssl.create_default_context(cafile=str(cluster.layout.pki / f"{ca}.crt"))
    if cert is not None:
        with tempfile.TemporaryDirectory(prefix="client-cert-") as directory:
            cert_path, key_path = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            cert.write(cert_path, key_path)
            context.load_cert_chain(cert_path, key_path)
    return context


def server_port(cluster: Cluster, replica: int | None = None) -> int:
    """HAProxy's port (the service, as the aggregator dials it) or, given `replica`, that
    replica's own port."""
    return cluster.ports.notifier if replica is None else cluster.replica_port(replica)


def direct(cluster: Cluster, cert: KeyPair | None = None, timeout: float = 15.0,
           replica: int | None = None) -> httpx.Client:
    """A client of the extension server itself (not through kube-apiserver): through HAProxy,
    which picks a ready replica per connection, or of replica `replica` alone."""
    return httpx.Client(base_url=f"https://127.0.0.1:{server_port(cluster, replica)}",
                        verify=server_ssl_context(cluster, cert), timeout=timeout)


def kube_apiserver(cluster: Cluster, cert: KeyPair | None = None) -> httpx.Client:
    """A client of kube-apiserver that presents `cert` (or no credentials)."""
    return httpx.Client(base_url=cluster.server, verify=server_ssl_context(cluster, cert, "ca"),
                        timeout=15.0)


def scrape_replica(cluster: Cluster, replica: int) -> dict[str, float]:
    """Replica `replica`'s samples from /metrics, keyed ``name`` or ``name{label="value",...}``
    (labels sorted), read as admin (system:masters, so the scrape itself needs no
    SubjectAccessReview and moves no review counter)."""
    with direct(cluster, cluster_pair(cluster, "admin"), replica=replica) as server:
        response = server.get("/metrics")
    assert response.status_code == 200, response.text
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def scrape(cluster: Cluster) -> dict[str, float]:
    """The service's samples: each sample summed over every replica's /metrics (as
    scrape_replica reads them). Counters and histogram buckets add up to the service's totals;
    a gauge becomes the sum over the replicas (in-flight requests, running executions)."""
    total: dict[str, float] = {}
    for replica in range(cluster.replicas):
        for key, value in scrape_replica(cluster, replica).items():
            total[key] = total.get(key, 0.0) + value
    return total


def logged(cluster: Cluster, msg: str, replica: int | None = None) -> list[dict[str, Any]]:
    """The log entries (JSON lines) with message `msg` of every replica, replica 0's first, or
    of replica `replica` only."""
    entries = []
    recorded = plane.replicas(cluster.layout)
    for proc in recorded if replica is None else [recorded[replica]]:
        log = processes.log_path(cluster.layout.logs, proc.name)
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") == msg:
                    entries.append(entry)
    return entries


def logged_requests(cluster: Cluster, path: str, replica: int | None = None
                    ) -> list[dict[str, Any]]:
    """The access log entries for `path` (see `logged`)."""
    return [entry for entry in logged(cluster, "request", replica) if entry.get("path") == path]


def read_trust_configmap(cluster: Cluster) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(TRUST_CONFIGMAP)
    assert response.status_code == 200, response.text
    return response.json()


def write_trust_data(cluster: Cluster, data: dict[str, str]) -> None:
    """Replace the ConfigMap's data (retrying on conflicts with kube-apiserver's controller)."""
    for _ in range(5):
        configmap = read_trust_configmap(cluster)
        configmap["data"] = data
        with cluster.admin() as kube:
            response = kube.put(TRUST_CONFIGMAP, json=configmap)
        if response.status_code != 409:
            assert response.status_code == 200, response.text
            return
    raise AssertionError("could not write the trust ConfigMap: conflicts")


@contextlib.contextmanager
def trust_configmap_restored(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Yields the ConfigMap's data; puts it back as it was, whatever the test did."""
    original = dict(read_trust_configmap(cluster)["data"])
    try:
        yield dict(original)
    finally:
        write_trust_data(cluster, original)


def pem_certificates(bundle: str) -> set[str]:
    """The PEM blocks of a bundle, normalised, for set comparisons."""
    marker = "-----END CERTIFICATE-----"
    return {block.strip() + "\n" + marker for block in bundle.split(marker) if block.strip()}


@dataclass(frozen=True)
class RawAnswer:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def raw_request(host_port: tuple[str, int], context: ssl.SSLContext, method: str, path: str,
                body: Any = None, headers: Mapping[str, str] | None = None,
                timeout: float = 30.0) -> RawAnswer:
    """Send `path` byte for byte (no client normalises ``..`` or re-encodes it, as httpx
    and curl without --path-as-is would) and read the whole answer."""
    connection = http.client.HTTPSConnection(*host_port, context=context, timeout=timeout)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        all_headers = {"Content-Type": "application/json", "Accept": "application/json",
                       **(headers or {})}
        connection.request(method, path, body=payload, headers=all_headers)
        response = connection.getresponse()
        return RawAnswer(response.status, response.read().decode("utf-8", "replace"))
    finally:
        connection.close()


def raw_via_aggregator(cluster: Cluster, user: User, method: str, path: str, body: Any = None
                       ) -> RawAnswer:
    """`path` sent as is to kube-apiserver (which proxies it to the server) as `user`."""
    return raw_request(("127.0.0.1", cluster.ports.apiserver), user.ssl_context(), method, path,
                       body)


def raw_direct(cluster: Cluster, user: User, method: str, path: str, body: Any = None,
               replica: int | None = None) -> RawAnswer:
    """`path` sent as is to the server (through HAProxy, or to replica `replica`), as `user`
    (through its front proxy's certificate and headers, as kube-apiserver's aggregator sends
    it)."""
    context = server_ssl_context(cluster, cluster_pair(cluster, "front-proxy-client"))
    return raw_request(("127.0.0.1", server_port(cluster, replica)), context, method, path,
                       body, proxied_as(user))


def proxied_as(user: User) -> dict[str, str]:
    """The front proxy's identity header for `user`, a user without groups (the server adds
    system:authenticated, as kube-apiserver's aggregator would send it)."""
    assert not user.groups, "send one X-Remote-Group header per group for a user with groups"
    return {"X-Remote-User": user.name}
