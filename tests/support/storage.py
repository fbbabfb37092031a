"""Where the server keeps its storage objects on the local control plane (docs/storage.md):
every one in the server's namespace, named after its public object."""

from __future__ import annotations

from typing import Any

import httpx

from apiserver.registry.kube_objects import NAMESPACE_LABEL, STORAGE_API, storage_name
from localcluster.pki import NOTIFIER_NAMESPACE

STORAGE_NAMESPACE = NOTIFIER_NAMESPACE
"""The local control plane's --storage-namespace."""


def storage_path(plural: str, namespace: str = "", name: str = "") -> str:
    """The storage collection (in the storage namespace), or the storage object of the public
    object ``namespace/name``."""
    path = f"{STORAGE_API}/namespaces/{STORAGE_NAMESPACE}/{plural}"
    return f"{path}/{storage_name(namespace, name)}" if name else path


def stored(kube: httpx.Client, plural: str, namespace: str) -> list[dict[str, Any]]:
    """The storage objects of `plural` whose public objects are in `namespace`."""
    response = kube.get(storage_path(plural),
                        params={"labelSelector": f"{NAMESPACE_LABEL}={namespace}"})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items
