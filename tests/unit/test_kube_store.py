"""The Kubernetes-API backend against a fake kube-apiserver: what it writes, how kube-apiserver's
errors map to the registry's kinds, retries on 409, and the start-up CRD check. (The store
conformance suite runs it against the real local control plane.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.kube.client import METADATA_ONLY
from apiserver.registry import kube_store
from apiserver.registry.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    StorageNotInstalled,
    StorageUnavailable,
    TooLarge,
)
from apiserver.registry.kube_objects import (
    INSTANCE_LABEL,
    NAMESPACE_LABEL,
    SEQUENCE_LABEL,
    StorageKind,
    check_installed,
    field_label,
    field_label_value,
    storage_kind,
    storage_name,
    storage_object,
)
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.layout_migration import LAYOUT1_INSTANCE_LABEL
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.store import Cohort
from apiserver.timestamps import timestamp
from tests.support.fake_storage_api import FakeStorageAPI, status

STORAGE_NAMESPACE = "cn-storage"
POD_NOTIFIERS = (f"/apis/storage.notifier.x-k8s.io/v1alpha1/namespaces/{STORAGE_NAMESPACE}/"
                 "storedpodnotifiers")


def record(name: str = "a", phase: str = "Pending") -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": "ns", "name": name, "labels": {"app": "db"}},
            "spec": {"podName": "web-0", "notifier": "quiesce"}, "status": {"phase": phase}}


@pytest.fixture
def api() -> FakeStorageAPI:
    return FakeStorageAPI()


@pytest.fixture
async def store(api: FakeStorageAPI) -> AsyncIterator[KubeObjectStore]:
    kube = api.client()
    opened = KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                             instance="test")
    yield opened
    opened.close()
    await kube.aclose()


async def test_records_are_stored_as_custom_resources(store: KubeObjectStore,
                                                      api: FakeStorageAPI) -> None:
    created = await store.create(record())

    [(method, path, body)] = api.writes()
    assert (method, path) == ("POST", POD_NOTIFIERS)
    assert body["apiVersion"] == "storage.notifier.x-k8s.io/v1alpha1"
    assert body["kind"] == "StoredPodNotifier"
    assert body["metadata"] == {"name": "ns.a", "namespace": STORAGE_NAMESPACE, "labels": {
        INSTANCE_LABEL: "test", NAMESPACE_LABEL: "ns", SEQUENCE_LABEL: str(body["sequence"]),
        field_label("spec.podName"): field_label_value(record()["spec"]["podName"]),
        field_label("status.phase"): field_label_value("Pending")}}
    public = body["object"]["metadata"]
    assert public == {"namespace": "ns", "name": "a", "labels": {"app": "db"},
                      "uid": created["metadata"]["uid"],
                      "creationTimestamp": created["metadata"]["creationTimestamp"]}
    assert body["object"]["spec"] == record()["spec"]
    assert isinstance(body["sequence"], int)
    stored = api.objects[("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a")]["metadata"]
    assert created["metadata"]["uid"] != stored["uid"]  # the server's own, not the storage's
    assert created["metadata"]["resourceVersion"] == stored["resourceVersion"]
    assert await store.get("ns", "a") == created


def test_storage_kinds() -> None:
    assert storage_kind(PODNOTIFIERS).crd_name == "storedpodnotifiers.storage.notifier.x-k8s.io"
    assert storage_kind(NOTIFICATIONS).kind == "StoredNotification"


FINISHED_ONLY = "status.phase!=Pending,status.phase!=Running,status.phase!=Held"


async def test_a_cohort_is_evicted_in_one_delete_of_the_collection(
    store: KubeObjectStore, api: FakeStorageAPI
) -> None:
    """Its members are selected by kube-apiserver on the storage labels: the cohort's field,
    the evictable phases, no later in creation order than the last one evicted."""
    for name in ("a", "b", "c"):
        await store.create(record(name, phase="Succeeded"))
    await store.create(record("d"))
    before = len(api.writes())

    await store.create(record("e"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 4, 2))

    [(method, path, _), (create, _, _)] = api.writes()[before:]
    assert (method, path, create) == ("DELETE", POD_NOTIFIERS, "POST")
    assert sorted(name for (_, _, name) in api.objects) == ["ns.d", "ns.e"]
    assert [o["metadata"]["name"] for o in (await store.list("ns")).items] == ["d", "e"]


async def test_objects_without_the_field_labels_are_evicted_one_by_one(
    store: KubeObjectStore, api: FakeStorageAPI
) -> None:
    """Objects written before the field labels existed: the collection's DELETE would miss
    them."""
    kube = api.client()
    old = {**record("a", phase="Succeeded"), "metadata": {
        "namespace": "ns", "name": "a", "uid": "u-a", "creationTimestamp": timestamp()}}
    await kube.post(POD_NOTIFIERS, storage_object(
        StorageKind("storedpodnotifiers", "StoredPodNotifier"), STORAGE_NAMESPACE, "test", old, 1))
    await kube.aclose()
    await store.create(record("b", phase="Succeeded"))
    before = len(api.writes())

    await store.create(record("c"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 2, 1))

    assert [method for (method, _, _) in api.writes()[before:]] == ["DELETE", "DELETE", "POST"]
    assert sorted(name for (_, _, name) in api.objects) == ["ns.c"]


def held(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": {"phase": "Held"}}


async def test_every_update_keeps_the_creation_revision(store: KubeObjectStore,
                                                        api: FakeStorageAPI) -> None:
    created = await store.create(record("a"))
    key = ("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a")
    assert "createdRevision" not in api.objects[key]

    for _ in range(2):
        await store.guaranteed_update("ns", "a", held)
        assert api.objects[key]["createdRevision"] == int(created["metadata"]["resourceVersion"])


async def test_admission_gets_the_members_created_before_even_if_updated_since(
    store: KubeObjectStore, api: FakeStorageAPI
) -> None:
    await store.create(record("a"))
    await store.guaranteed_update("ns", "a", held)  # its resourceVersion is now the newest
    await store.create(record("other", phase="Succeeded"))
    seen: list[list[str]] = []

    def admit(members: list[dict[str, Any]]) -> None:
        seen.append([m["metadata"]["name"] for m in members])

    created = await store.create(record("b"), cohort=Cohort(
        "spec.podName=web-0", FINISHED_ONLY, 10, 5, admit=admit))

    assert seen == [["a", "other"]]  # oldest first, by creation
    assert created["metadata"]["name"] == "b"
    assert await store.get("ns", "b") == created


async def test_a_refused_create_is_deleted_again(store: KubeObjectStore,
                                                 api: FakeStorageAPI) -> None:
    await store.create(record("a"))
    before = len(api.writes())

    def refuse(members: list[dict[str, Any]]) -> None:
        raise Conflict("busy", resource=PODNOTIFIERS, name="a")

    with pytest.raises(Conflict):
        await store.create(record("b"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 10, 5,
                                                      admit=refuse))

    assert [method for (method, _, _) in api.writes()[before:]] == ["POST", "DELETE"]
    assert sorted(name for (_, _, name) in api.objects) == ["ns.a"]
    with pytest.raises(NotFound):
        await store.get("ns", "b")


async def test_a_refused_create_evicts_nothing(store: KubeObjectStore,
                                               api: FakeStorageAPI) -> None:
    """The cohort is at its limit: an admitted create evicts, a refused one only deletes
    itself."""
    for name in ("a", "b"):
        await store.create(record(name, phase="Succeeded"))

    def refuse(members: list[dict[str, Any]]) -> None:
        raise Conflict("busy", resource=PODNOTIFIERS, name="a")

    with pytest.raises(Conflict):
        await store.create(record("c"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 2, 1,
                                                      admit=refuse))
    assert sorted(name for (_, _, name) in api.objects) == ["ns.a", "ns.b"]

    await store.create(record("d"), cohort=Cohort("spec.podName=web-0", FINISHED_ONLY, 2, 1,
                                                  admit=lambda members: None))
    assert sorted(name for (_, _, name) in api.objects) == ["ns.d"]


async def test_unreachable_kube_apiserver_is_storage_unavailable(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    await store.list("ns")
    api.down = True

    with pytest.raises(StorageUnavailable) as raised:
        await store.create(record())

    assert raised.value.code == 503
    assert "kube-apiserver, where records are stored, is unavailable" in raised.value.message


@pytest.mark.parametrize(("answer", "error", "words"), [
    (status(409, "AlreadyExists", "exists"), AlreadyExists,
     'podnotifiers.notifier.x-k8s.io "a" already exists'),
    (status(413, "RequestEntityTooLarge", "too big"), TooLarge, "too large for kube-apiserver"),
    (status(403, "Forbidden", "no RBAC"), StorageUnavailable, "check the server's RBAC"),
    (status(500, "InternalError", "etcd"), StorageUnavailable, "500 InternalError: etcd"),
    (httpx.Response(503, text="restarting"), StorageUnavailable, "unavailable"),
])
async def test_kube_apiserver_errors_map_to_registry_errors(
        store: KubeObjectStore, api: FakeStorageAPI, answer: httpx.Response,
        error: type[Exception], words: str) -> None:
    await store.list("ns")
    api.fail_writes = answer

    with pytest.raises(error) as raised:
        await store.create(record())

    assert words in str(raised.value)


async def test_update_retries_on_conflict(store: KubeObjectStore, api: FakeStorageAPI) -> None:
    await store.create(record())
    api.conflicts = 2

    updated = await store.guaranteed_update("ns", "a", lambda o: {**o, "status": {
        "phase": "Running"}})

    puts = [r for r in api.writes() if r[0] == "PUT"]
    assert len(puts) == 3
    assert all(body["metadata"]["resourceVersion"] for _, _, body in puts)
    assert updated["status"]["phase"] == "Running"
    assert (await store.get("ns", "a"))["status"]["phase"] == "Running"


async def test_delete_sends_preconditions(store: KubeObjectStore, api: FakeStorageAPI) -> None:
    created = await store.create(record())
    meta = created["metadata"]
    storage_uid = api.objects[("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a")]["metadata"][
        "uid"]

    deleted = await store.delete("ns", "a", uid=meta["uid"],
                                 resource_version=meta["resourceVersion"])

    [(_, path, options)] = [r for r in api.writes() if r[0] == "DELETE"]
    assert path == f"{POD_NOTIFIERS}/ns.a"
    assert options["preconditions"] == {"uid": storage_uid,  # not the public object's uid
                                        "resourceVersion": meta["resourceVersion"]}
    assert deleted["metadata"]["uid"] == meta["uid"]
    assert int(deleted["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])


async def test_failed_precondition_in_kube_apiserver_is_conflict(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    """Deleted and created again by another replica, which this cache has not seen: the
    DELETE's storage uid precondition fails, and the Conflict is worded by the live object."""
    created = await store.create(record())
    stored = api.objects[("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a")]
    stored["metadata"]["uid"] = "storage-uid-of-the-new-one"
    stored["object"]["metadata"]["uid"] = "replaced-elsewhere"

    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        await store.delete("ns", "a", uid=created["metadata"]["uid"])
    assert ("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a") in api.objects


