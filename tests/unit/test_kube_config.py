"""Connections from kubeconfigs and in-cluster configuration, loaded by the `kubernetes`
package's loaders: contexts, inline and file credentials, exec plugins and their refresh."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import Configuration
from kubernetes.config import incluster_config, load_kube_config
from kubernetes.config.incluster_config import InClusterConfigLoader

from apiserver.kube import (
    Connection,
    Credentials,
    KubeClient,
    KubeconfigError,
    connection_from_kubeconfig,
    in_cluster_connection,
)


def write_kubeconfig(directory: Path, cluster: dict[str, Any], user: dict[str, Any],
                     other_user: dict[str, Any] | None = None) -> Path:
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "contexts": [{"name": "other", "context": {"cluster": "c", "user": "o"}},
                     {"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}, {"name": "o", "user": other_user or {}}],
    }))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_client_certificate_and_ca_data(tmp_path: Path, pki: Any) -> None:
    path = write_kubeconfig(
        tmp_path,
        {"server": "https://127.0.0.1:6443",
         "certificate-authority-data": b64(pki.serving_ca.cert_pem())},
        {"client-certificate-data": b64(pki.alice.cert_pem()),
         "client-key-data": b64(pki.alice.key_pem())},
    )
    connection = connection_from_kubeconfig(path)
    assert connection.base_url == "https://127.0.0.1:6443"
    assert connection.credentials is None
    assert connection.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert len(connection.ssl_context.get_ca_certs()) == 1
    assert KubeClient(connection).auth_headers() == {}


def test_relative_files_and_a_token(tmp_path: Path, pki: Any) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.serving_ca.cert_pem())
    pki.alice.write(tmp_path / "alice.crt", tmp_path / "alice.key")
    path = write_kubeconfig(tmp_path, {"server": "https://k:6443",
                                       "certificate-authority": "ca.crt"},
                            {"client-certificate": "alice.crt", "client-key": "alice.key",
                             "token": "secret"})
    connection = connection_from_kubeconfig(path)
    assert connection.credentials is not None
    assert KubeClient(connection).auth_headers() == {"Authorization": "Bearer secret"}


def test_token_file_and_another_context(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    path = write_kubeconfig(tmp_path, {"server": "https://k", "insecure-skip-tls-verify": True},
                            {"token": "current"}, other_user={"tokenFile": "token"})
    assert KubeClient(connection_from_kubeconfig(path)).auth_headers() == {
        "Authorization": "Bearer current"}
    other = connection_from_kubeconfig(path, context="other")
    assert KubeClient(other).auth_headers() == {"Authorization": "Bearer from-file"}
    assert other.ssl_context.verify_mode == ssl.CERT_NONE


def test_tls_server_name_is_sent_as_sni(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, {"server": "https://10.0.0.1", "tls-server-name": "kube"},
                            {"token": "t"})
    connection = connection_from_kubeconfig(path)
    assert connection.tls_server_name == "kube"


async def test_tls_server_name_reaches_the_transport(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    connection = Connection("https://10.0.0.1", ssl.create_default_context(),
                            tls_server_name="kube")
    await KubeClient(connection, transport=httpx.MockTransport(handler)).get("/x")
    assert seen[0].extensions["sni_hostname"] == "kube"


def test_refuses_half_a_key_pair_and_unreadable_files(tmp_path: Path, pki: Any) -> None:
    path = write_kubeconfig(tmp_path, {"server": "https://k"}, {
        "client-certificate-data": b64(pki.alice.cert_pem())})
    with pytest.raises(KubeconfigError, match="together"):
        connection_from_kubeconfig(path)
    with pytest.raises(KubeconfigError, match="--kubeconfig"):
        connection_from_kubeconfig(tmp_path / "missing")
    path = write_kubeconfig(tmp_path, {"server": "https://k",
                                       "certificate-authority": "nope.crt"}, {"token": "t"})
    with pytest.raises(KubeconfigError, match="nope.crt"):
        connection_from_kubeconfig(path)


PLUGIN = """
import json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential",
                  "status": {"token": f"exec-{n}", "expirationTimestamp": sys.argv[2]}}))
