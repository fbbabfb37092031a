"""Where kube-apiserver is and how to authenticate to it, from a kubeconfig or in-cluster.

The `kubernetes` package's configuration loaders read the configuration (kubeconfig contexts,
merged KUBECONFIG paths, certificate and token files or inline data, exec credential plugins,
the service account's files); this module turns the `kubernetes.client.Configuration` they fill
into a `Connection` for the async httpx client: an SSL context and `Credentials` that follow the
loader's refresh hook (an exec plugin's token is fetched again once expired, the in-cluster token
file is re-read every minute).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes.client import Configuration
from kubernetes.config import ConfigException, load_kube_config
from kubernetes.config.incluster_config import InClusterConfigLoader

from apiserver.errors import StartupError
from apiserver.kube.tls_sessions import client_context

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CREDENTIALS_CHECK_SECONDS = 10.0
"""How often requests ask the loader's refresh hook whether the credentials are due."""


class KubeconfigError(StartupError, ValueError):
    """The kubeconfig (or the in-cluster configuration) cannot be used."""


class Credentials:
    """The ``Authorization`` header a Configuration's loader provides, kept current.

    `header()` is what requests send. `refresh()` asks the loader's refresh hook at most every
    `check_seconds`, in a thread: the hook may run an exec credential plugin (a subprocess) or
    read a token file, which must not block the event loop.
    """

    def __init__(self, configuration: Configuration, *,
                 check_seconds: float = CREDENTIALS_CHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._configuration = configuration
        self._check_seconds = check_seconds
        self._clock = clock
        # Just loaded: take the header as is rather than running the refresh hook again.
        self._header = str(configuration.api_key.get("BearerToken") or "").strip()
        self._checked_at = clock()
        self._lock = asyncio.Lock()

    def header(self) -> str:
        return self._header

    async def refresh(self) -> None:
        if self._configuration.refresh_api_key_hook is None or not self._due():
            return
        async with self._lock:
            if self._due():
                self._header = await asyncio.to_thread(self._read)
                self._checked_at = self._clock()

    def _due(self) -> bool:
        return self._clock() - self._checked_at >= self._check_seconds

    def _read(self) -> str:
        # The loaders keep a token file's trailing newline, which no header may carry.
        return (self._configuration.get_api_key_with_prefix("BearerToken") or "").strip()


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


def connection_from_kubeconfig(path: Path | str, context: str | None = None, *,
                               flag: str = "--kubeconfig") -> Connection:
    """The connection of the kubeconfig's `context` (default: its current context).

    `path` may list several files separated by ``os.pathsep``, as KUBECONFIG does; they are
    merged the way kubectl merges them. `flag` is the option that named the file, which the
    error tells the user to fix.
    """
    configuration = Configuration()
    try:
        load_kube_config(config_file=str(path), context=context,
                         client_configuration=configuration, persist_config=False)
    # A file that is not a kubeconfig's mapping fails inside the loader as a TypeError,
    # AttributeError or KeyError rather than a ConfigException.
    except (ConfigException, OSError) as error:
        raise KubeconfigError(
            f"kubeconfig {path}: {error}; fix the file or pass another with {flag}") from None
    except (yaml.YAMLError, TypeError, AttributeError, KeyError) as error:
        detail = str(error).replace("\n", " ")
        raise KubeconfigError(
            f"kubeconfig {path}: not a valid kubeconfig ({type(error).__name__}: {detail}); fix "
            f"the file or pass another with {flag}") from None
    return connection_from_configuration(configuration, f"kubeconfig {path}")


def in_cluster_connection(directory: Path = SERVICE_ACCOUNT_DIR,
                          environ: Mapping[str, str] = os.environ) -> Connection:
    """The service account's connection, from KUBERNETES_SERVICE_HOST/PORT and the token and CA
    files in `directory` (the token is re-read every minute, as projected tokens rotate)."""
    configuration = Configuration()
    loader = InClusterConfigLoader(token_filename=str(directory / "token"),
                                   cert_filename=str(directory / "ca.crt"), environ=environ)
    try:
        loader.load_and_set(configuration)
    except (ConfigException, OSError) as error:
        raise KubeconfigError(f"in-cluster configuration: {str(error).rstrip('.')}: outside a "
                              "cluster, pass --kubeconfig=PATH") from None
    return connection_from_configuration(configuration, "in-cluster configuration")


def connection_from_configuration(configuration: Configuration, source: str) -> Connection:
    """The Connection a loaded Configuration describes; `source` names it in errors."""
    if not configuration.host:
        raise KubeconfigError(f"{source}: no server; set the cluster's server")
    context = _ssl_context(configuration, source)
    credentials: Credentials | None = Credentials(configuration)
    if credentials is not None and not credentials.header():
        credentials = None
        if not configuration.cert_file:
            log.warning("kube-apiserver credentials: none (requests are anonymous); if the "
                        "kubeconfig uses an exec plugin, check that it runs",
                        extra={"source": source})
    return Connection(configuration.host, context, credentials,
                      tls_server_name=configuration.tls_server_name or "",
                      proxy=configuration.proxy or "")


def _ssl_context(configuration: Configuration, source: str) -> ssl.SSLContext:
    """The connections' TLS context: it resumes TLS sessions (``tls_sessions``), so each exec's
    new connection makes an abbreviated handshake."""
    try:
        context = client_context(configuration.ssl_ca_cert or None,
                                 verify=configuration.verify_ssl)
    except (ssl.SSLError, OSError) as error:
        raise KubeconfigError(f"{source}: certificate-authority unusable: {error}") from None
    cert, key = configuration.cert_file, configuration.key_file
    if bool(cert) != bool(key):
        raise KubeconfigError(f"{source}: client-certificate and client-key must come together "
                              f"(got only the {'certificate' if cert else 'key'})")
    if cert and key:
        try:
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as error:
            raise KubeconfigError(f"{source}: client certificate unusable: {error}") from None
    return context