async def test_a_public_uid_precondition_is_checked_before_any_delete(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    await store.create(record())

    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        await store.delete("ns", "a", uid="another-uid")
    assert [r[0] for r in api.writes()] == ["POST"]
    assert ("storedpodnotifiers", STORAGE_NAMESPACE, "ns.a") in api.objects


async def test_check_installed(api: FakeStorageAPI) -> None:
    kube = api.client()
    api.crds = {"storedpodnotifiers.storage.notifier.x-k8s.io": False}

    with pytest.raises(StorageNotInstalled) as raised:
        await check_installed(kube, (PODNOTIFIERS, NOTIFICATIONS))

    message = str(raised.value)
    assert "\n" not in message
    assert "storedpodnotifiers.storage.notifier.x-k8s.io is not Established" in message
    assert "storednotifications.storage.notifier.x-k8s.io is not installed" in message
    assert "apiservice/storage-crds.yaml" in message and "rbac-server.yaml" in message
    api.crd_answer = status(403, "Forbidden", "no")
    with pytest.raises(StorageNotInstalled, match=r"notifier.x-k8s.io cannot be read \(403 "
                                                  r"Forbidden\)"):
        await check_installed(kube, (PODNOTIFIERS,))
    api.crd_answer = None
    api.crds = {storage_kind(r).crd_name: True for r in (PODNOTIFIERS, NOTIFICATIONS)}
    api.outdated_crds = {"storednotifications.storage.notifier.x-k8s.io"}
    with pytest.raises(StorageNotInstalled, match=(
            r"storednotifications.storage.notifier.x-k8s.io is out of date \(its schema has no "
            r"createdRevision, .*\): apply apiservice/storage-crds.yaml")):
        await check_installed(kube, (PODNOTIFIERS, NOTIFICATIONS))
    api.outdated_crds = set()
    await check_installed(kube, (PODNOTIFIERS, NOTIFICATIONS))
    await kube.aclose()


# Storage names and what a store sees

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
dns_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
dns_subdomain = st.lists(dns_label, min_size=1, max_size=8).map(".".join).filter(
    lambda name: len(name) <= 253)


def test_a_short_storage_name_joins_namespace_and_name() -> None:
    assert storage_name("ns", "a") == "ns.a"
    assert storage_name("ns", "web-0.quiesce") == "ns.web-0.quiesce"
    exact = "n" * (253 - len("ns."))
    assert storage_name("ns", exact) == f"ns.{exact}"


def test_a_long_storage_name_is_shortened_with_a_digest() -> None:
    namespace, name = "n" * 63, "a" * 200 + ".b" + "-c" * 20
    stored = storage_name(namespace, name)

    assert len(stored) <= 253
    assert DNS_SUBDOMAIN.fullmatch(stored)
    assert stored.startswith(f"{namespace}.{name[:100]}")
    assert stored == storage_name(namespace, name)  # deterministic
    assert storage_name("n" * 63, "a" * 254) != storage_name("n" * 63, "a" * 253)
    assert storage_name("n" * 63, "a" * 200 + "x") != storage_name("n" * 63, "a" * 200 + "y")


@given(namespace=dns_label, name=dns_subdomain, other=dns_subdomain)
def test_every_storage_name_is_a_subdomain_of_its_namespace(namespace: str, name: str,
                                                            other: str) -> None:
    stored = storage_name(namespace, name)

    assert len(stored) <= 253
    assert DNS_SUBDOMAIN.fullmatch(stored), stored
    assert stored.partition(".")[0] == namespace
    assert (stored == storage_name(namespace, other)) == (name == other)


async def test_the_cache_lists_and_watches_only_its_namespace_instance_and_layout(
        api: FakeStorageAPI) -> None:
    """Other storage namespaces, other instances and layout-1 objects (labelled with layout 1's
    instance label) are neither listed nor watched."""
    kube = api.client()

    async def write_elsewhere(tag: str) -> None:
        for namespace, instance in ((STORAGE_NAMESPACE, "another"), ("other-storage", "test")):
            other = KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=namespace,
                                    instance=instance)
            await other.create(record(f"{tag}-{namespace}-{instance}"))
            other.close()
        layout1 = storage_object(storage_kind(PODNOTIFIERS), STORAGE_NAMESPACE, "test", {
            **record(), "metadata": {"namespace": "ns", "name": f"{tag}-layout-1", "uid": "u",
                                     "creationTimestamp": "t"}}, 1)
        layout1["metadata"]["labels"] = {LAYOUT1_INSTANCE_LABEL: "test"}  # as layout 1 had it
        await kube.post(POD_NOTIFIERS, layout1)

    await write_elsewhere("before")
    store = KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                            instance="test")
    try:
        await store.create(record("mine"))
        assert [o["metadata"]["name"] for o in (await store.list(None)).items] == ["mine"]
        watch = await store.watch("ns")
        await write_elsewhere("after")
        await store.create(record("later"))
        seen = []
        async with asyncio.timeout(5):
            async for event in watch:
                seen.append((event.type.value, event.object["metadata"]["name"]))
                if len(seen) == 2:
                    break
        watch.close()
        assert seen == [("ADDED", "mine"), ("ADDED", "later")]
        assert len([k for k in api.objects if k[0] == "storedpodnotifiers"]) == 8
    finally:
        store.close()
        await kube.aclose()


