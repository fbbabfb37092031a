"""The per-pod bounds across replicas: two PodNotifierStores over the same backend objects
stand for two replicas (on the Kubernetes backends each has caches of its own), on every backend
of the ``backend`` fixture: one unfinished run per (pod, notifier), at most K unfinished runs per
pod, decided on the records themselves (each admitted among those created before it), a
finished or deleted record freeing its place, the takeover of a stopped replica's runs, restart
recovery, and the K bound on stored records restored by trimming. On the fake Kubernetes API one
replica's caches are held back to show that no decision is taken on a stale cache. Last, the
manifests: every stored resource has its CRD and the server's RBAC."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from apiserver.kube import KubeClient
from apiserver.notifier import records
from apiserver.notifier.exec_protocol import Stop
from apiserver.notifier.housekeeping import (
    Takeover,
    collect_forever,
    collect_once,
    recover_interrupted,
)
from apiserver.notifier.stopping import Stopped
from apiserver.registry.errors import AlreadyExists, Conflict, NotFound, TooManyRequests
from apiserver.registry.kube_objects import STORAGE_GROUP, STORAGE_VERSION, storage_kind
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.podnotifiers import PodNotifierStore, eviction_low_water
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import Object
from apiserver.server import STORED_RESOURCES
from apiserver.timestamps import timestamp
from localcluster.layout import REPO_ROOT
from tests.support.backends import Backend
from tests.support.fake_storage_api import FakeStorageAPI
from tests.unit.test_housekeeping import FakePods

NS = "ns"
K = 3
LEASE = 15.0


def runs_everything(namespace: str, record: str) -> bool:
    """A runner that runs every record of its replica (none is left behind)."""
    return True


@dataclass
class Replicas:
    a: PodNotifierStore
    b: PodNotifierStore

    def __iter__(self) -> Iterator[PodNotifierStore]:
        return iter((self.a, self.b))


def replica(backend: Backend, name: str, trim_delay: float = 0.05,
            sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> PodNotifierStore:
    return PodNotifierStore(backend.store(PODNOTIFIERS), name, trim_delay_seconds=trim_delay,
                            sleep=sleep)


def after_the_lease() -> float:
    return time.time() + LEASE + 1


def after_the_grace() -> float:
    return time.time() + LEASE + 2


@pytest.fixture(autouse=True)
def long_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests churn many records at once: a window as short as the conformance suite's
    (20 changes) would roll past a create before its admission (which then answers 503)."""
    monkeypatch.setattr(Backend, "history", 10_000)


@pytest.fixture
async def replicas(backend: Backend) -> AsyncIterator[Replicas]:
    opened = Replicas(replica(backend, "replica-a"), replica(backend, "replica-b"))
    yield opened
    for store in opened:
        store.close()


def record(notifier: str, *, pod: str = "web-0", name: str = "", phase: str = "Pending"
           ) -> Object:
    meta: dict[str, Any] = {"namespace": NS}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = f"{pod}-{notifier}-"
    return {"apiVersion": records.API_VERSION, "kind": records.KIND, "metadata": meta,
            "spec": {"podName": pod, "podUID": f"uid-{pod}", "notifier": notifier},
            "status": {"phase": phase, "containers": [{"name": "db", "phase": phase}]}}


def finished_record(name: str, *, pod: str = "web-0", ago: float = 0) -> Object:
    obj = record(f"done-{name}", pod=pod, name=name, phase="Succeeded")
    obj["status"]["completionTime"] = timestamp(datetime.now(UTC) - timedelta(seconds=ago))
    return obj


def finish(obj: Object) -> Object:
    return records.finish(obj, records.now())


async def caught_up(*stores: PodNotifierStore) -> None:
    """Each replica's cache has every write acknowledged so far (another replica's included),
    as a background pass sees them once the watch brings them."""
    for store in stores:
        await store.consistent_read(NS)


async def run_names(store: PodNotifierStore, pod: str = "web-0", *, consistent: bool = True
                    ) -> list[str]:
    """The pod's unfinished records, as ``store`` sees them (see `pod_records`)."""
    return sorted(r["metadata"]["name"] for r in await pod_records(store, pod,
                                                                    consistent=consistent)
                  if not records.is_finished(r))


