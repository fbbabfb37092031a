"""The storage objects of the Kubernetes backend: the CRDs that hold each public resource, their
names, labels and envelope, and the check that they are installed.

A record ``podnotifiers/<ns>/<name>`` is stored as ``storedpodnotifiers/<storage ns>/<ns>.<name>``
of ``storage.notifier.x-k8s.io/v1alpha1`` (CRDs in ``apiservice/storage-crds.yaml``; the name:
``storage_name``), in the server's own namespace, where no tenant's namespace-scoped grant
reaches. The public object is the storage object's ``object`` field, its whole metadata included
(name, namespace, uid, creationTimestamp: the server sets them), with the storage object's
resourceVersion (``public_of``). Every storage object carries the ``INSTANCE_LABEL`` of the
installation that wrote it, the ``NAMESPACE_LABEL`` of its public namespace, its ``SEQUENCE_LABEL``
and a label per indexed field (``storage_labels``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apiserver.kube.client import KubeClient, KubeRejected, KubeUnavailable
from apiserver.kube.paths import segment
from apiserver.registry.errors import StorageNotInstalled
from apiserver.registry.objects import metadata
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import field_value
from apiserver.registry.store import Object

Key = tuple[str, str]
"""A public object's (namespace, name)."""

STORAGE_GROUP = "storage.notifier.x-k8s.io"
STORAGE_VERSION = "v1alpha1"
STORAGE_API = f"/apis/{STORAGE_GROUP}/{STORAGE_VERSION}"
INSTANCE_LABEL = f"{STORAGE_GROUP}/installation"
"""The installation (instance) that wrote a storage object. Not layout 1's label
(``layout_migration.LAYOUT1_INSTANCE_LABEL``), so that a replica of layout 1 still running
during an upgrade does not see this layout's objects (it would read them as objects of the
storage namespace, and its collector would delete them as records of pods that do not exist)."""
DEFAULT_INSTANCE = "container-notifier"
NAMESPACE_LABEL = f"{STORAGE_GROUP}/namespace"
"""The public object's namespace, on every storage object (to select a namespace's objects)."""
SEQUENCE_LABEL = f"{STORAGE_GROUP}/sequence"
"""The storage object's ``sequence`` (creation order), so that one DELETE of the collection can
select "no later than" a member of a cohort."""
_FIELD_LABEL_DIGITS = 32
CREATED_REVISION = "createdRevision"
"""The storage objects' field that keeps the resourceVersion of their creation (every update
writes it), by which a cohort admits a create among the members created before it."""
MAX_NAME_LENGTH = 253
"""A custom resource's name is a DNS-1123 subdomain."""
_NAME_DIGEST_LENGTH = 16


@dataclass(frozen=True)
class StorageKind:
    """The CRD that stores one public resource."""

    plural: str
    kind: str
    indexed_fields: tuple[str, ...] = ()
    """The public resource's ``indexed_fields``, each mirrored on the storage object as a
    label (``field_label``), so that kube-apiserver selects a cohort's members itself."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{STORAGE_GROUP}"

    @property
    def collection(self) -> str:
        return f"{STORAGE_API}/{self.plural}"


def storage_kind(resource: ResourceType) -> StorageKind:
    """``podnotifiers`` (``PodNotifier``) is stored as ``storedpodnotifiers``
    (``StoredPodNotifier``)."""
    return StorageKind(f"stored{resource.plural}", f"Stored{resource.kind}",
                       resource.indexed_fields)


def field_label(field: str) -> str:
    """The storage label that mirrors the public indexed field ``field`` (``spec.podName``:
    ``storage.notifier.x-k8s.io/spec.podName``)."""
    return f"{STORAGE_GROUP}/{field}"


def field_label_value(value: str) -> str:
    """A field's value as a label value: the start of its SHA-256 (any text, any length, fits
    the 63 characters of a label value)."""
    return hashlib.sha256(value.encode()).hexdigest()[:_FIELD_LABEL_DIGITS]


def storage_labels(kind: StorageKind, instance: str, obj: Object, sequence: int
                   ) -> dict[str, str]:
    """The labels of the storage object that holds the public object ``obj``."""
    return {INSTANCE_LABEL: instance, NAMESPACE_LABEL: metadata(obj)["namespace"],
            SEQUENCE_LABEL: str(sequence),
            **{field_label(field): field_label_value(field_value(obj, field))
               for field in kind.indexed_fields}}


def storage_name(namespace: str, name: str) -> str:
    """The storage object's name of the public object ``namespace/name``: ``<namespace>.<name>``
    (a namespace is a DNS label, without a dot, so the first dot divides the two), or, when that
    is longer than a name may be, ``<namespace>.<the name's start>-<sha256 of the name>``."""
    joined = f"{namespace}.{name}"
    if len(joined) <= MAX_NAME_LENGTH:
        return joined
    digest = hashlib.sha256(name.encode()).hexdigest()[:_NAME_DIGEST_LENGTH]
    head = name[:MAX_NAME_LENGTH - len(namespace) - 2 - _NAME_DIGEST_LENGTH].rstrip(".-")
    return f"{namespace}.{head}-{digest}"


