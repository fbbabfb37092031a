"""The serving certificate Secret's keys, and `Material` to and from them.

The Secret is of type ``kubernetes.io/tls``; its ``data`` (base64 of PEM):

- ``tls.crt`` / ``tls.key``: the serving certificate and its key (what every replica serves);
- ``ca.crt`` / ``ca.key``: the CA that signs it;
- ``ca-bundle.crt``: the CAs to trust, what the APIService's caBundle holds (``ca.crt``, then
  ``next-ca.crt`` and ``retired-ca.crt`` when present);
- ``next-ca.crt`` / ``next-ca.key``: during a CA rotation, the CA that will sign next;
- ``retired-ca.crt``: after a CA rotation, the CA replaced, until its last certificate expires.

Two annotations carry the rotation's times (RFC 3339): `PUBLISHED_AT` (when the bundle with the
next CA was seen published) and `RETIRED_UNTIL` (until when the retired CA is trusted). A third,
`ROTATE`, is set by an administrator to force a new CA (`rotation_requested`); the write that
replaces the CA removes it.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from apiserver.certificates.plan import Material
from certs.authority import KeyPair

SECRET_TYPE = "kubernetes.io/tls"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"
CA_CERT, CA_KEY = "ca.crt", "ca.key"
CA_BUNDLE = "ca-bundle.crt"
NEXT_CA_CERT, NEXT_CA_KEY = "next-ca.crt", "next-ca.key"
RETIRED_CA_CERT = "retired-ca.crt"
PUBLISHED_AT = "notifier.x-k8s.io/next-ca-published-at"
RETIRED_UNTIL = "notifier.x-k8s.io/retired-ca-trusted-until"
ROTATE = "notifier.x-k8s.io/rotate-ca"
"""Set (any value) to have the server replace the CA at once, without an overlap."""
ANNOTATIONS = (PUBLISHED_AT, RETIRED_UNTIL, ROTATE)
"""The annotations this module owns (others on the Secret are kept)."""
KUBERNETES_ACTS_ON = ("ownerReferences", "finalizers")
"""The metadata through which Kubernetes acts on the Secret (the garbage collector deletes it
with an owner; a finalizer holds its deletion): `disowned` drops them from a Secret the server
did not write."""


class UnusableSecret(ValueError):
    """The Secret's content cannot be read as certificates; the message names the key."""


def _b64(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


def _time(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).isoformat(timespec="microseconds")


def encode(material: Material) -> tuple[dict[str, str], dict[str, str]]:
    """The Secret's ``data`` and the annotations of `ANNOTATIONS` that apply."""
    data = {TLS_CERT: _b64(material.serving.cert_pem()), TLS_KEY: _b64(material.serving.key_pem()),
            CA_CERT: _b64(material.ca.cert_pem()), CA_KEY: _b64(material.ca.key_pem()),
            CA_BUNDLE: _b64(material.bundle_pem())}
    annotations: dict[str, str] = {}
    if material.next_ca is not None:
        data[NEXT_CA_CERT] = _b64(material.next_ca.cert_pem())
        data[NEXT_CA_KEY] = _b64(material.next_ca.key_pem())
        if material.next_ca_published_at is not None:
            annotations[PUBLISHED_AT] = _time(material.next_ca_published_at)
    if material.retired_ca is not None and material.retired_ca_until is not None:
        data[RETIRED_CA_CERT] = _b64(material.retired_ca.public_bytes(Encoding.PEM))
        annotations[RETIRED_UNTIL] = _time(material.retired_ca_until)
    return data, annotations


def _pem(data: Mapping[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data[key], validate=True)
    except KeyError:
        raise UnusableSecret(f"key {key} is missing") from None
    except (binascii.Error, ValueError, TypeError):
        raise UnusableSecret(f"key {key} is not base64") from None


def _pair(data: Mapping[str, str], cert_key: str, key_key: str) -> KeyPair:
    try:
        return KeyPair.from_pem(_pem(data, cert_key), _pem(data, key_key))
    except UnusableSecret:
        raise
    except ValueError as error:
        raise UnusableSecret(f"keys {cert_key}/{key_key}: {error}") from None


def _parsed_time(annotations: Mapping[str, str], key: str) -> datetime.datetime | None:
    text = annotations.get(key)
    if text is None:
        return None
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UnusableSecret(f"annotation {key}={text!r} is not an RFC 3339 time") from None
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def decode(secret: Mapping[str, Any]) -> Material:
    """The Material of a Secret object; UnusableSecret names the key that is not usable."""
    data = secret.get("data") or {}
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    next_ca = (_pair(data, NEXT_CA_CERT, NEXT_CA_KEY) if NEXT_CA_CERT in data else None)
    retired, retired_until = None, _parsed_time(annotations, RETIRED_UNTIL)
    if RETIRED_CA_CERT in data and retired_until is not None:
        try:
            retired = x509.load_pem_x509_certificate(_pem(data, RETIRED_CA_CERT))
        except ValueError as error:
            raise UnusableSecret(f"key {RETIRED_CA_CERT}: {error}") from None
    return Material(
        ca=_pair(data, CA_CERT, CA_KEY), serving=_pair(data, TLS_CERT, TLS_KEY),
        next_ca=next_ca,
        next_ca_published_at=_parsed_time(annotations, PUBLISHED_AT) if next_ca else None,
        retired_ca=retired, retired_ca_until=retired_until if retired else None)


def rotation_requested(secret: Mapping[str, Any]) -> str | None:
    """The value of the Secret's `ROTATE` annotation, None if it has none."""
    value = ((secret.get("metadata") or {}).get("annotations") or {}).get(ROTATE)
    return value if isinstance(value, str) else None


def disowned(secret: Mapping[str, Any]) -> dict[str, Any]:
    """`secret` without the metadata of `KUBERNETES_ACTS_ON`."""
    metadata = {k: v for k, v in (secret.get("metadata") or {}).items()
                if k not in KUBERNETES_ACTS_ON}
    return {**secret, "metadata": metadata}


def with_material(secret: Mapping[str, Any], material: Material) -> dict[str, Any]:
    """`secret` (an existing object, or a new one's metadata) holding `material`: its data
    replaced, this module's annotations set or removed, everything else kept."""
    data, annotations = encode(material)
    metadata = dict(secret.get("metadata") or {})
    kept = {k: v for k, v in (metadata.get("annotations") or {}).items()
            if k not in ANNOTATIONS}
    if kept or annotations:
        metadata["annotations"] = kept | annotations
    else:
        metadata.pop("annotations", None)
    return {**secret, "apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "type": secret.get("type", SECRET_TYPE), "data": data}


def holds(secret: Mapping[str, Any], material: Material) -> bool:
    """The Secret already holds exactly `material` (no write needed)."""
    data, annotations = encode(material)
    found = (secret.get("metadata") or {}).get("annotations") or {}
    return (secret.get("data") or {}) == data and {
        k: v for k, v in found.items() if k in ANNOTATIONS} == annotations