async def pod_records(store: PodNotifierStore, pod: str = "web-0", *, consistent: bool = True
                      ) -> list[Object]:
    """The pod's records as a read through ``store``'s replica sees them: by default a
    consistent read, as the API's reads without a resourceVersion are (another replica's
    writes included); else its cache as it is."""
    if consistent:
        await store.consistent_read(NS)
    return (await store.list(NS, field_selector=f"spec.podName={pod}")).items


async def until(check: Callable[[], Any], timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


# One unfinished run per (pod, notifier), at most K per pod


async def test_the_same_notifier_on_two_replicas_at_once(replicas: Replicas) -> None:
    pods = [f"web-{i}" for i in range(5)]
    results = await asyncio.gather(
        *(store.create_bounded(record("quiesce", pod=pod), max_per_pod=K)
          for pod in pods for store in replicas), return_exceptions=True)

    for pod, pair in zip(pods, zip(results[::2], results[1::2], strict=True), strict=True):
        created = [r for r in pair if isinstance(r, dict)]
        refused = [r for r in pair if isinstance(r, BaseException)]
        assert len(created) == 1 and len(refused) == 1, pair
        assert isinstance(refused[0], Conflict) and refused[0].code == 409
        name = created[0]["metadata"]["name"]
        assert refused[0].message == (
            f'notifier "quiesce" is already running on pod "{pod}" '
            f'(podnotifiers.notifier.x-k8s.io "{name}"); wait for it to finish')
        # The refused record was deleted again, through whichever replica created it.
        assert [r["metadata"]["name"] for r in await pod_records(replicas.a, pod)] == [name]
        assert await run_names(replicas.b, pod) == [name]


async def test_ten_k_creates_over_two_replicas_admit_k(replicas: Replicas) -> None:
    stores = list(replicas)
    results = await asyncio.gather(
        *(stores[i % 2].create_bounded(record(f"n{i}"), max_per_pod=K) for i in range(10 * K)),
        return_exceptions=True)

    created = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, TooManyRequests)]
    assert len(created) == K
    assert len(refused) == 9 * K, {type(r).__name__ for r in results}
    assert refused[0].message == (
        f'pod "web-0" has {K} or more unfinished notifier records, the most it may keep; retry '
        "when one of them finishes")
    assert refused[0].retry_after_seconds == 5

    async def k_stored() -> bool:  # a refused create's record is deleted after its decision,
        return (len(await pod_records(replicas.a)) == K  # which a cache may show a moment later
                and len(await run_names(replicas.b)) == K)

    await until(k_stored)


async def test_runs_that_finish_meanwhile_never_exceed_k(replicas: Replicas) -> None:
    """Both replicas keep creating and finishing runs; the unfinished records, sampled all
    along, are never more than K."""
    created = 0
    stop = asyncio.Event()

    seen: list[set[str]] = []
    admitted: set[str] = set()

    async def sample() -> None:
        while not stop.is_set():
            seen.append(set(await run_names(replicas.a)))
            await asyncio.sleep(0.005)

    async def churn(store: PodNotifierStore, worker: int) -> None:
        nonlocal created
        for attempt in range(4):
            try:
                run = await store.create_bounded(record(f"w{worker}-{attempt}"),
                                                 max_per_pod=K)
            except TooManyRequests:
                await asyncio.sleep(0.01)
                continue
            created += 1
            admitted.add(run["metadata"]["name"])
            await asyncio.sleep(0.01)
            await store.guaranteed_update(NS, run["metadata"]["name"], finish)

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(churn(store, 2 * worker + side) for worker in range(5)
                           for side, store in enumerate(replicas)))
    stop.set()
    await sampler

    # Records that lost a race are stored for a moment, until deleted: they never ran.
    unfinished_seen = [len(names & admitted) for names in seen]
    assert created >= K
    assert unfinished_seen and max(unfinished_seen) <= K
    assert await run_names(replicas.a) == []
    after = await replicas.b.create_bounded(record("after"), max_per_pod=K)
    assert await run_names(replicas.a) == [after["metadata"]["name"]]


# Freeing a place


