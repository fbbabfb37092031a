"""Trust material for authenticating callers, kept current from a kube-system ConfigMap.

kube-apiserver publishes its client CA, its front-proxy (request-header) CA and the request-header
settings in ``kube-system/extension-apiserver-authentication``. `TrustWatcher` keeps an informer
on it and puts each valid version into a `TrustStore`, whose subscribers (the serving TLS context)
follow along, so CA rotation needs no restart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from apiserver.errors import StartupError
from apiserver.kube import KubeClient, KubeRejected, KubeUnavailable, paths
from apiserver.kube.informer import Backoff, Handlers, Informer

log = logging.getLogger(__name__)

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"


@dataclass(frozen=True)
class TrustMaterial:
    """Header names are lower-case, as ASGI delivers them."""

    client_cas: tuple[x509.Certificate, ...] = ()
    requestheader_cas: tuple[x509.Certificate, ...] = ()
    allowed_names: tuple[str, ...] = ()
    """Common names a front-proxy certificate may have; empty allows any."""
    username_headers: tuple[str, ...] = ()
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ()
    extra_header_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str]) -> TrustMaterial:
        """Parse the ConfigMap's data; raises ValueError if a present key is malformed."""
        return cls(
            client_cas=_certificates(data, "client-ca-file"),
            requestheader_cas=_certificates(data, "requestheader-client-ca-file"),
            allowed_names=_strings(data, "requestheader-allowed-names"),
            username_headers=_header_names(data, "requestheader-username-headers"),
            uid_headers=_header_names(data, "requestheader-uid-headers"),
            group_headers=_header_names(data, "requestheader-group-headers"),
            extra_header_prefixes=_header_names(data, "requestheader-extra-headers-prefix"),
        )

    def ca_bundle_pem(self) -> str:
        """Both CAs, for the TLS layer to verify optional client certificates against."""
        unique = dict.fromkeys(
            cert.public_bytes(Encoding.PEM) for cert in self.client_cas + self.requestheader_cas
        )
        return b"".join(unique).decode()


def _certificates(data: Mapping[str, str], key: str) -> tuple[x509.Certificate, ...]:
    pem = data.get(key, "").strip()
    if not pem:
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem.encode()))
    except ValueError as error:
        raise ValueError(f"{key}: {error}") from None


def _strings(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    text = data.get(key, "").strip()
    if not text:
        return ()
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{key}: not JSON: {error}") from None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key}: expected a JSON array of strings")
    return tuple(values)


def _header_names(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    return tuple(name.lower() for name in _strings(data, key) if name)


class TrustStore:
    """The current trust material (None until first loaded) and who to tell when it changes."""

    def __init__(self) -> None:
        self.material: TrustMaterial | None = None
        self._subscribers: list[Callable[[TrustMaterial], None]] = []

    def subscribe(self, callback: Callable[[TrustMaterial], None]) -> None:
        self._subscribers.append(callback)
        if self.material is not None:
            callback(self.material)

    def update(self, material: TrustMaterial) -> None:
        if material == self.material:
            return
        for callback in self._subscribers:
            callback(material)
        self.material = material


class TrustNotReadable(StartupError):
    """kube-apiserver refuses the server's authentication identity the trust ConfigMap: the
    server cannot verify client certificates or front-proxy headers, so it does not start."""


async def check_readable(kube: KubeClient, *, namespace: str = CONFIGMAP_NAMESPACE,
                         name: str = CONFIGMAP_NAME) -> None:
    """Raise ``TrustNotReadable`` (one line: the answer and the RoleBinding that fixes it) if
    kube-apiserver refuses to list the ConfigMap (401, 403, as k8s.io/apiserver refuses to
    start). A missing ConfigMap or an unreachable kube-apiserver is not fatal: the watcher
    waits and retries, and readiness says the trust material is missing."""
    try:
        await kube.get(paths.namespaced(paths.CORE, namespace, "configmaps"),
                       params={"fieldSelector": f"metadata.name={name}"})
    except KubeUnavailable as error:
        log.warning("trust ConfigMap not checked; the watcher retries",
                    extra={"configmap": f"{namespace}/{name}", "error": str(error)})
    except KubeRejected as error:
        if error.status_code not in (401, 403):
            raise
        raise TrustNotReadable(
            f"cannot read configmap {namespace}/{name} ({error.status_code} "
            f"{error.answer_reason or 'error'}: {error.answer.get('message', '')}): bind the "
            f"server's identity (--authentication-kubeconfig, else --kubeconfig or the service "
            f"account) to the Role {namespace}/extension-apiserver-authentication-reader, e.g. "
            f"kubectl create rolebinding -n {namespace} container-notifier-authentication-reader "
            "--role=extension-apiserver-authentication-reader "
            "--serviceaccount=container-notifier:container-notifier "
            "(apiservice/rbac-server.yaml has it)") from None


class TrustWatcher:
    """Keeps the store current from the ConfigMap: an informer on that one object (a field
    selector on its name), so 410s, errors and kube-apiserver restarts are handled (re-listed,
    backed off) as for every other list/watch.

    Start it with ``asyncio.create_task(watcher.run())``; ``watcher.informer.synced`` is set
    once the ConfigMap has been listed (the store's material is set then if it exists and is
    valid)."""

    def __init__(self, kube: KubeClient, store: TrustStore, *,
                 namespace: str = CONFIGMAP_NAMESPACE, name: str = CONFIGMAP_NAME,
                 backoff: Backoff | None = None):
        self._store = store
        self._name = f"{namespace}/{name}"
        self.informer = Informer(kube, paths.namespaced(paths.CORE, namespace, "configmaps"),
                                 name="trust-configmap",
                                 params={"fieldSelector": f"metadata.name={name}"},
                                 backoff=backoff)
        self.informer.add_handlers(Handlers(
            on_add=self._apply, on_update=lambda old, new: self._apply(new),
            on_delete=self._deleted, on_listed=self._listed))

    async def run(self) -> None:
        """Keep the store current until cancelled."""
        await self.informer.run()

    def _listed(self) -> None:
        if not self.informer.list():
            log.warning("trust ConfigMap not found; waiting for it",
                        extra={"configmap": self._name})

    def _deleted(self, configmap: Mapping[str, Any]) -> None:
        log.warning("trust ConfigMap deleted; keeping the last trust material",
                    extra={"configmap": self._name})

    def _apply(self, configmap: Mapping[str, Any]) -> None:
        try:
            material = TrustMaterial.from_configmap_data(configmap.get("data") or {})
            changed = material != self._store.material
            self._store.update(material)
        except (ValueError, OSError) as error:  # ssl.SSLError is an OSError
            log.warning("trust ConfigMap unusable; keeping the last trust material",
                        extra={"error": str(error)})
            return
        if changed:
            log.info("trust material loaded", extra={
                "client_cas": len(material.client_cas),
                "requestheader_cas": len(material.requestheader_cas),
                "allowed_names": list(material.allowed_names),
            })
