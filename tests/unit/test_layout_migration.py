"""Moving layout-1 storage objects (each in its public namespace, the public identity the
storage object's own) into the storage namespace (``registry.layout_migration``), against the
fake kube-apiserver: what is moved, what is kept, what is left in place and said."""

from __future__ import annotations

import copy
import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from apiserver.kube import Connection, KubeClient
from apiserver.kube.client import KubeRejected
from apiserver.registry.kube_objects import (
    NAMESPACE_LABEL,
    STORAGE_API,
    storage_kind,
    storage_labels,
    storage_name,
    storage_object,
)
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.layout_migration import (
    LAYOUT1_INSTANCE_LABEL,
    LayoutMigration,
    layout1_public,
    layout1_selector,
    layout_marker,
)
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS, ResourceType
from apiserver.server import STORED_DECODERS, STORED_RESOURCES
from tests.support.fake_storage_api import FakeStorageAPI, status

STORAGE_NAMESPACE = "cn-storage"
INSTANCE = "container-notifier"
LOGGER = "apiserver.registry.layout_migration"
LONG_NAME = "r" * 250
"""A layout-1 name whose layout-2 name (``<ns>.<name>``) is too long: it is hashed."""

BODIES: dict[ResourceType, dict[str, Any]] = {
    PODNOTIFIERS: {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
                   "spec": {"podName": "db-0", "podUID": "u1", "notifier": "flush",
                            "timeoutSeconds": 30, "ttlSecondsAfterFinished": 60,
                            "containers": ["db"], "requestedBy": {"username": "alice"}},
                   "status": {"phase": "Succeeded", "conditions": []}},
    NOTIFICATIONS: {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
                    "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "flush",
                             "policy": "PreExistingPods", "failurePolicy": "Abort",
                             "parallelism": 1, "timeoutSeconds": 30, "containers": [],
                             "requestedBy": {"username": "alice", "uid": "", "groups": []}},
                    "status": {"phase": "Succeeded", "conditions": []}},
}


BODY = object()
"""``layout1``'s `inner` by default: the resource's body with public labels."""


def layout1(api: FakeStorageAPI, resource: ResourceType, namespace: str, name: str, *,
            instance: str = INSTANCE, sequence: int = 7, inner: Any = BODY) -> dict[str, Any]:
    """Store a layout-1 storage object as a replica of layout 1 wrote it (public labels in
    `object`, the identity in the storage object's metadata, layout 1's instance label); a
    copy."""
    api.rv += 1
    kind = storage_kind(resource)
    if inner is BODY:
        inner = {**copy.deepcopy(BODIES[resource]),
                 "metadata": {"labels": {"app": "db", "tier": namespace}}}
    old = {"apiVersion": "storage.notifier.x-k8s.io/v1alpha1", "kind": kind.kind,
           "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                        "creationTimestamp": f"2025-0{len(namespace)}-01T00:00:00Z",
                        "resourceVersion": str(api.rv),
                        "labels": {LAYOUT1_INSTANCE_LABEL: instance}},
           "sequence": sequence, "object": inner}
    api.objects[(kind.plural, namespace, name)] = old
    return copy.deepcopy(old)


def moved(api: FakeStorageAPI, resource: ResourceType, namespace: str, name: str
          ) -> dict[str, Any] | None:
    return api.objects.get((storage_kind(resource).plural, STORAGE_NAMESPACE,
                            storage_name(namespace, name)))


def layout1_left(api: FakeStorageAPI, resource: ResourceType) -> list[tuple[str, str]]:
    """The (namespace, name) of every storage object of `resource` still labelled the layout-1
    way."""
    plural = storage_kind(resource).plural
    return sorted((ns, name) for (p, ns, name), obj in api.objects.items()
                  if p == plural and LAYOUT1_INSTANCE_LABEL in obj["metadata"].get("labels", {}))


def storage_writes(api: FakeStorageAPI) -> list[tuple[str, str, Any]]:
    """The writes of storage objects (not of the layout marker)."""
    return [w for w in api.writes() if w[1].startswith(STORAGE_API)]


@pytest.fixture
def api() -> FakeStorageAPI:
    return FakeStorageAPI()