async def test_a_finished_record_frees_its_place(replicas: Replicas) -> None:
    first = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    assert await run_names(replicas.a) == [first["metadata"]["name"]]
    assert first["status"]["replica"] == "replica-a"

    await replicas.a.guaranteed_update(NS, first["metadata"]["name"], finish)

    second = await replicas.b.create_bounded(record("quiesce"), max_per_pod=K)
    assert await run_names(replicas.b) == [second["metadata"]["name"]]
    assert second["status"]["replica"] == "replica-b"


async def test_a_deleted_record_frees_its_run(replicas: Replicas) -> None:
    first = await replicas.b.create_bounded(record("quiesce"), max_per_pod=K)
    other = await replicas.b.create_bounded(record("flush"), max_per_pod=K)

    await replicas.a.delete(NS, first["metadata"]["name"])
    assert await run_names(replicas.a) == [other["metadata"]["name"]]
    await replicas.a.delete_collection(NS)
    assert await run_names(replicas.a) == []


async def test_a_failed_record_create_leaves_nothing_behind(replicas: Replicas) -> None:
    await replicas.a.create(finished_record("taken"))

    with pytest.raises(AlreadyExists):
        await replicas.a.create_bounded(record("quiesce", name="taken"), max_per_pod=K)

    assert await run_names(replicas.a) == []
    await replicas.b.create_bounded(record("quiesce"), max_per_pod=K)


async def test_an_unfinished_record_counts_whatever_its_age_a_finished_one_does_not(
    replicas: Replicas,
) -> None:
    done = await replicas.a.create_bounded(record("quiesce"), max_per_pod=2)
    busy = await replicas.a.create_bounded(record("flush"), max_per_pod=2)
    await replicas.a.guaranteed_update(NS, busy["metadata"]["name"], lambda r: {
        **r, "status": {**r["status"], "phase": "Running"}})  # updated: created long before
    await replicas.a.guaranteed_update(NS, done["metadata"]["name"], finish)

    with pytest.raises(Conflict):
        await replicas.b.create_bounded(record("flush"), max_per_pod=3)
    created = await replicas.b.create_bounded(record("quiesce"), max_per_pod=2)

    assert await run_names(replicas.b) == sorted([busy["metadata"]["name"],
                                                  created["metadata"]["name"]])


async def test_a_record_left_undecided_by_a_stopped_replica_counts_until_taken_over(
    replicas: Replicas,
) -> None:
    """Replica a created its record and stopped before it could delete a refused one, or
    before its run started: the record counts, until the takeover ends it."""
    await replicas.a.create({**record("quiesce", name="orphan"),
                             "status": {"phase": "Running", "replica": "replica-a"}})

    with pytest.raises(Conflict):
        await replicas.b.create_bounded(record("quiesce"), max_per_pod=K)
    assert await Takeover(replicas.b, Alive("replica-b"), running=runs_everything,
                          lease_duration_seconds=LEASE,
                          clock=after_the_lease).once() == 1
    created = await replicas.b.create_bounded(record("quiesce"), max_per_pod=K)

    assert await run_names(replicas.b) == [created["metadata"]["name"]]


# Takeover and restart recovery


class Alive:
    def __init__(self, *replicas: str) -> None:
        self.replicas = set(replicas)

    def is_alive(self, replica: str) -> bool:
        return replica in self.replicas


async def test_takeover_ends_a_stopped_replicas_runs_only(replicas: Replicas) -> None:
    dead = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    alive = await replicas.b.create_bounded(record("flush"), max_per_pod=K)
    takeover = Takeover(replicas.b, Alive("replica-b"), running=runs_everything,
                        lease_duration_seconds=LEASE,
                        clock=after_the_lease)
    await caught_up(replicas.b)

    assert await takeover.once() == 1

    ended = await replicas.b.get(NS, dead["metadata"]["name"])
    assert (ended["status"]["phase"], ended["status"]["reason"]) == ("Failed", "Interrupted")
    assert ended["status"]["message"].startswith(
        'the server replica "replica-a" that ran this notifier stopped: its Lease had expired '
        'when replica "replica-b" checked at ')
    assert [c["reason"] for c in ended["status"]["containers"]] == ["Interrupted"]
    assert await replicas.b.get(NS, alive["metadata"]["name"]) == alive
    assert await run_names(replicas.a) == [alive["metadata"]["name"]]
    assert await takeover.once() == 0


