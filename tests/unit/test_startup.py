"""Starting the server: which kube-apiserver client each delegated review uses, and the
one-line error (exit 1, no traceback) of each startup misconfiguration."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from apiserver import __main__ as entry
from apiserver.authn.trust import TrustNotReadable, check_readable
from apiserver.certificates.reconciler import CertificateBootstrapFailed
from apiserver.config import SQLITE, InvalidOptions, ServerOptions, flag_name, flag_of
from apiserver.errors import StartupError
from apiserver.handlers.watch_response import Watches
from apiserver.kube import KubeClient, KubeconfigError
from apiserver.kube.config import Connection
from apiserver.registry.errors import DataDirInUse, StorageNotInstalled
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.server import KubeClients, build_app, connect, serve
from apiserver.serving.health import Draining
from apiserver.serving.tls import ServingCertificateUnusable, ServingTLS

from .conftest import FakeKube

REPO = Path(__file__).resolve().parents[2]
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKENREVIEW = "/apis/authentication.k8s.io/v1/tokenreviews"
CONFIGMAPS = "/api/v1/namespaces/kube-system/configmaps"


def options(tmp_path: Path, **changes: Any) -> ServerOptions:
    return ServerOptions(**{"tls_cert_file": tmp_path / "tls.crt",
                            "tls_private_key_file": tmp_path / "tls.key",
                            "data_dir": tmp_path / "data", "storage": SQLITE, **changes})


class Factory:
    """Stands in for KubeClient.from_kubeconfig and .in_cluster: a distinct object per call,
    remembering what it was made from."""

    def __init__(self) -> None:
        self.made: dict[int, str] = {}

    def from_kubeconfig(self, path: Path, *, flag: str) -> Any:
        return self._make(f"{flag}={path}")

    def in_cluster(self) -> Any:
        return self._make("in-cluster")

    def _make(self, source: str) -> Any:
        client = object()
        self.made[id(client)] = source
        return client

    def sources(self, clients: KubeClients) -> tuple[str, str, str]:
        return (self.made[id(clients.main)], self.made[id(clients.authentication)],
                self.made[id(clients.authorization)])


@pytest.mark.parametrize(("changes", "sources", "distinct"), [
    ({}, ("in-cluster",) * 3, 1),
    ({"kubeconfig": Path("/main")}, ("--kubeconfig=/main",) * 3, 1),
    ({"kubeconfig": Path("/main"), "authentication_kubeconfig": Path("/authn")},
     ("--kubeconfig=/main", "--authentication-kubeconfig=/authn", "--kubeconfig=/main"), 2),
    ({"authorization_kubeconfig": Path("/authz")},
     ("in-cluster", "in-cluster", "--authorization-kubeconfig=/authz"), 2),
    ({"kubeconfig": Path("/main"), "authentication_kubeconfig": Path("/authn"),
      "authorization_kubeconfig": Path("/authz")},
     ("--kubeconfig=/main", "--authentication-kubeconfig=/authn",
      "--authorization-kubeconfig=/authz"), 3),
    ({"kubeconfig": Path("/main"), "authentication_kubeconfig": Path("/main")},
     ("--kubeconfig=/main",) * 3, 1),
])
def test_each_review_client_comes_from_its_kubeconfig_else_the_main_one(
        tmp_path, changes, sources, distinct):
    factory = Factory()
    clients = connect(options(tmp_path, **changes), factory.from_kubeconfig, factory.in_cluster)
    assert factory.sources(clients) == sources
    assert len(clients.distinct()) == distinct


def test_an_unusable_review_kubeconfig_names_its_flag(tmp_path):
    kubeconfig = tmp_path / "authz.kubeconfig"
    kubeconfig.write_text("x: [")
    with pytest.raises(KubeconfigError) as refused:
        connect(options(tmp_path, kubeconfig=None, authorization_kubeconfig=kubeconfig),
                in_cluster=Factory().in_cluster)
    message = str(refused.value)
    assert message.startswith(f"kubeconfig {kubeconfig}: not a valid kubeconfig (")
    assert message.endswith("fix the file or pass another with --authorization-kubeconfig")
    assert "\n" not in message


class Recording:
    """A fake kube-apiserver client that records the paths it is sent: `FakeKube` answers
    reviews and Leases, the trust ConfigMap is listed, other lists are empty, watches fail."""

    def __init__(self, fake: FakeKube, configmap: dict[str, Any]) -> None:
        self.paths: list[str] = []
        self._fake, self._configmap = fake, configmap
        self.closed = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.method == "GET" and "watch" not in request.url.params:
            if request.url.path == CONFIGMAPS:
                return httpx.Response(200, json={"items": [self._configmap],
                                                 "metadata": {"resourceVersion": "1"}})
            if "/leases/" not in request.url.path:  # Leases are read by name
                return httpx.Response(200, json={"items": None,
                                                 "metadata": {"resourceVersion": "1"}})
        return self._fake.handle(request)

    def client(self) -> KubeClient:
        recording = self
        client = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                            transport=httpx.MockTransport(self.handle))
        close = client.aclose

        async def aclose() -> None:
            recording.closed = True
            await close()

        client.aclose = aclose  # type: ignore[method-assign]
        return client


async def test_token_reviews_and_trust_go_to_the_authentication_client_and_access_reviews_to_the_authorization_client(  # noqa: E501
        fake_kube, pki, tmp_path):
    fake_kube.tokens["good"] = {"username": "carol"}
    fake_kube.allow = lambda spec: True
    configmap = {"metadata": {"name": "extension-apiserver-authentication"},
                 "data": pki.configmap_data()}
    main, authn, authz = (Recording(fake_kube, configmap) for _ in range(3))
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    opts = options(tmp_path)
    app = build_app(opts, main.client(), ServingTLS(opts.tls_cert_file, opts.tls_private_key_file),
                    await SqliteDatabase.open(opts.data_dir), Watches(), Draining(), "replica-0",
                    authentication=authn.client(), authorization=authz.client())
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=transport, base_url="https://notifier.test") as http:
        async with asyncio.timeout(5):
            while (await http.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.01)
        answer = await http.get("/metrics", headers={"authorization": "Bearer good"})
        assert answer.status_code == 200
    assert TOKENREVIEW in authn.paths and CONFIGMAPS in authn.paths
    assert SAR in authz.paths
    assert SAR not in authn.paths and TOKENREVIEW not in authz.paths
    assert not {SAR, TOKENREVIEW, CONFIGMAPS} & set(main.paths)
    assert any("/leases" in path for path in main.paths)  # the rest goes through main
    assert main.closed and authn.closed and authz.closed


def status(code: int, reason: str, message: str) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": message})


def answering(response: httpx.Response | Exception) -> KubeClient:
    def handle(request: httpx.Request) -> httpx.Response:
        if isinstance(response, Exception):
            raise response
        return response

    return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(handle))


@pytest.mark.parametrize("code", [401, 403])
async def test_a_refused_trust_configmap_is_a_startup_error_naming_the_role(code):
    denied = ('configmaps is forbidden: User "system:serviceaccount:x:y" cannot list resource '
              '"configmaps" in API group "" in the namespace "kube-system"')
    with pytest.raises(TrustNotReadable) as refused:
        await check_readable(answering(status(code, "Forbidden", denied)))
    message = str(refused.value)
    assert message.startswith(
        f"cannot read configmap kube-system/extension-apiserver-authentication ({code} Forbidden: "
        f"{denied}): bind the server's identity (--authentication-kubeconfig")
    assert "--role=extension-apiserver-authentication-reader" in message
    assert "\n" not in message


async def test_a_readable_or_unreachable_trust_configmap_does_not_stop_the_start(caplog):
    await check_readable(answering(httpx.Response(200, json={"items": []})))
    await check_readable(answering(httpx.ConnectError("refused")))
    assert "trust ConfigMap not checked; the watcher retries" in caplog.text


def test_unreadable_serving_files_name_the_flag(tmp_path, pki):
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    with pytest.raises(ServingCertificateUnusable, match=(
            r"^--tls-cert-file=/nonexistent: cannot read it \(No such file or directory\): "
            "give a readable PEM certificate$")):
        ServingTLS(Path("/nonexistent"), tmp_path / "tls.key")
    with pytest.raises(ServingCertificateUnusable, match=(
            rf"^--tls-private-key-file={tmp_path}: cannot read it \(Is a directory\)")):
        ServingTLS(tmp_path / "tls.crt", tmp_path)


def test_serving_files_that_are_not_pem_or_do_not_match_say_so(tmp_path, pki):
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    pki.alice.write(tmp_path / "alice.crt", tmp_path / "alice.key")
    (tmp_path / "junk").write_text("not pem")
    with pytest.raises(ServingCertificateUnusable,
                       match=r"^--tls-cert-file=.*/tls.key: not a PEM certificate: give"):
        ServingTLS(tmp_path / "tls.key", tmp_path / "tls.key")
    with pytest.raises(ServingCertificateUnusable,
                       match=r"^--tls-private-key-file=.*/junk: not a PEM private key"):
        ServingTLS(tmp_path / "tls.crt", tmp_path / "junk")
    with pytest.raises(ServingCertificateUnusable, match=(
            r"^--tls-cert-file=.*/tls.crt with --tls-private-key-file=.*/alice.key cannot be "
            r"loaded \(KEY_VALUES_MISMATCH\): give the serving certificate")):
        ServingTLS(tmp_path / "tls.crt", tmp_path / "alice.key")


def connected_to(monkeypatch: pytest.MonkeyPatch,
                 handle: Callable[[httpx.Request], httpx.Response]) -> Recording:
    """Make `serve` connect every client to `handle` (a Recording, to see it closed)."""
    recording = Recording(FakeKube(), {})
    recording.handle = handle  # type: ignore[method-assign]
    client = recording.client()
    monkeypatch.setattr("apiserver.server.connect",
                        lambda options: KubeClients(client, client, client))
    return recording


@pytest.mark.parametrize(("storage", "answers", "error"), [
    ("kubernetes", {"/apis/apiextensions.k8s.io/": status(404, "NotFound", "not found")},
     StorageNotInstalled),
    ("sqlite", {CONFIGMAPS: status(403, "Forbidden", "no")}, TrustNotReadable),
])
async def test_serve_stops_before_serving_and_closes_its_clients(
        monkeypatch, tmp_path, pki, storage, answers, error):
    """The storage CRDs (with --storage=kubernetes) and the trust ConfigMap are checked before
    anything is served; what fails is a StartupError, and the clients are closed."""
    def handle(request: httpx.Request) -> httpx.Response:
        for prefix, response in answers.items():
            if request.url.path.startswith(prefix):
                return response
        return httpx.Response(200, json={"items": []})

    recording = connected_to(monkeypatch, handle)
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    with pytest.raises(error):
        await serve(options(tmp_path, storage=storage))
    assert recording.closed
    assert not (tmp_path / "data").exists()  # nothing opened


async def test_bootstrap_mode_refused_the_secret_stops_before_serving(monkeypatch, tmp_path):
    """Without TLS files the certificate is bootstrapped first; a refusal is one line naming
    the Role to grant, nothing is written to --cert-dir and the clients are closed."""
    def handle(request: httpx.Request) -> httpx.Response:
        if "/secrets/" in request.url.path:
            return status(403, "Forbidden", "secrets is forbidden")
        return httpx.Response(200, json={"items": []})

    recording = connected_to(monkeypatch, handle)
    with pytest.raises(CertificateBootstrapFailed, match=(
            r"^cannot bootstrap the serving certificate in secret "
            r"container-notifier/container-notifier-serving-cert \(403 Forbidden: secrets is "
            r"forbidden\): grant .* \(Role container-notifier:serving-cert in ")):
        await serve(options(tmp_path, tls_cert_file=None, tls_private_key_file=None,
                            cert_dir=tmp_path / "certs"))
    assert recording.closed
    assert not (tmp_path / "certs").exists()


def test_every_startup_misconfiguration_is_a_startup_error():
    for kind in (InvalidOptions, KubeconfigError, ServingCertificateUnusable,
                 StorageNotInstalled, TrustNotReadable, DataDirInUse, CertificateBootstrapFailed):
        assert issubclass(kind, StartupError), kind


@pytest.mark.usefixtures("restore_logging")
def test_main_prints_a_startup_error_as_one_line_and_exits_1(monkeypatch, capsys, tmp_path):
    async def refuse(options: ServerOptions) -> None:
        raise StartupError("--something=x: wrong; do y")

    monkeypatch.setattr(entry, "serve", refuse)
    with pytest.raises(SystemExit) as exited:
        entry.main(["--tls-cert-file", "c", "--tls-private-key-file", "k"])
    assert exited.value.code == "container-notifier-apiserver: error: --something=x: wrong; do y"


@pytest.mark.usefixtures("restore_logging")
def test_main_warns_about_each_deprecated_flag_and_logs_at_the_verbosity(
        monkeypatch, capsys, tmp_path):
    seen: list[ServerOptions] = []

    async def record(options: ServerOptions) -> None:
        seen.append(options)
        logging.getLogger("apiserver.test").debug("debug line")

    monkeypatch.setattr(entry, "serve", record)
    entry.main(["--tls-cert-file", "c", "--tls-private-key-file", "k", "-v", "2",
                "--authorization-denied-cache-ttl", "3s"])
    assert seen[0].authorization_webhook_cache_unauthorized_ttl == 3.0
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (lines[0]["level"], lines[0]["msg"]) == (
        "warning", "Flag --authorization-denied-cache-ttl has been deprecated, use "
                   "--authorization-webhook-cache-unauthorized-ttl instead")
    assert ("debug", "debug line") in [(line["level"], line["msg"]) for line in lines]


def run_server(*argv: str, environ: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("KUBERNETES_SERVICE")}
    return subprocess.run([sys.executable, "-m", "apiserver", *argv], cwd=REPO,
                          env={**env, **(environ or {})}, capture_output=True, text=True,
                          timeout=60)


def one_line_error(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 1, process.stderr
    assert process.stdout == ""
    assert "Traceback" not in process.stderr
    lines = process.stderr.splitlines()
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith("container-notifier-apiserver: error: ")
    return lines[0]


def test_the_process_without_a_kubeconfig_outside_a_cluster(tmp_path, pki):
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    line = one_line_error(run_server("--tls-cert-file", str(tmp_path / "tls.crt"),
                                     "--tls-private-key-file", str(tmp_path / "tls.key")))
    assert line.endswith("in-cluster configuration: Service host/port is not set: outside a "
                         "cluster, pass --kubeconfig=PATH")


def test_the_process_with_a_missing_serving_certificate(tmp_path):
    line = one_line_error(run_server("--tls-cert-file", "/nonexistent",
                                     "--tls-private-key-file", "/nonexistent"))
    assert line.endswith("--tls-cert-file=/nonexistent: cannot read it (No such file or "
                         "directory): give a readable PEM certificate")


def test_the_process_prints_its_version():
    process = run_server("--version")
    assert process.returncode == 0
    assert process.stdout.startswith("container-notifier ")
    assert len(process.stdout.split()) == 2


def test_the_docs_list_each_deprecated_alias_with_its_replacement():
    text = (REPO / "docs" / "startup.md").read_text()
    documented = set(re.findall(r"^\| `(--[a-z-]+)` \| `(--[a-z-]+)` \|$", text, re.MULTILINE))
    declared = {(alias, flag_name(field)) for field in dataclasses.fields(ServerOptions)
                for alias in flag_of(field).deprecated}
    assert documented == declared
