"""Every stored kind is decoded defensively: garbage of any JSON type in any field of a storage
object is either a valid object or skipped (``MalformedObject``) and counted, never an error
out of the decoder, the store's cache or the passes that read it (docs/storage.md,
*Malformed storage objects*)."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver.clock import SystemClock
from apiserver.fanout.scope_store import ScopeStore
from apiserver.registry.errors import MalformedObject, NotFound
from apiserver.registry.kube_objects import (
    INSTANCE_LABEL,
    NAMESPACE_LABEL,
    storage_kind,
    storage_name,
)
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.podnotifiers import PodNotifierStore, runner
from apiserver.registry.resources import (
    NOTIFICATION_POD_SETS,
    NOTIFICATION_RUNS,
    NOTIFICATIONS,
    PODNOTIFIERS,
    ResourceType,
)
from apiserver.server import STORED_DECODERS, STORED_RESOURCES
from tests.support.fake_storage_api import FakeStorageAPI

SPEC = {"selector": {"matchLabels": {"app": "db"},
                     "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
        "notifier": "flush", "policy": "PreExistingPods", "failurePolicy": "Abort",
        "parallelism": 2, "timeoutSeconds": 30, "containers": ["db"],
        "release": {"notifier": "resume", "maxHoldSeconds": 60, "afterSeconds": 5},
        "requestedBy": {"username": "alice", "uid": "", "groups": []}}
VALID: dict[ResourceType, dict[str, Any]] = {
    PODNOTIFIERS: {"metadata": {"labels": {"notifier.x-k8s.io/pod": "db-0"}},
                   "spec": {"podName": "db-0", "podUID": "u1", "notifier": "flush",
                            "timeoutSeconds": 30, "ttlSecondsAfterFinished": 60,
                            "containers": ["db"], "requestedBy": {"username": "alice"}},
                   "status": {"phase": "Held", "maxHoldSeconds": 60, "heldTime": "t",
                              "replica": "replica-a",
                              "containers": [{"name": "db", "phase": "Held", "pid": 7}],
                              "conditions": []}},
    NOTIFICATIONS: {"metadata": {}, "spec": SPEC,
                    "status": {"phase": "Running", "conditions": []}},
    NOTIFICATION_RUNS: {"metadata": {}, "spec": {"notificationName": "n", "notification": SPEC},
                        "status": {"podSets": 1, "stopped": "", "outcome": "",
                                   "outcomeReason": "", "finished": False,
                                   "window": {"quiescedTime": "t"}}},
    NOTIFICATION_POD_SETS: {"metadata": {},
                            "spec": {"notificationUID": "uid", "index": 0},
                            "pods": [{"pod": "db-0", "podUID": "u1", "state": "started",
                                      "record": "r", "rollbackAttempts": 0}]},
}

garbage = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=6)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the empty one: the whole value)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(value)
    target = copied
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return copied


def public(resource: ResourceType, name: str = "x") -> dict[str, Any]:
    obj = copy.deepcopy(VALID[resource])
    obj["metadata"] = {**obj["metadata"], "namespace": "ns", "name": name,
                       "resourceVersion": "5", "uid": "u"}
    return obj


STORAGE_NAMESPACE = "cn-storage"


def storage_object(resource: ResourceType, name: str, inner: Any, sequence: Any = 1,
                   namespace: str = "ns") -> dict[str, Any]:
    """The layout-2 storage object of the public object ``namespace/name``: `inner` (when an
    object) with the public identity the server gives it, unless `inner` sets its own."""
    kind = storage_kind(resource)
    if isinstance(inner, dict):
        inner = {**inner, "metadata": {
            "namespace": namespace, "name": name, "uid": f"public-uid-{name}",
            "creationTimestamp": "2026-01-02T03:04:05Z", **(inner.get("metadata") or {})}}
    return {"apiVersion": "storage.notifier.x-k8s.io/v1alpha1", "kind": kind.kind,
            "metadata": {"namespace": STORAGE_NAMESPACE, "name": storage_name(namespace, name),
                         "uid": f"uid-{namespace}.{name}", "resourceVersion": "7",
                         "labels": {INSTANCE_LABEL: "test", NAMESPACE_LABEL: namespace}},
            "sequence": sequence, "object": inner}


@pytest.mark.parametrize("resource", STORED_RESOURCES, ids=lambda r: r.plural)
def test_the_valid_object_of_every_kind_decodes(resource: ResourceType) -> None:
    STORED_DECODERS[resource](public(resource))


@pytest.mark.parametrize("resource", STORED_RESOURCES, ids=lambda r: r.plural)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), new=garbage)
def test_garbage_in_any_field_is_valid_or_malformed(resource: ResourceType, data: st.DataObject,
                                                    new: Any) -> None:
    valid = public(resource)
    path = data.draw(st.sampled_from([p for p in paths(valid) if p and (
        p[0] != "metadata" or p[:2] == ("metadata", "labels"))]))
    try:
        STORED_DECODERS[resource](replaced(valid, path, new))
    except MalformedObject as error:
        assert error.resource_type == resource
        assert (error.namespace, error.object_name) == ("ns", "x")
        assert error.why


@pytest.mark.parametrize("resource", STORED_RESOURCES, ids=lambda r: r.plural)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data(), new=garbage)
def test_the_cache_skips_and_counts_what_does_not_decode(resource: ResourceType,
                                                         data: st.DataObject, new: Any) -> None:
    counted: Counter[str] = Counter()
    store = KubeObjectStore(FakeStorageAPI().client(), resource, instance="test",
                            storage_namespace=STORAGE_NAMESPACE,
                            decode=STORED_DECODERS[resource],
                            malformed=lambda plural: counted.update([plural]))
    good = storage_object(resource, "x", {k: v for k, v in public(resource).items()
                                          if k != "metadata"})
    good["createdRevision"] = 3
    path = data.draw(st.sampled_from([p for p in paths(good) if p[:1] in (
        ("object",), ("sequence",), ("createdRevision",))]))
    bad = replaced(good, path, new)
    store._cache._added(good)
    store._cache._updated(good, bad)
    store._cache._updated(bad, bad)  # the same resourceVersion again (a relist): not counted again
    malformed = sum(counted.values())
    assert malformed in (0, 1)
    assert ((("ns", "x") in store._cache._entries) == (malformed == 0))
    store._cache._deleted(bad)
    assert ("ns", "x") not in store._cache._entries


@pytest.fixture
def api() -> FakeStorageAPI:
    api = FakeStorageAPI()
    for resource in (NOTIFICATION_RUNS, NOTIFICATION_POD_SETS, PODNOTIFIERS):
        plural = storage_kind(resource).plural
        good = public(resource, "good")
        good["metadata"] = {"namespace": "ns", "name": "good"}
        if resource == NOTIFICATION_POD_SETS:
            good["spec"]["notificationUID"], good["spec"]["index"] = "good", 0
            good["metadata"]["name"] = "good-0"
        name = good["metadata"]["name"]
        api.objects[(plural, STORAGE_NAMESPACE, f"ns.{name}")] = storage_object(
            resource, name, good)
        for bad_name, inner in (("empty", {}), ("spec-x", {"spec": "x", "status": {}}),
                                ("list", [1, 2]), ("null", None)):
            api.objects[(plural, STORAGE_NAMESPACE, f"other.{bad_name}")] = storage_object(
                resource, bad_name, inner, namespace="other")
        api.objects[(plural, STORAGE_NAMESPACE, "other.sequence")] = storage_object(
            resource, "sequence", {k: v for k, v in good.items() if k != "metadata"},
            sequence="1", namespace="other")
        created = storage_object(resource, "created", {k: v for k, v in good.items()
                                                       if k != "metadata"}, namespace="other")
        created["createdRevision"] = "3"
        api.objects[(plural, STORAGE_NAMESPACE, "other.created")] = created
    return api


@pytest.fixture
async def stores(api: FakeStorageAPI) -> AsyncIterator[tuple[dict[ResourceType,
                                                                 KubeObjectStore], Counter[str]]]:
    counted: Counter[str] = Counter()
    kube = api.client()
    opened = {resource: KubeObjectStore(kube, resource, instance="test",
                                        storage_namespace=STORAGE_NAMESPACE,
                                        decode=STORED_DECODERS[resource],
                                        malformed=lambda plural: counted.update([plural]))
              for resource in (NOTIFICATION_RUNS, NOTIFICATION_POD_SETS, PODNOTIFIERS)}
    yield opened, counted
    for store in opened.values():
        store.close()
    await kube.aclose()


async def test_a_pass_over_every_namespace_reads_past_malformed_objects(
        stores: tuple[dict[ResourceType, KubeObjectStore], Counter[str]]) -> None:
    """The leader's pass (``runs``, ``orphan_uids``), recovery's and a takeover's
    (``PodNotifierStore.unfinished``) and the collector's (every record) see only the valid
    objects; each malformed one is counted once."""
    opened, counted = stores
    scopes = ScopeStore(opened[NOTIFICATION_RUNS], opened[NOTIFICATION_POD_SETS],
                        clock=SystemClock())
    records = PodNotifierStore(opened[PODNOTIFIERS], "replica-b")
    for _ in range(3):
        assert [run.notification_uid for run in await scopes.runs()] == ["good"]
        assert await scopes.orphan_uids(await scopes.runs()) == []
        assert [(r["metadata"]["namespace"], r["metadata"]["name"], runner(r))
                for r in await records.unfinished()] == [("ns", "good", "replica-a")]
        assert [r["metadata"]["name"] for r in (await records.list(None)).items] == ["good"]
        assert [pod.pod for pod in await scopes.pods("good")] == ["db-0"]
    await asyncio.sleep(0)
    assert counted == {storage_kind(r).plural: 6 for r in opened}
    with pytest.raises(MalformedObject, match=r'"other/spec-x" is malformed \(spec must be an '
                                              r"object, not a string\)"):
        await opened[PODNOTIFIERS].guaranteed_update("other", "spec-x", lambda obj: obj)


async def test_a_read_of_a_malformed_envelope_names_the_public_object(
        stores: tuple[dict[ResourceType, KubeObjectStore], Counter[str]]) -> None:
    """What the storage object's envelope gets wrong is told of the public object read, as the
    decoder's findings are, not of the storage object that holds it."""
    opened, _ = stores
    with pytest.raises(MalformedObject, match=r'"other/sequence" is malformed \(sequence must '
                                              r"be an integer, not a string\)") as raised:
        await opened[PODNOTIFIERS].guaranteed_update("other", "sequence", lambda obj: obj)
    assert (raised.value.namespace, raised.value.object_name) == ("other", "sequence")
    with pytest.raises(MalformedObject, match=r'"other/created" is malformed \(createdRevision '
                                              r"must be an integer, not a string\)"):
        await opened[PODNOTIFIERS].guaranteed_update("other", "created", lambda obj: obj)
    with pytest.raises(MalformedObject, match=r'"other/null" is malformed \(object must be an '
                                              r"object, not null\)"):
        await opened[PODNOTIFIERS].guaranteed_update("other", "null", lambda obj: obj)