async def test_takeover_ends_records_that_name_no_replica(replicas: Replicas) -> None:
    """Records of an earlier version, which named no replica: as a stopped replica's."""
    legacy = await replicas.a.create(record("old", name="legacy"))
    await caught_up(replicas.b)

    assert await Takeover(replicas.b, Alive("replica-a", "replica-b"), running=runs_everything,
                          lease_duration_seconds=LEASE, clock=after_the_lease).once() == 1
    assert (await replicas.b.get(NS, legacy["metadata"]["name"]))["status"]["reason"] == \
        "Interrupted"


class Stopper:
    """Stops commands by PID (a fake of the exec), as told."""

    def __init__(self, stop: Stop = Stop.TERMINATED) -> None:
        self.stop_as = stop
        self.stopped: list[tuple[str, str, str, int]] = []

    async def stop(self, namespace: str, pod: str, container: str, pid: int) -> Stopped:
        self.stopped.append((namespace, pod, container, pid))
        how = (f"the command (PID {pid}) was stopped with SIGTERM"
               if self.stop_as is not Stop.NOT_STOPPED
               else f"stopping the command (PID {pid}) failed (refused): it may still run")
        return Stopped(self.stop_as, how)


@pytest.mark.parametrize(("stop", "phrase"), [
    (Stop.TERMINATED, "db: stopped (the command (PID 4242) was stopped with SIGTERM)"),
    (Stop.NOT_STOPPED, "db: stopping it failed (stopping the command (PID 4242) failed "
                       "(refused): it may still run)")])
async def test_takeover_stops_a_stopped_replicas_held_command_by_its_pid(
        replicas: Replicas, stop: Stop, phrase: str) -> None:
    held = record("lock", phase="Held")
    held["status"]["containers"][0].update(pid=4242, heldTime="2026-12-01T10:00:00.000Z")
    held["status"].update(maxHoldSeconds=60, heldTime="2026-12-01T10:00:00.000Z")
    dead = await replicas.a.create_bounded(held, max_per_pod=K)
    plain = await replicas.a.create_bounded(record("flush"), max_per_pod=K)
    stopper = Stopper(stop)
    takeover = Takeover(replicas.b, Alive("replica-b"), running=runs_everything,
                        lease_duration_seconds=LEASE,
                        clock=after_the_lease, stopper=stopper)
    await caught_up(replicas.b)

    assert await takeover.once() == 2

    assert stopper.stopped == [(NS, "web-0", "db", 4242)]
    status = (await replicas.b.get(NS, dead["metadata"]["name"]))["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted")
    assert status["message"].endswith("; the held command was stopped by PID: " + phrase)
    plain_status = (await replicas.b.get(NS, plain["metadata"]["name"]))["status"]
    assert "held command" not in plain_status["message"]


async def test_takeover_waits_for_the_lease_duration(replicas: Replicas) -> None:
    young = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    await caught_up(replicas.b)

    assert await Takeover(replicas.b, Alive(), running=runs_everything,
                          lease_duration_seconds=LEASE).once() == 0

    assert await replicas.b.get(NS, young["metadata"]["name"]) == young


async def test_two_survivors_end_a_run_once(replicas: Replicas, backend: Backend) -> None:
    dead = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    third = replica(backend, "replica-c")
    survivors = [Takeover(store, Alive("replica-b", "replica-c"), running=runs_everything,
                          lease_duration_seconds=LEASE,
                          clock=after_the_lease) for store in (replicas.b, third)]
    await caught_up(replicas.b, third)

    counts = await asyncio.gather(*(survivor.once() for survivor in survivors))

    assert sorted(counts) == [0, 1]
    await caught_up(replicas.a)
    ended = await replicas.a.get(NS, dead["metadata"]["name"])
    assert ended["status"]["reason"] == "Interrupted"
    assert int(ended["metadata"]["resourceVersion"]) > int(dead["metadata"]["resourceVersion"])
    assert await run_names(replicas.a) == []
    third.close()