# A replica whose cache lags a delete and create of the same name on another replica


@pytest.fixture
async def lagging(api: FakeStorageAPI) -> AsyncIterator[tuple[KubeObjectStore, KubeObjectStore,
                                                               asyncio.Event]]:
    """Stores a and b; b's cache gets no watch event while the event is clear."""
    delivery = asyncio.Event()
    delivery.set()
    clients = [api.client(), api.client(delivery=delivery)]
    a, b = (KubeObjectStore(kube, PODNOTIFIERS, storage_namespace=STORAGE_NAMESPACE,
                            instance="test") for kube in clients)
    yield a, b, delivery
    delivery.set()
    a.close()
    b.close()
    for kube in clients:
        await kube.aclose()


async def recreated_behind(a: KubeObjectStore, b: KubeObjectStore, delivery: asyncio.Event
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """ns/a created, seen by b, then deleted and created again by a while b's cache lags."""
    first = await a.create(record())
    async with asyncio.timeout(5):
        while not (await b.list(None)).items:
            await asyncio.sleep(0.01)
    delivery.clear()
    await a.delete("ns", "a")
    again = await a.create(record())
    assert (await b.get("ns", "a"))["metadata"]["uid"] == first["metadata"]["uid"]
    return first, again


async def test_a_lagging_delete_without_preconditions_deletes_what_is_stored(
        lagging: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event],
        api: FakeStorageAPI) -> None:
    a, b, delivery = lagging
    _, again = await recreated_behind(a, b, delivery)
    asyncio.get_running_loop().call_later(0.2, delivery.set)

    deleted = await b.delete("ns", "a")

    assert deleted["metadata"]["uid"] == again["metadata"]["uid"]
    assert api.objects == {}