"""


def exec_kubeconfig(tmp_path: Path, expires_in: datetime.timedelta) -> Path:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    expiry = (datetime.datetime.now(datetime.UTC) + expires_in).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    return write_kubeconfig(tmp_path, {"server": "https://k", "insecure-skip-tls-verify": True}, {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                 "args": [str(tmp_path / "plugin.py"), str(tmp_path / "count"), expiry]}})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def exec_credentials(tmp_path: Path, expires_in: datetime.timedelta, clock: Clock
                     ) -> Credentials:
    """Credentials as `connection_from_kubeconfig` makes them, on a clock the test moves."""
    configuration = Configuration()
    load_kube_config(config_file=str(exec_kubeconfig(tmp_path, expires_in)),
                     client_configuration=configuration, persist_config=False)
    return Credentials(configuration, check_seconds=10, clock=clock)


async def test_exec_plugin_token_is_fetched_again_once_expired(tmp_path: Path) -> None:
    clock = Clock()
    # Within the loader's 5-minute skew, a token counts as expired.
    credentials = exec_credentials(tmp_path, datetime.timedelta(minutes=1), clock)
    assert credentials.header() == "Bearer exec-1"
    await credentials.refresh()  # not due yet: the plugin is not run again
    assert credentials.header() == "Bearer exec-1"

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, json={})

    clock.now = 10
    kube = KubeClient(Connection("https://k", ssl.create_default_context(), credentials),
                      transport=httpx.MockTransport(handler))
    await kube.get("/x")
    await kube.get("/y")
    assert seen == ["Bearer exec-2", "Bearer exec-2"]
    assert kube.auth_headers() == {"Authorization": "Bearer exec-2"}
    assert (tmp_path / "count").read_text() == "2"


async def test_exec_plugin_token_is_kept_while_valid(tmp_path: Path) -> None:
    clock = Clock()
    credentials = exec_credentials(tmp_path, datetime.timedelta(hours=1), clock)
    clock.now = 60
    await credentials.refresh()
    assert credentials.header() == "Bearer exec-1"
    assert (tmp_path / "count").read_text() == "1"


def test_an_exec_kubeconfig_loads_through_the_plugin(tmp_path: Path) -> None:
    connection = connection_from_kubeconfig(exec_kubeconfig(tmp_path, datetime.timedelta(hours=1)))
    assert KubeClient(connection).auth_headers() == {"Authorization": "Bearer exec-1"}


def test_in_cluster(tmp_path: Path, pki: Any) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.serving_ca.cert_pem())
    (tmp_path / "token").write_text("tok-1\n")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = in_cluster_connection(tmp_path, environ)
    assert connection.base_url == "https://[fd00::1]:443"
    assert connection.credentials is not None
    assert connection.credentials.header() == "bearer tok-1"  # the scheme is case-blind
    assert len(connection.ssl_context.get_ca_certs()) == 1
    with pytest.raises(KubeconfigError, match="--kubeconfig"):
        in_cluster_connection(tmp_path, {})


def test_kubeconfig_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config",
                                "current-context": "missing", "contexts": [],
                                "clusters": [], "users": []}))
    with pytest.raises(KubeconfigError, match=str(path)):
        connection_from_kubeconfig(path)


async def test_in_cluster_token_is_reread_once_a_minute(tmp_path: Path, pki: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Projected service account tokens rotate: the loader re-reads the file after a minute."""
    (tmp_path / "ca.crt").write_bytes(pki.serving_ca.cert_pem())
    (tmp_path / "token").write_text("tok-1")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    clock = Clock()
    configuration = Configuration()
    InClusterConfigLoader(str(tmp_path / "token"), str(tmp_path / "ca.crt"),
                          environ=environ).load_and_set(configuration)
    credentials = Credentials(configuration, check_seconds=10, clock=clock)
    (tmp_path / "token").write_text("tok-2")

    clock.now = 10
    await credentials.refresh()
    assert credentials.header() == "bearer tok-1"  # read less than a minute ago

    later = datetime.datetime.now() + datetime.timedelta(minutes=2)

    class Later(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Later:
            return cls.fromtimestamp(later.timestamp(), tz)

    monkeypatch.setattr(incluster_config, "datetime",
                        SimpleNamespace(datetime=Later, timedelta=datetime.timedelta))
    clock.now = 20
    await credentials.refresh()
    assert credentials.header() == "bearer tok-2"