async def test_recovery_ends_own_runs_and_records_naming_no_replica(replicas: Replicas) -> None:
    own = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    others = await replicas.b.create_bounded(record("flush"), max_per_pod=K)
    legacy = await replicas.a.create(record("old", name="legacy"))  # an earlier version's
    fresh = await replicas.a.create(record("new", name="fresh", pod="web-1"))

    assert await recover_interrupted(replicas.a, clock=lambda: time.time() + 0.5,
                                     grace_seconds=LEASE) == 1
    assert (await replicas.a.get(NS, own["metadata"]["name"]))["status"]["reason"] == \
        "Interrupted"
    assert await run_names(replicas.a) == sorted([others["metadata"]["name"], "legacy"])
    assert await replicas.a.get(NS, legacy["metadata"]["name"]) == legacy  # within the grace

    assert await recover_interrupted(replicas.a, clock=after_the_grace, grace_seconds=LEASE) == 2
    for name in (legacy["metadata"]["name"], fresh["metadata"]["name"]):
        assert (await replicas.a.get(NS, name))["status"]["reason"] == "Interrupted"
    assert (await replicas.a.get(NS, others["metadata"]["name"]))["status"]["phase"] == \
        "Pending"


# The K bound on stored records


async def test_a_bounded_create_trims_the_pod_to_k_soon_after(
    replicas: Replicas, backend: Backend,
) -> None:
    """Two replicas that evict against the same (stale) records at once may leave more than K:
    here b's creates land just after c's bounded create, evicting nothing, as if late; c's trim
    restores the bound soon after, oldest finished first."""
    trim_delay_over = asyncio.Event()

    async def until_the_late_creates(seconds: float) -> None:
        await trim_delay_over.wait()

    creator = replica(backend, "replica-c", sleep=until_the_late_creates)
    for i in range(K):
        await replicas.a.create(finished_record(f"old{i}", ago=100 - i))

    created = await creator.create_bounded(record("quiesce"), max_per_pod=K)
    kept = [r["metadata"]["name"] for r in await pod_records(replicas.a)]
    assert len(kept) == eviction_low_water(K)
    late = [await replicas.b.create(finished_record(f"late{i}", ago=50 - i))
            for i in range(K + 1 - len(kept))]
    assert len(await pod_records(replicas.a)) == K + 1
    assert len(await pod_records(creator)) == K + 1  # the creator's cache has them too
    trim_delay_over.set()

    async def bounded() -> bool:
        return len(await pod_records(replicas.a)) <= K

    await until(bounded)
    assert f"old{K - 1}" in kept  # and it is the one trimmed, the oldest finished
    assert sorted(r["metadata"]["name"] for r in await pod_records(replicas.a)) == sorted(
        [created["metadata"]["name"], *(r["metadata"]["name"] for r in late)])
    creator.close()


async def test_the_collector_trims_every_pod_beyond_k(replicas: Replicas) -> None:
    for pod in ("web-0", "web-1"):
        for i in range(K + 2):
            await replicas.a.create(finished_record(f"{pod}-old{i}", pod=pod, ago=100 - i))
    await replicas.a.create(finished_record("web-2-old", pod="web-2"))
    pods: Any = FakePods({(NS, "web-0"): "uid-web-0", (NS, "web-1"): "uid-web-1",
                     (NS, "web-2"): "uid-web-2"})
    await caught_up(replicas.b)

    collected = await collect_once(replicas.b, pods, 3600, K)

    assert collected.trimmed == 4
    for pod in ("web-0", "web-1"):
        assert sorted(r["metadata"]["name"] for r in await pod_records(replicas.a, pod)) == \
            [f"{pod}-old{i}" for i in range(2, K + 2)]
    assert len(await pod_records(replicas.a, "web-2")) == 1


async def test_the_collector_deletes_finished_records_of_gone_pods(replicas: Replicas) -> None:
    gone = await replicas.a.create_bounded(record("quiesce", pod="gone-0"), max_per_pod=K)
    kept = await replicas.a.create_bounded(record("quiesce", pod="web-0"), max_per_pod=K)
    await replicas.a.guaranteed_update(NS, gone["metadata"]["name"], finish)
    await replicas.a.guaranteed_update(NS, kept["metadata"]["name"], finish)
    pods: Any = FakePods({(NS, "web-0"): "uid-web-0"})
    await caught_up(replicas.b)

    collected = await collect_once(replicas.b, pods, 3600, K)

    assert (collected.orphaned, collected.waiting) == (1, 0)
    assert [r["metadata"]["name"] for r in (await replicas.b.list(NS)).items] == [
        kept["metadata"]["name"]]