async def test_a_lagging_delete_with_the_live_resource_version_deletes_it(
        lagging: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event],
        api: FakeStorageAPI) -> None:
    a, b, delivery = lagging
    _, again = await recreated_behind(a, b, delivery)
    asyncio.get_running_loop().call_later(0.2, delivery.set)

    deleted = await b.delete("ns", "a", resource_version=again["metadata"]["resourceVersion"],
                             uid=again["metadata"]["uid"])

    assert deleted["metadata"]["uid"] == again["metadata"]["uid"]
    assert api.objects == {}


async def test_a_lagging_delete_of_the_old_object_is_refused(
        lagging: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event],
        api: FakeStorageAPI) -> None:
    a, b, delivery = lagging
    first, again = await recreated_behind(a, b, delivery)

    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        await b.delete("ns", "a", uid=first["metadata"]["uid"])
    with pytest.raises(Conflict, match="the object has been modified"):
        await b.delete("ns", "a", resource_version=first["metadata"]["resourceVersion"])
    [stored] = api.objects.values()
    assert stored["object"]["metadata"]["uid"] == again["metadata"]["uid"]


# Consistent reads: the public reads without a resourceVersion


def labelled(round_: str):
    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["labels"]["round"] = round_
        return obj

    return mutate


async def test_a_consistent_read_waits_for_the_writes_another_replica_made(
        lagging: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event]) -> None:
    """b's cache gets a's writes 0.2 s late: its reads after consistent_read see them all."""
    a, b, delivery = lagging
    await a.create(record("old"))
    await b.consistent_read("ns")
    loop = asyncio.get_running_loop()

    delivery.clear()
    created = await a.create(record("new"))
    await a.guaranteed_update("ns", "old", labelled("1"))
    with pytest.raises(NotFound):
        await b.get("ns", "new")  # the cache as it is
    loop.call_later(0.2, delivery.set)
    started = loop.time()
    await b.consistent_read("ns", "new")
    assert loop.time() - started >= 0.15
    assert (await b.get("ns", "new"))["metadata"]["uid"] == created["metadata"]["uid"]

    delivery.clear()
    await a.delete("ns", "new")
    await a.guaranteed_update("ns", "old", labelled("2"))
    loop.call_later(0.2, delivery.set)
    await b.consistent_read("ns")
    [only] = (await b.list("ns")).items
    assert (only["metadata"]["name"], only["metadata"]["labels"]["round"]) == ("old", "2")


