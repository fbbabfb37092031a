"""Trust material for authenticating callers, kept current from a kube-system ConfigMap.

kube-apiserver publishes its client CA, its front-proxy (request-header) CA and the request-header
settings in ``kube-system/extension-apiserver-authentication``. `TrustWatcher` lists and watches
it and puts each valid version into a `TrustStore`, whose subscribers (the serving TLS context)
follow along, so CA rotation needs no restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from apiserver.kube import KubeClient, KubeRejected, KubeUnavailable

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


class _WatchExpired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class TrustWatcher:
    """Lists, then watches, the ConfigMap; re-lists after 410 and, with backoff, after errors."""

    def __init__(self, kube: KubeClient, store: TrustStore, *,
                 namespace: str = CONFIGMAP_NAMESPACE, name: str = CONFIGMAP_NAME,
                 initial_backoff: float = 1.0, max_backoff: float = 30.0,
                 watch_timeout_seconds: int = 300):
        self._kube = kube
        self._store = store
        self._name = name
        self._path = f"/api/v1/namespaces/{namespace}/configmaps"
        self._selector = f"metadata.name={name}"
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._watch_timeout_seconds = watch_timeout_seconds

    async def run(self) -> None:
        """Keep the store current until cancelled."""
        backoff = self._initial_backoff
        while True:
            try:
                resource_version = await self._list()
                backoff = self._initial_backoff
                while True:
                    resource_version = await self._watch(resource_version)
            except _WatchExpired:
                log.info("trust ConfigMap watch expired; listing again")
            except (KubeUnavailable, KubeRejected, ValueError) as error:
                log.warning("trust ConfigMap list/watch failed; retrying",
                            extra={"error": str(error), "retry_seconds": backoff})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    async def _list(self) -> str:
        listing = await self._kube.get(self._path, params={"fieldSelector": self._selector})
        items = listing.get("items") or []
        if items:
            self._apply(items[0])
        else:
            log.warning("trust ConfigMap not found; waiting for it",
                        extra={"configmap": f"{CONFIGMAP_NAMESPACE}/{self._name}"})
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, resource_version: str) -> str:
        """Apply events until the server ends the watch; return the last resourceVersion seen."""
        params = {
            "fieldSelector": self._selector,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._watch_timeout_seconds),
        }
        try:
            async for event in self._kube.watch(self._path, params):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _WatchExpired()
                    raise KubeRejected(int(obj.get("code") or 500), obj)
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if kind in ("ADDED", "MODIFIED"):
                    self._apply(obj)
                elif kind == "DELETED":
                    log.warning("trust ConfigMap deleted; keeping the last trust material")
        except KubeRejected as error:
            if error.status_code == 410:
                raise _WatchExpired() from None
            raise
        return resource_version

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