async def test_a_gone_pods_unfinished_record_waits_for_the_next_collection(
    replicas: Replicas,
) -> None:
    """Its run ends later (the runner sees the pod gone): no pod deletion follows to trigger a
    scan, so the collection says it is waiting, and the collector scans again."""
    running = await replicas.a.create_bounded(record("quiesce", pod="gone-0"), max_per_pod=K)
    pods: Any = FakePods({})
    await caught_up(replicas.b)

    first = await collect_once(replicas.b, pods, 3600, K)
    assert (first.orphaned, first.waiting) == (0, 1)

    await replicas.a.guaranteed_update(NS, running["metadata"]["name"], finish)
    await caught_up(replicas.b)
    after = await collect_once(replicas.b, pods, 3600, K)
    assert (after.orphaned, after.waiting) == (1, 0)
    assert (await replicas.b.list(NS)).items == []


async def test_the_collector_scans_again_while_gone_pods_records_are_unfinished(
    replicas: Replicas,
) -> None:
    running = await replicas.a.create_bounded(record("quiesce", pod="gone-0"), max_per_pod=K)
    pods: Any = FakePods({})
    pods.deletions = 1  # one pod deletion seen, before the collector starts: one scan
    collector = asyncio.create_task(collect_forever(replicas.b, pods, 3600, K, interval=0.01))
    try:
        async def scanned() -> bool:
            return bool(pods.asked)

        await until(scanned)
        assert len((await replicas.b.list(NS)).items) == 1
        await replicas.a.guaranteed_update(NS, running["metadata"]["name"], finish)

        async def collected() -> bool:
            return (await replicas.b.list(NS)).items == []

        await until(collected)
    finally:
        collector.cancel()


# A replica whose caches lag (the fake Kubernetes API)


@pytest.fixture
async def lagging() -> AsyncIterator[tuple[PodNotifierStore, PodNotifierStore, asyncio.Event]]:
    """Replica a, and replica b whose caches get no watch event while the event is clear."""
    api, delivery = FakeStorageAPI(), asyncio.Event()
    delivery.set()
    clients: list[KubeClient] = [api.client(), api.client(delivery=delivery)]
    stores = [PodNotifierStore(KubeObjectStore(kube, PODNOTIFIERS, storage_namespace="cn-storage"),
                               name)
              for kube, name in zip(clients, ("replica-a", "replica-b"), strict=True)]
    for store in stores:
        await store.list(NS)
    yield stores[0], stores[1], delivery
    delivery.set()
    for store in stores:
        store.close()
    for kube in clients:
        await kube.aclose()


async def test_a_lagging_replica_decides_among_every_record_created_before_its_own(
    lagging: tuple[PodNotifierStore, PodNotifierStore, asyncio.Event],
) -> None:
    """b's cache has not seen a's record: the create goes ahead, and b decides once its cache
    has reached its own create, which comes after a's: 409, and b's record is deleted."""
    a, b, delivery = lagging
    delivery.clear()
    first = await a.create_bounded(record("quiesce"), max_per_pod=2)
    assert await run_names(b, consistent=False) == []  # b lags

    asyncio.get_running_loop().call_later(0.3, delivery.set)
    with pytest.raises(Conflict) as refused:
        await b.create_bounded(record("quiesce"), max_per_pod=2)

    assert refused.value.name == first["metadata"]["name"]
    assert await run_names(a) == [first["metadata"]["name"]]
    assert await run_names(b) == [first["metadata"]["name"]]


