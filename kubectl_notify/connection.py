"""Where kube-apiserver is and how to authenticate to it: a `Connection`, its TLS context and
its `Credentials`, as client-go builds them from a kubeconfig's cluster and user.

`kubeconfig` reads the files and picks the cluster and user; this module turns them into what
requests use:

- TLS: ``certificate-authority-data`` (base64 PEM), else ``certificate-authority`` (a file),
  else the system's trust store; ``insecure-skip-tls-verify`` (refused together with a CA, as
  client-go does); client certificates from ``client-certificate[-data]`` and
  ``client-key[-data]`` (data wins over the file, as in client-go).
- Credentials: ``token``, else ``tokenFile`` (re-read every minute), else ``username`` and
  ``password`` (basic), else an ``exec`` credential plugin (client.authentication.k8s.io v1 or
  v1beta1: run once, run again after its ``expirationTimestamp``; a certificate it returns
  authenticates TLS), else the ``oidc`` auth-provider's ``id-token``.

The plugin keeps this small loader rather than depending on the `kubernetes` package (which
pulls requests, urllib3, google-auth, oauthlib and websocket-client, and imports its whole
generated client at start): see docs/kubectl-notify.md, "Install".
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kubectl_notify.errors import ConfigError

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
TOKEN_FILE_SECONDS = 60.0
"""How long a token file's content is used before it is read again (client-go's period)."""
EXPIRY_MARGIN_SECONDS = 10.0
"""An exec credential is fetched again this long before its expirationTimestamp."""


class Credentials:
    """The ``Authorization`` header requests send; `refresh()` renews it when it is due."""

    def __init__(self, header: str) -> None:
        self._header = header

    def header(self) -> str:
        return self._header

    async def refresh(self) -> None:
        """Renew the header if it is due (a no-op for a fixed token)."""


class TokenFile(Credentials):
    """A bearer token read from a file, again every `period` seconds (projected tokens
    rotate)."""

    def __init__(self, path: Path, source: str, *, period: float = TOKEN_FILE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path, self._source, self._period, self._clock = path, source, period, clock
        super().__init__(self._read())
        self._read_at = clock()

    def _read(self) -> str:
        try:
            token = self._path.read_text().strip()
        except OSError as error:
            raise ConfigError(f"{self._source}: token file {self._path}: {error.strerror}; "
                              "fix tokenFile or the file") from None
        return f"Bearer {token}"

    async def refresh(self) -> None:
        if self._clock() - self._read_at >= self._period:
            self._header = await asyncio.to_thread(self._read)
            self._read_at = self._clock()


@dataclass(frozen=True)
class ExecResult:
    """What an exec credential plugin printed: a token, or a client certificate and key (PEM),
    and when it expires (epoch seconds, None: never)."""

    token: str
    certificate: str
    key: str
    expires: float | None


class ExecCredentials(Credentials):
    """A token from an exec credential plugin, fetched again once it expires."""

    def __init__(self, run: Callable[[], ExecResult], first: ExecResult, *,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(f"Bearer {first.token}")
        self._run, self._expires, self._clock = run, first.expires, clock
        self._lock = asyncio.Lock()

    def _due(self) -> bool:
        return self._expires is not None and self._clock() >= self._expires - EXPIRY_MARGIN_SECONDS

    async def refresh(self) -> None:
        if not self._due():
            return
        async with self._lock:
            if self._due():
                result = await asyncio.to_thread(self._run)
                self._header, self._expires = f"Bearer {result.token}", result.expires


@dataclass(frozen=True)
class Connection:
    """Where kube-apiserver is and how to authenticate to it.

    `credentials` is None when a client certificate (in `ssl_context`) authenticates, or
    nothing does. `tls_server_name` overrides the name the server certificate is checked
    against (kubeconfig ``tls-server-name``); `proxy` is the kubeconfig's ``proxy-url``.
    """

    base_url: str
    ssl_context: ssl.SSLContext
    credentials: Credentials | None = None
    tls_server_name: str = ""
    proxy: str = ""


def connection(cluster: Mapping[str, Any], user: Mapping[str, Any], source: str) -> Connection:
    """The Connection of a kubeconfig `cluster` and `user` entry (paths in them already
    absolute); `source` names them in errors (e.g. ``kubeconfig F: user "u"``)."""
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"{source}: the cluster has no server; set clusters[].cluster.server")
    context = tls_context(cluster, source)
    certificate = _data_or_file(user, "client-certificate", source)
    key = _data_or_file(user, "client-key", source)
    credentials: Credentials | None = None
    if user.get("token"):
        credentials = Credentials(f"Bearer {str(user['token']).strip()}")
    elif user.get("tokenFile"):
        credentials = TokenFile(Path(str(user["tokenFile"])), source)
    elif user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        credentials = Credentials(f"Basic {base64.b64encode(pair).decode()}")
    elif isinstance(user.get("exec"), Mapping):
        spec, info = user["exec"], _cluster_info(cluster)

        def run() -> ExecResult:
            return run_exec(spec, info, source)
        first = run()
        if first.token:
            credentials = ExecCredentials(run, first)
        if first.certificate:
            certificate, key = first.certificate, first.key
    elif isinstance(user.get("auth-provider"), Mapping):
        credentials = Credentials(f"Bearer {_oidc_token(user['auth-provider'], source)}")
    if bool(certificate) != bool(key):
        raise ConfigError(f"{source}: client-certificate and client-key must come together "
                          f"(got only the {'certificate' if certificate else 'key'})")
    if certificate:
        _load_pair(context, certificate, key, source)
    return Connection(server, context, credentials,
                      tls_server_name=str(cluster.get("tls-server-name") or ""),
                      proxy=str(cluster.get("proxy-url") or ""))


def tls_context(cluster: Mapping[str, Any], source: str) -> ssl.SSLContext:
    """Verifies the server with the cluster's CA (or the system's), or not at all."""
    authority = _data_or_file(cluster, "certificate-authority", source)
    if cluster.get("insecure-skip-tls-verify"):
        if authority:
            raise ConfigError(f"{source}: specifying a root certificates file with the insecure "
                              "flag is not allowed; drop certificate-authority or "
                              "insecure-skip-tls-verify")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cadata=authority or None)
    except (ssl.SSLError, ValueError) as error:
        raise ConfigError(f"{source}: certificate-authority unusable: {error}") from None


def _data_or_file(entry: Mapping[str, Any], field: str, source: str) -> str:
    """The PEM text of ``<field>-data`` (base64), else of the file ``<field>``; "" if neither."""
    data = entry.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{source}: {field}-data is not base64 of a PEM file") from None
    path = entry.get(field)
    if not path:
        return ""
    try:
        return Path(str(path)).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: {field} {path}: "
                          f"{getattr(error, 'strerror', None) or error}") from None


def _load_pair(context: ssl.SSLContext, certificate: str, key: str, source: str) -> None:
    """Load a PEM certificate and key given as text (the ssl module reads only files: they
    are written to a private temporary directory and removed at once)."""
    with tempfile.TemporaryDirectory(prefix="kubectl-notify-") as directory:
        cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert_path.write_text(certificate)
        key_path.touch(mode=0o600)
        key_path.write_text(key)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as error:
            raise ConfigError(f"{source}: client certificate unusable: {error}") from None


def _cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The ExecCredential ``spec.cluster`` of a cluster entry (for provideClusterInfo)."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for field, name in (("tls-server-name", "tls-server-name"),
                        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
                        ("proxy-url", "proxy-url")):
        if cluster.get(field):
            info[name] = cluster[field]
    if cluster.get("certificate-authority-data"):
        info["certificate-authority-data"] = cluster["certificate-authority-data"]
    elif cluster.get("certificate-authority"):
        try:
            authority = Path(str(cluster["certificate-authority"])).read_bytes()
            info["certificate-authority-data"] = base64.b64encode(authority).decode()
        except OSError:
            pass
    extension = next((e.get("extension") for e in cluster.get("extensions") or []
                      if isinstance(e, Mapping)
                      and e.get("name") == "client.authentication.k8s.io/exec"), None)
    if extension is not None:
        info["config"] = extension
    return info


def run_exec(spec: Mapping[str, Any], cluster: Mapping[str, Any], source: str,
             environ: Mapping[str, str] = os.environ) -> ExecResult:
    """Run an exec credential plugin as client-go does and read the ExecCredential it prints.

    Its stderr is the user's; its stdin is the user's only when the plugin may be interactive
    (``interactiveMode`` IfAvailable or Always, and stdin is a terminal)."""
    api_version = str(spec.get("apiVersion") or "")
    command = str(spec.get("command") or "")
    where = f"{source}: exec plugin {command!r}"
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"{where}: apiVersion {api_version!r} is not supported; use "
                          f"{' or '.join(EXEC_API_VERSIONS)}")
    if not command:
        raise ConfigError(f"{source}: exec plugin has no command; set users[].user.exec.command")
    mode = spec.get("interactiveMode") or ("IfAvailable" if api_version.endswith("v1beta1")
                                           else "")
    if mode not in INTERACTIVE_MODES:
        raise ConfigError(f"{where}: interactiveMode {mode!r} is not one of "
                          f"{', '.join(INTERACTIVE_MODES)} (required with {api_version})")
    interactive = mode != "Never" and sys.stdin is not None and sys.stdin.isatty()
    if mode == "Always" and not interactive:
        raise ConfigError(f"{where}: interactiveMode is Always but stdin is not a terminal; "
                          "run it from a terminal")
    request: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential",
                               "spec": {"interactive": interactive}}
    if spec.get("provideClusterInfo"):
        request["spec"]["cluster"] = cluster
    env = {**environ, **{str(v.get("name")): str(v.get("value", ""))
                         for v in spec.get("env") or [] if isinstance(v, Mapping)},
           "KUBERNETES_EXEC_INFO": json.dumps(request)}
    args = [command, *(str(arg) for arg in spec.get("args") or [])]
    try:
        ran = subprocess.run(args, env=env, stdout=subprocess.PIPE, text=True,
                             stdin=None if interactive else subprocess.DEVNULL, check=False)
    except OSError as error:
        hint = f"; {spec['installHint']}" if spec.get("installHint") else ""
        raise ConfigError(f"{where}: cannot run it: {error.strerror}{hint}") from None
    if ran.returncode != 0:
        raise ConfigError(f"{where} exited {ran.returncode}; see its message above")
    return _exec_result(ran.stdout, api_version, where)


def _exec_result(output: str, api_version: str, where: str) -> ExecResult:
    try:
        answer = json.loads(output)
    except ValueError:
        raise ConfigError(f"{where} printed no ExecCredential JSON: {output[:200]!r}") from None
    if (not isinstance(answer, dict) or answer.get("kind") != "ExecCredential"
            or answer.get("apiVersion") != api_version):
        raise ConfigError(f"{where} printed no ExecCredential of {api_version} (kind "
                          f"ExecCredential, apiVersion {api_version})")
    status = answer.get("status") or {}
    token = str(status.get("token") or "")
    certificate = str(status.get("clientCertificateData") or "")
    key = str(status.get("clientKeyData") or "")
    if not token and not (certificate and key):
        raise ConfigError(f"{where}: its ExecCredential has neither status.token nor both "
                          "status.clientCertificateData and status.clientKeyData")
    expires: float | None = None
    if status.get("expirationTimestamp"):
        try:
            expires = datetime.fromisoformat(
                str(status["expirationTimestamp"]).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ConfigError(f"{where}: status.expirationTimestamp "
                              f"{status['expirationTimestamp']!r} is not an RFC 3339 time"
                              ) from None
    return ExecResult(token, certificate, key, expires)


def _oidc_token(provider: Mapping[str, Any], source: str) -> str:
    """The oidc auth-provider's id-token, while it has not expired (kubectl refreshes it with
    the refresh-token and writes it back; this plugin does not write kubeconfigs)."""
    name = provider.get("name")
    config = provider.get("config") or {}
    if name != "oidc" or not config.get("id-token"):
        raise ConfigError(f"{source}: auth-provider {name!r} is not supported (kubectl 1.26+ "
                          "dropped gcp and azure too); use an exec credential plugin "
                          "(gke-gcloud-auth-plugin, kubelogin) or an oidc id-token")
    token = str(config["id-token"])
    try:
        claims_part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(claims_part + "=" * (-len(claims_part) % 4)))
        expires = float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{source}: the oidc id-token is not a JWT with an exp claim"
                          ) from None
    if expires <= time.time():
        raise ConfigError(f"{source}: the oidc id-token expired; run any kubectl command to "
                          "refresh it, or use an exec credential plugin (kubelogin)")
    return token


def in_cluster(directory: Path, environ: Mapping[str, str]) -> Connection:
    """A pod's service account: KUBERNETES_SERVICE_HOST/PORT, the token (re-read every minute)
    and CA files in `directory`."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get(
        "KUBERNETES_SERVICE_PORT", "")
    source = "in-cluster configuration"
    if not host or not port:
        raise ConfigError(f"{source}: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must "
                          "be set; outside a cluster, pass --kubeconfig=PATH")
    host = f"[{host}]" if ":" in host else host
    context = tls_context({"certificate-authority": str(directory / "ca.crt")}, source)
    return Connection(f"https://{host}:{port}", context, TokenFile(directory / "token", source))