async def test_a_storage_object_holding_another_name_is_malformed() -> None:
    """The storage name is derived from the public namespace and name: a storage object whose
    public metadata names another object is skipped, and a read of it says why."""
    api, counted = FakeStorageAPI(), Counter[str]()
    inner = {k: v for k, v in public(NOTIFICATIONS).items() if k != "metadata"}
    moved = storage_object(NOTIFICATIONS, "x", inner)
    moved["object"]["metadata"]["name"] = "y"
    api.objects[("storednotifications", STORAGE_NAMESPACE, "ns.x")] = moved
    kube = api.client()
    store = KubeObjectStore(kube, NOTIFICATIONS, instance="test",
                            storage_namespace=STORAGE_NAMESPACE,
                            decode=STORED_DECODERS[NOTIFICATIONS],
                            malformed=lambda plural: counted.update([plural]))
    try:
        assert (await store.list(None)).items == []
        assert counted == {"storednotifications": 1}
        for name in ("x", "y"):
            with pytest.raises(NotFound):
                await store.get("ns", name)
        with pytest.raises(MalformedObject, match=r"\"ns/x\" is malformed \(object.metadata "
                                                  r"names ns/y, whose storage object is "
                                                  r"'ns.y', not 'ns.x'\)"):
            await store.guaranteed_update("ns", "x", lambda obj: obj)
    finally:
        store.close()
        await kube.aclose()
