"""What every storage backend does alike: checking a new object, the size cap, generating names,
encoding, metadata."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Mapping
from typing import Any

from apiserver.registry.errors import AlreadyExists, BadRequest, TooLarge, required
from apiserver.registry.resources import ResourceType

# Kubernetes' generateName: at most 58 characters of the prefix, then 5 characters from an
# alphabet without vowels and look-alike characters (k8s.io/apimachinery/pkg/util/rand).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
_MAX_GENERATED_PREFIX = 63 - _SUFFIX_LENGTH


GENERATE_NAME_ATTEMPTS = 8
"""Names tried for a generateName before giving up (each is a fresh random suffix)."""


def generate_name(prefix: str) -> str:
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return prefix[:_MAX_GENERATED_PREFIX] + suffix


def encode(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def checked_new(resource: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` to create: 422 without a namespace or a name/generateName, 400 with a
    resourceVersion; the backend sets the identity metadata (uid, creationTimestamp)."""
    prepared = copy.deepcopy(dict(obj))
    meta = prepared.setdefault("metadata", {})
    if not meta.get("namespace"):
        raise required(resource, "metadata.namespace")
    if not meta.get("name") and not meta.get("generateName"):
        raise required(resource, "metadata.name", detail="name or generateName")
    if meta.get("resourceVersion"):
        raise BadRequest("resourceVersion should not be set on objects to be created")
    return prepared


def check_size(resource: ResourceType, obj: Mapping[str, Any], max_bytes: int) -> None:
    """``TooLarge`` if `obj` encodes to more than `max_bytes`, measured with its server-owned
    metadata (uid, resourceVersion, creationTimestamp) at their longest, so that the same
    object passes or fails alike on every backend, before and after they are set, and in a
    dry run (``ObjectStore.check_create``)."""
    meta = metadata(obj)
    sized = {**obj, "metadata": {**meta, "uid": "0" * 36, "resourceVersion": "9" * 19,
                                 "creationTimestamp": "2000-01-01T00:00:00Z"}}
    size = len(encode(sized).encode())
    if size > max_bytes:
        name = str(meta.get("name") or meta.get("generateName") or "")
        raise TooLarge(
            f'{resource.qualified} "{name}" is too large: {size} bytes, the limit is '
            f"{max_bytes}; store less in it (fewer or shorter labels and annotations, less "
            "output in status)", resource=resource, name=name)


def already_exists(resource: ResourceType, name: str) -> AlreadyExists:
    return AlreadyExists(f'{resource.qualified} "{name}" already exists', resource=resource,
                         name=name)


def no_free_name(resource: ResourceType, prefix: str) -> AlreadyExists:
    return AlreadyExists(
        f'{resource.qualified}: no free name from generateName "{prefix}" after '
        f"{GENERATE_NAME_ATTEMPTS} attempts; use a longer prefix", resource=resource)