@pytest.fixture
async def kube(api: FakeStorageAPI) -> AsyncIterator[KubeClient]:
    client = api.client()
    yield client
    await client.aclose()


def migration(kube: KubeClient) -> LayoutMigration:
    return LayoutMigration(kube, storage_namespace=STORAGE_NAMESPACE, instance=INSTANCE)


async def test_every_layout1_object_is_moved_with_its_identity(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    olds = [(resource, layout1(api, resource, namespace, name, sequence=sequence))
            for resource, namespace, name, sequence in (
                (PODNOTIFIERS, "a", "r1", 11), (PODNOTIFIERS, "b", "r1", 12),
                (PODNOTIFIERS, "b", LONG_NAME, 13), (NOTIFICATIONS, "a", "n1", 14),
                (NOTIFICATIONS, "c", "n2", 15))]

    counts = await migration(kube).run(STORED_RESOURCES)

    assert counts == {"storedpodnotifiers": 3, "storednotifications": 2,
                      "storednotificationruns": 0, "storednotificationpodsets": 0}
    for resource, old in olds:
        meta = old["metadata"]
        new = moved(api, resource, meta["namespace"], meta["name"])
        assert new is not None, meta["name"]
        assert new["metadata"]["labels"] == storage_labels(
            storage_kind(resource), INSTANCE, new["object"], new["sequence"])
        assert new["metadata"]["labels"][NAMESPACE_LABEL] == meta["namespace"]
        assert new["sequence"] == old["sequence"]
        public = new["object"]
        assert public["metadata"] == {
            "labels": old["object"]["metadata"]["labels"], "namespace": meta["namespace"],
            "name": meta["name"], "uid": meta["uid"],
            "creationTimestamp": meta["creationTimestamp"]}
        assert {k: v for k, v in public.items() if k != "metadata"} == \
            {k: v for k, v in old["object"].items() if k != "metadata"}
        assert (storage_kind(resource).plural, meta["namespace"], meta["name"]) \
            not in api.objects
    assert len(storage_name("b", LONG_NAME)) <= 253
    for resource in STORED_RESOURCES:
        assert layout1_left(api, resource) == []
        answer = await kube.get(storage_kind(resource).collection,
                                {"labelSelector": layout1_selector(INSTANCE)})
        assert answer["items"] == []


async def test_the_old_object_is_deleted_with_its_uid_as_precondition(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    layout1(api, PODNOTIFIERS, "a", "r1")

    await migration(kube).run([PODNOTIFIERS])

    [post, delete] = storage_writes(api)
    assert post[:2] == ("POST", f"{STORAGE_API}/namespaces/{STORAGE_NAMESPACE}/"
                                "storedpodnotifiers")
    assert delete == ("DELETE", f"{STORAGE_API}/namespaces/a/storedpodnotifiers/r1",
                      {"apiVersion": "v1", "kind": "DeleteOptions",
                       "preconditions": {"uid": "uid-a-r1"}})


async def test_another_instance_and_layout2_objects_are_not_touched(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    other = layout1(api, PODNOTIFIERS, "a", "theirs", instance="another-install")
    current = layout1(api, PODNOTIFIERS, "a", "mine")
    await migration(kube).run([PODNOTIFIERS])
    already = copy.deepcopy(moved(api, PODNOTIFIERS, "a", "mine"))
    writes = len(storage_writes(api))
    api.configmaps.clear()  # unmarked: the objects are read again

    assert await migration(kube).run([PODNOTIFIERS]) == {"storedpodnotifiers": 0}

    assert len(storage_writes(api)) == writes
    assert api.objects[("storedpodnotifiers", "a", "theirs")] == other
    assert moved(api, PODNOTIFIERS, "a", "theirs") is None
    assert moved(api, PODNOTIFIERS, "a", "mine") == already
    assert already is not None and already["object"]["metadata"]["uid"] == \
        current["metadata"]["uid"]


async def test_a_second_run_moves_nothing(api: FakeStorageAPI, kube: KubeClient) -> None:
    for namespace in ("a", "b"):
        layout1(api, PODNOTIFIERS, namespace, "r1")
        layout1(api, NOTIFICATIONS, namespace, "n1")
    await migration(kube).run(STORED_RESOURCES)
    objects, writes = copy.deepcopy(api.objects), len(api.writes())

    counts = await migration(kube).run(STORED_RESOURCES)

    assert counts == {}
    assert len(api.writes()) == writes
    assert api.objects == objects


async def test_once_marked_done_nothing_in_a_users_namespace_is_read(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    """A layout-1 object a tenant writes into its own namespace after the move (a `*` Role
    there allows it) is never moved in."""
    layout1(api, PODNOTIFIERS, "a", "r1")
    assert await migration(kube).run(STORED_RESOURCES) != {}
    assert api.configmaps[(STORAGE_NAMESPACE, layout_marker(INSTANCE))]["data"] == {
        "layout": "2"}
    planted = layout1(api, PODNOTIFIERS, "a", "forged")
    requests = len(api.requests)

    assert await migration(kube).run(STORED_RESOURCES) == {}

    assert [path for _, path, _ in api.requests[requests:]] == [
        f"/api/v1/namespaces/{STORAGE_NAMESPACE}/configmaps/{layout_marker(INSTANCE)}"]
    assert api.objects[("storedpodnotifiers", "a", "forged")] == planted
    assert moved(api, PODNOTIFIERS, "a", "forged") is None


async def test_a_move_skipped_by_a_refusal_is_not_marked_done(api: FakeStorageAPI,
                                                               kube: KubeClient) -> None:
    original = api.handle

    async def refuse_lists(request: httpx.Request, delivery: Any = None) -> httpx.Response:
        if request.method == "GET" and "labelSelector" in request.url.params:
            return status(403, "Forbidden", "cannot list")
        return await original(request, delivery)

    api.handle = refuse_lists  # type: ignore[method-assign]
    await migration(kube).run([PODNOTIFIERS])

    assert api.configmaps == {}


async def test_an_interrupted_move_is_finished_and_keeps_the_copy(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    """The copy was made, then the replica stopped before the delete; since, the copy was
    written (its status): the next start deletes the old object and keeps the copy as is."""
    old = layout1(api, PODNOTIFIERS, "a", "r1")
    public = layout1_public(old)
    assert public is not None
    public["status"] = {"phase": "Failed", "conditions": []}
    copied = storage_object(storage_kind(PODNOTIFIERS), STORAGE_NAMESPACE, INSTANCE, public, 7)
    api.rv += 1
    copied["metadata"].update(uid="storage-uid-of-the-copy", resourceVersion=str(api.rv))
    api.objects[("storedpodnotifiers", STORAGE_NAMESPACE, "a.r1")] = copy.deepcopy(copied)

    counts = await migration(kube).run([PODNOTIFIERS])

    assert counts == {"storedpodnotifiers": 1}
    assert ("storedpodnotifiers", "a", "r1") not in api.objects
    assert moved(api, PODNOTIFIERS, "a", "r1") == copied
    assert [method for method, _, _ in storage_writes(api)] == ["POST", "DELETE"]


async def test_a_name_taken_by_another_object_leaves_the_old_one(
        api: FakeStorageAPI, kube: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    old = layout1(api, PODNOTIFIERS, "a", "r1")
    layout1(api, PODNOTIFIERS, "a", "r2")
    public = layout1_public(old)
    assert public is not None
    public["metadata"]["uid"] = "uid-of-another-object"
    taken = storage_object(storage_kind(PODNOTIFIERS), STORAGE_NAMESPACE, INSTANCE, public, 1)
    taken["metadata"].update(uid="storage-uid", resourceVersion="1")
    api.objects[("storedpodnotifiers", STORAGE_NAMESPACE, "a.r1")] = copy.deepcopy(taken)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        counts = await migration(kube).run([PODNOTIFIERS])

    assert counts == {"storedpodnotifiers": 1}  # r2
    assert api.objects[("storedpodnotifiers", "a", "r1")] == old
    assert moved(api, PODNOTIFIERS, "a", "r1") == taken
    assert layout1_left(api, PODNOTIFIERS) == [("a", "r1")]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "its new name is taken" in error.getMessage()
    assert (error.namespace, error.object, error.storage_name) == ("a", "r1", "a.r1")


def refusing(api: FakeStorageAPI, refused: str, code: int) -> KubeClient:
    """A client of `api` whose cluster-wide lists of the storage plural `refused` get `code`."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == f"{STORAGE_API}/{refused}":
            return status(code, "Forbidden" if code == 403 else "InternalError", "refused")
        return await api.handle(request)

    return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(handle))


async def test_a_list_refused_with_403_is_logged_and_skipped(
        api: FakeStorageAPI, caplog: pytest.LogCaptureFixture) -> None:
    notification = layout1(api, NOTIFICATIONS, "a", "n1")
    layout1(api, PODNOTIFIERS, "a", "r1")
    kube = refusing(api, "storednotifications", 403)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        counts = await migration(kube).run([NOTIFICATIONS, PODNOTIFIERS])
    await kube.aclose()

    assert counts == {"storedpodnotifiers": 1}
    assert api.objects[("storednotifications", "a", "n1")] == notification
    assert moved(api, PODNOTIFIERS, "a", "r1") is not None
    [warning] = caplog.records
    assert "cannot list layout-1 storage objects" in warning.getMessage()
    assert warning.resource == "storednotifications.storage.notifier.x-k8s.io"


async def test_another_refusal_of_the_list_fails_the_start(api: FakeStorageAPI) -> None:
    layout1(api, PODNOTIFIERS, "a", "r1")
    kube = refusing(api, "storedpodnotifiers", 500)

    with pytest.raises(KubeRejected) as raised:
        await migration(kube).run([PODNOTIFIERS])
    await kube.aclose()

    assert raised.value.status_code == 500
    assert moved(api, PODNOTIFIERS, "a", "r1") is None


@pytest.mark.parametrize("inner", [None, [1, 2], "text"], ids=["null", "list", "string"])
async def test_an_unreadable_object_is_left_in_place(
        api: FakeStorageAPI, kube: KubeClient, caplog: pytest.LogCaptureFixture,
        inner: Any) -> None:
    old = layout1(api, PODNOTIFIERS, "a", "bad", inner=inner)
    layout1(api, PODNOTIFIERS, "a", "good")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        counts = await migration(kube).run([PODNOTIFIERS])

    assert counts == {"storedpodnotifiers": 1}
    assert api.objects[("storedpodnotifiers", "a", "bad")] == old
    assert moved(api, PODNOTIFIERS, "a", "bad") is None
    assert moved(api, PODNOTIFIERS, "a", "good") is not None
    [warning] = caplog.records
    assert "unreadable; left in place" in warning.getMessage()
    assert (warning.namespace, warning.object) == ("a", "bad")


async def test_the_moved_objects_are_read_by_the_store(
        api: FakeStorageAPI, kube: KubeClient) -> None:
    olds = {(namespace, name): layout1(api, PODNOTIFIERS, namespace, name, sequence=sequence)
            for namespace, name, sequence in (("a", "r2", 1), ("a", "r1", 2), ("b", LONG_NAME, 3))}
    await migration(kube).run([PODNOTIFIERS])
    store = KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                            instance=INSTANCE, decode=STORED_DECODERS[PODNOTIFIERS])
    try:
        for (namespace, name), old in olds.items():
            got = await store.get(namespace, name)
            assert got["metadata"]["uid"] == old["metadata"]["uid"]
            assert got["metadata"]["creationTimestamp"] == old["metadata"]["creationTimestamp"]
            assert got["spec"] == old["object"]["spec"]
            stored = moved(api, PODNOTIFIERS, namespace, name)
            assert stored is not None
            assert got["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        listed = await store.list("a")
        assert [obj["metadata"]["name"] for obj in listed.items] == ["r1", "r2"]
        deleted = await store.delete("a", "r1", uid=olds[("a", "r1")]["metadata"]["uid"])
        assert deleted["metadata"]["uid"] == olds[("a", "r1")]["metadata"]["uid"]
        assert moved(api, PODNOTIFIERS, "a", "r1") is None
    finally:
        store.close()