def storage_selector(instance: str) -> str:
    """The label selector of an instance's storage objects (of this layout)."""
    return f"{INSTANCE_LABEL}={instance}"


def storage_object(kind: StorageKind, storage_namespace: str, instance: str, obj: Object,
                   sequence: int, created_revision: int = 0) -> Object:
    """The storage object that holds the public object `obj` (its resourceVersion, if any,
    becomes the storage object's: a write's precondition); ``created_revision`` (0 on a create:
    kube-apiserver gives the creation its revision) is kept by every later write."""
    meta = metadata(obj)
    inner = copy.deepcopy(obj)
    inner["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    stored_meta: dict[str, Any] = {
        "name": storage_name(meta["namespace"], meta["name"]), "namespace": storage_namespace,
        "labels": storage_labels(kind, instance, obj, sequence)}
    if meta.get("resourceVersion"):
        stored_meta["resourceVersion"] = meta["resourceVersion"]
    stored: Object = {"apiVersion": f"{STORAGE_GROUP}/{STORAGE_VERSION}", "kind": kind.kind,
                      "metadata": stored_meta, "sequence": sequence, "object": inner}
    if created_revision:
        stored[CREATED_REVISION] = created_revision
    return stored


async def check_installed(kube: KubeClient, resources: Iterable[ResourceType]) -> None:
    """Raise ``StorageNotInstalled`` (one line, naming each CRD and what is wrong) unless the
    storage CRD of every resource exists and is Established."""
    problems = []
    for resource in resources:
        name = storage_kind(resource).crd_name
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{segment(name)}"
        try:
            crd = await kube.get(path)
        except KubeRejected as error:
            problems.append(f"{name} is not installed" if error.status_code == 404 else
                            f"{name} cannot be read ({error.status_code} "
                            f"{error.answer_reason or 'error'})")
            continue
        except KubeUnavailable as error:
            raise StorageNotInstalled(f"--storage=kubernetes: cannot check the storage CRDs: "
                                      f"{error}") from error
        conditions = (crd.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions):
            problems.append(f"{name} is not Established")
        elif not _declares(crd, CREATED_REVISION):
            problems.append(f"{name} is out of date (its schema has no {CREATED_REVISION}, "
                            "which kube-apiserver would drop from every write of this version)")
    if problems:
        raise StorageNotInstalled(
            f"--storage=kubernetes: {'; '.join(problems)}: apply apiservice/storage-crds.yaml "
            "and the server's RBAC in apiservice/rbac-server.yaml (kubectl apply -k "
            "apiservice/ installs both) and start again")


def _declares(crd: Mapping[str, Any], field_name: str) -> bool:
    """Whether the CRD's storage version declares the top-level field ``field_name`` (a
    structural schema prunes what it does not declare)."""
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("storage"):
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            return field_name in (schema.get("properties") or {})
    return False


def revision(obj: Mapping[str, Any]) -> int:
    """An object's resourceVersion as the integer it is (an etcd revision), 0 if it has none."""
    text = str(metadata(obj).get("resourceVersion") or "0")
    return int(text) if text.isdigit() else 0


def key_of(obj: Mapping[str, Any]) -> Key:
    """The (namespace, name) of a public object."""
    meta = metadata(obj)
    return meta.get("namespace", ""), meta.get("name", "")


def storage_name_of(stored: Mapping[str, Any]) -> str:
    return str(metadata(stored).get("name", ""))


def public_of(stored: Mapping[str, Any]) -> Object:
    """The public object a storage object holds, with the storage object's resourceVersion."""
    inner = stored.get("object")
    obj: Object = dict(inner) if isinstance(inner, dict) else {}
    meta = dict(metadata(obj))
    if "resourceVersion" in metadata(stored):
        meta["resourceVersion"] = metadata(stored)["resourceVersion"]
    obj["metadata"] = meta
    return obj