async def test_a_replica_whose_cache_lags_a_final_write_reads_the_record_before_refusing(
    lagging: tuple[PodNotifierStore, PodNotifierStore, asyncio.Event],
) -> None:
    """A client waits for its run through replica a, then asks again through replica b, whose
    cache has not seen the final write: b reads the record from the storage, creates, and its
    cache, once at its own create, has the final write too."""
    a, b, delivery = lagging
    first = await a.create_bounded(record("quiesce"), max_per_pod=1)
    await until(lambda: _has_record(b, first["metadata"]["name"]))
    delivery.clear()
    await a.guaranteed_update(NS, first["metadata"]["name"], finish)
    assert not records.is_finished(await b.get(NS, first["metadata"]["name"]))  # b lags

    asyncio.get_running_loop().call_later(0.3, delivery.set)
    second = await b.create_bounded(record("quiesce"), max_per_pod=1)

    assert await run_names(a) == [second["metadata"]["name"]]


async def test_a_refusal_the_current_records_make_writes_nothing(
    lagging: tuple[PodNotifierStore, PodNotifierStore, asyncio.Event],
) -> None:
    a, b, _ = lagging
    await a.create_bounded(record("quiesce"), max_per_pod=1)
    await until(lambda: _has_records(b, 1))
    before = (await b.list(NS)).resource_version

    with pytest.raises(TooManyRequests):
        await b.create_bounded(record("flush"), max_per_pod=1)

    assert (await a.list(NS)).resource_version == before


async def _has_record(store: PodNotifierStore, name: str) -> bool:
    try:
        await store.get(NS, name)
    except NotFound:
        return False
    return True


async def _has_records(store: PodNotifierStore, count: int) -> bool:
    return len((await store.list(NS)).items) == count


# The manifests


def test_every_stored_resource_has_its_crd_and_rbac() -> None:
    """The CRDs the server checks at start (``STORED_RESOURCES``) are in
    apiservice/storage-crds.yaml with the storage conventions, and the server may use them."""
    crds = {crd["metadata"]["name"]: crd for crd in yaml.safe_load_all(
        (REPO_ROOT / "apiservice" / "storage-crds.yaml").read_text())}
    roles = {(role["kind"], role["metadata"]["name"]): role for role in yaml.safe_load_all(
        (REPO_ROOT / "apiservice" / "rbac-server.yaml").read_text())}
    storage_rule, _, _ = roles[("Role", "container-notifier:storage")]["rules"]  # + the marker
    [migration_rule, crd_rule] = roles[("ClusterRole", "container-notifier:storage")]["rules"]
    for resource in STORED_RESOURCES:
        kind = storage_kind(resource)
        spec = crds[kind.crd_name]["spec"]
        assert (spec["group"], spec["scope"], spec["names"]["plural"], spec["names"]["kind"]) == \
            (STORAGE_GROUP, "Namespaced", kind.plural, kind.kind)
        [version] = spec["versions"]
        assert version["name"] == STORAGE_VERSION and version["storage"]
        assert version["schema"]["openAPIV3Schema"]["required"] == ["object"]
        assert kind.plural in storage_rule["resources"]
        assert kind.plural in migration_rule["resources"]  # the move of layout-1 objects
        assert kind.crd_name in crd_rule["resourceNames"]
    assert {"get", "list", "watch", "create", "update", "delete"} <= set(storage_rule["verbs"])


async def test_a_dry_run_decides_on_the_current_records_and_writes_nothing(
    replicas: Replicas,
) -> None:
    first = await replicas.a.create_bounded(record("quiesce"), max_per_pod=K)
    await replicas.b.consistent_read(NS)
    before = (await replicas.b.list(NS)).resource_version

    obj = await replicas.b.check_bounded(record("quiesce", pod="fresh-0"), max_per_pod=K)
    with pytest.raises(Conflict):
        await replicas.b.check_bounded(record("quiesce"), max_per_pod=K)
    sentinel = await replicas.b.create(finished_record("sentinel"))

    assert (obj["spec"]["podName"], obj["status"]["replica"]) == ("fresh-0", "replica-b")
    # The first change after `before` is the sentinel's: the checks wrote nothing.
    async with asyncio.timeout(10):
        async for event in await replicas.b.watch(NS, resource_version=before):
            assert (event.type, event.object["metadata"]["name"]) == (
                "ADDED", sentinel["metadata"]["name"])
            break
    assert await run_names(replicas.a) == [first["metadata"]["name"]]
