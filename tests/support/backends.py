"""The storage backends the store conformance suite (tests/unit/test_store_conformance.py)
and the other storage-level suites run against.

The unit run covers SQLite and the Kubernetes backend on the fake API of
tests/support/fake_storage_api.py (``UNIT_BACKENDS``); tests/cluster runs the same suites
against the Kubernetes backend on the real local control plane (``kubernetes_backend``,
tests/cluster/conftest.py), so ``pytest tests/unit`` needs no control plane. A new backend
adds a factory here and to the fixture of the run it belongs to.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from apiserver.kube import KubeClient
from apiserver.registry.kube_objects import INSTANCE_LABEL, STORAGE_GROUP, storage_kind
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.resources import ResourceType
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import DEFAULT_MAX_OBJECT_BYTES, ObjectStore
from apiserver.registry.watch import DEFAULT_MAX_QUEUED_EVENTS
from apiserver.server import STORED_RESOURCES
from localcluster.layout import REPO_ROOT
from localcluster.pki import NOTIFIER_NAMESPACE, NOTIFIER_SERVICE
from tests.support.fake_storage_api import FakeStorageAPI
from tests.support.kube import Cluster


class Backend:
    """A storage backend under test: `store` opens the store of one resource; every store of
    one Backend shares its resourceVersion counter and keeps `history` changes of history."""

    history = 20

    def __init__(self, open_store: Callable[[ResourceType, int, int], ObjectStore]) -> None:
        self._open_store = open_store
        self.stores: list[ObjectStore] = []

    def store(self, resource: ResourceType, *, max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
              max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS) -> ObjectStore:
        opened = self._open_store(resource, max_object_bytes, max_queued_events)
        self.stores.append(opened)
        return opened

    def close(self) -> None:
        for store in self.stores:
            store.close()


@contextlib.asynccontextmanager
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    database = await SqliteDatabase.open(tmp_path / "backend", event_retention=Backend.history)
    try:
        yield Backend(lambda resource, max_bytes, max_queued: SqliteObjectStore(
            database, resource, max_object_bytes=max_bytes, max_queued_events=max_queued))
    finally:
        await database.close()


FAKE_STORAGE_NAMESPACE = "cn-storage"
"""The storage namespace of the Kubernetes backend on the fake API."""


@contextlib.asynccontextmanager
async def kubernetes_fake_backend(tmp_path: Path) -> AsyncIterator[Backend]:
    kube = FakeStorageAPI().client()
    try:
        yield Backend(lambda resource, max_bytes, max_queued: KubeObjectStore(
            kube, resource, storage_namespace=FAKE_STORAGE_NAMESPACE, history=Backend.history,
            max_object_bytes=max_bytes, max_queued_events=max_queued))
    finally:
        await kube.aclose()


UNIT_BACKENDS: dict[str, Callable[[Path], contextlib.AbstractAsyncContextManager[Backend]]] = {
    "sqlite": sqlite_backend,
    "kubernetes-fake": kubernetes_fake_backend,
}
"""The backends of the unit run, by name (no control plane needed)."""


CONFORMANCE_STORAGE_NAMESPACE = "cn-conformance-storage"
"""The storage namespace of the Kubernetes backend on the real control plane (created once,
with the server's storage rights in it)."""
_storage_namespace_ready: set[str] = set()
"""The control planes (by server address) where CONFORMANCE_STORAGE_NAMESPACE was applied."""


@contextlib.asynccontextmanager
async def kubernetes_backend(cluster: Cluster) -> AsyncIterator[Backend]:
    """Stores on the real local control plane, as the server's ServiceAccount, in the storage
    namespace CONFORMANCE_STORAGE_NAMESPACE (created once, with a Role granting the server what
    the chart's storage Role grants in its own namespace; the public namespaces a suite names
    need not exist: the store does not check them). Each use gets a fresh storage instance
    (``INSTANCE_LABEL``): its stores see only the objects it wrote, and it deletes them after."""
    kinds = [storage_kind(resource) for resource in STORED_RESOURCES]
    namespace = CONFORMANCE_STORAGE_NAMESPACE
    with cluster.admin() as admin:
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        if any(admin.get(crds + kind.crd_name).status_code == 404
               for kind in kinds):  # a reused control plane from before (some of) the CRDs
            cluster.kubectl("apply", "-f", str(REPO_ROOT / "apiservice" / "storage-crds.yaml"))
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                            "-f", str(REPO_ROOT / "apiservice" / "storage-crds.yaml"))
    role = "container-notifier:storage"
    if cluster.server not in _storage_namespace_ready:
        cluster.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role, "namespace": namespace},
             "rules": [{"apiGroups": [STORAGE_GROUP], "resources": [k.plural for k in kinds],
                        "verbs": ["get", "list", "watch", "create", "update", "delete",
                                  "deletecollection"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": role, "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
             "subjects": [{"kind": "ServiceAccount", "name": NOTIFIER_SERVICE,
                           "namespace": NOTIFIER_NAMESPACE}]})
        _storage_namespace_ready.add(cluster.server)
    instance = f"conformance-{uuid.uuid4().hex[:10]}"
    kube = KubeClient.from_kubeconfig(cluster.layout.notifier_kubeconfig)
    try:
        yield Backend(lambda resource, max_bytes, max_queued: KubeObjectStore(
            kube, resource, storage_namespace=namespace, instance=instance,
            history=Backend.history, max_object_bytes=max_bytes,
            max_queued_events=max_queued))
    finally:
        await kube.aclose()
        with cluster.admin() as admin:
            for kind in kinds:
                admin.delete(f"/apis/{STORAGE_GROUP}/v1alpha1/namespaces/{namespace}/"
                             f"{kind.plural}",
                             params={"labelSelector": f"{INSTANCE_LABEL}={instance}"})