async def test_a_consistent_read_of_a_quiet_resource_does_not_wait(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    """kube-apiserver's resourceVersion moved with writes elsewhere in the cluster, this
    cache's did not: each read is one metadata LIST of what it covers and no wait."""
    await store.create(record("a"))
    api.rv += 50
    api.lists.clear()
    loop = asyncio.get_running_loop()

    started = loop.time()
    for namespace, name in (("ns", "a"), ("ns", "gone"), ("ns", ""), ("empty", ""), (None, "")):
        await store.consistent_read(namespace, name)
    assert loop.time() - started < 0.15  # the cache's own check polls every 0.2 s
    assert int((await store.list("ns")).resource_version) < api.rv
    selector = f"{INSTANCE_LABEL}=test"
    assert api.lists == [
        (POD_NOTIFIERS, {"labelSelector": f"{selector},{NAMESPACE_LABEL}=ns",
                         "fieldSelector": "metadata.name=ns.a"}, METADATA_ONLY),
        (POD_NOTIFIERS, {"labelSelector": f"{selector},{NAMESPACE_LABEL}=ns",
                         "fieldSelector": "metadata.name=ns.gone"}, METADATA_ONLY),
        (POD_NOTIFIERS, {"labelSelector": f"{selector},{NAMESPACE_LABEL}=ns"}, METADATA_ONLY),
        (POD_NOTIFIERS, {"labelSelector": f"{selector},{NAMESPACE_LABEL}=empty"},
         METADATA_ONLY),
        (POD_NOTIFIERS, {"labelSelector": selector}, METADATA_ONLY)]


async def test_a_consistent_read_counts_malformed_objects_as_held(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    """A malformed storage object is listed by kube-apiserver but never read: the cache holds
    it all the same, so a read of its namespace does not wait for it."""
    await store.create(record("a"))
    bad = storage_object(storage_kind(PODNOTIFIERS), STORAGE_NAMESPACE, "test", record("b"), 1)
    await api.client().post(POD_NOTIFIERS, bad)  # no uid nor creationTimestamp: malformed
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        while store._cache._informer.get(STORAGE_NAMESPACE, "ns.b") is None:
            await asyncio.sleep(0.01)

    started = loop.time()
    await store.consistent_read("ns")
    await store.consistent_read("ns", "b")
    assert loop.time() - started < 0.15
    assert [o["metadata"]["name"] for o in (await store.list("ns")).items] == ["a"]


async def test_a_name_that_cannot_be_stored_is_not_asked_for(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    await store.list("ns")
    api.lists.clear()

    await store.consistent_read("ns", "Not,A=Name")
    await store.consistent_read("Not_A_Namespace", "a")
    await store.consistent_read("Not_A_Namespace")

    assert api.lists == []
    with pytest.raises(NotFound):
        await store.get("ns", "Not,A=Name")


async def test_a_consistent_read_without_kube_apiserver_is_storage_unavailable(
        store: KubeObjectStore, api: FakeStorageAPI) -> None:
    await store.create(record())
    api.down = True

    with pytest.raises(StorageUnavailable, match="the latest state cannot be read from "
                                                 "kube-apiserver .*resourceVersion=0"):
        await store.consistent_read("ns", "a")
    assert (await store.get("ns", "a"))["metadata"]["name"] == "a"  # the cache as it is


async def test_a_cache_that_does_not_catch_up_is_storage_unavailable(
        lagging: tuple[KubeObjectStore, KubeObjectStore, asyncio.Event],
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, delivery = lagging
    await b.list("ns")
    monkeypatch.setattr(kube_store, "CATCH_UP_SECONDS", 0.3)
    delivery.clear()
    await a.create(record())

    with pytest.raises(StorageUnavailable) as raised:
        await b.consistent_read("ns", "a")

    assert raised.value.code == 503
    assert "has not caught up with kube-apiserver" in raised.value.message
    assert "resourceVersion=0" in raised.value.message
