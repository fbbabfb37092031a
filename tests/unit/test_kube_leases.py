"""Leases with a fake kube-apiserver (one Lease collection with resourceVersions, 409 on a
stale write, a switch that makes it unreachable) and a fake clock that tests advance: the
client-go leader election semantics and the replica heartbeat."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.kube.leases import (
    REPLICA_LEASE_LABEL,
    LeaderElector,
    ReplicaLease,
    replica_lease_name,
)
from apiserver.timestamps import micro_time, parse_timestamp
from tests.support.clock import FakeClock

NS = "container-notifier"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
START = 1_800_000_000.0


async def advance(clock: FakeClock, seconds: float, step: float = 0.1) -> None:
    """Move the clock on `step` at a time, letting the electors run between steps (each step's
    sleepers wake in order)."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end - 1e-9:
        clock.advance(min(step, end - clock.monotonic()))
        await settle()


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


class FakeKube:
    """The Lease collection of one namespace, with what the informer needs (list, watch)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = itertools.count(1)
        self.down = False
        self.writes: list[tuple[str, str]] = []
        self._watchers: list[asyncio.Queue[dict[str, Any]]] = []

    def _check(self) -> None:
        if self.down:
            raise KubeUnavailable("kube-apiserver is unreachable")

    def _name(self, path: str) -> str:
        assert path.startswith(LEASES + "/"), path
        return path[len(LEASES) + 1:]

    def _stored(self, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(next(self.version))
        self.objects[obj["metadata"]["name"]] = obj
        for queue in self._watchers:
            queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
        return copy.deepcopy(obj)

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  accept: str | None = None) -> dict[str, Any]:
        self._check()
        if path == LEASES:
            selector = (params or {}).get("labelSelector", "")
            items = [copy.deepcopy(o) for o in self.objects.values()
                     if not selector or selector == f"{REPLICA_LEASE_LABEL}=true"
                     and o["metadata"].get("labels", {}).get(REPLICA_LEASE_LABEL) == "true"]
            return {"items": items, "metadata": {"resourceVersion": str(next(self.version))}}
        name = self._name(path)
        if name not in self.objects:
            raise KubeRejected(404, {"reason": "NotFound"})
        return copy.deepcopy(self.objects[name])

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]:
        self._check()
        assert path == LEASES
        name = body["metadata"]["name"]
        if name in self.objects:
            raise KubeRejected(409, {"reason": "AlreadyExists"})
        self.writes.append(("create", name))
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["uid"] = f"uid-{name}-{next(self.version)}"
        return self._stored(obj, "ADDED")

    async def put(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._check()
        name = self._name(path)
        current = self.objects.get(name)
        if current is None:
            raise KubeRejected(404, {"reason": "NotFound"})
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeRejected(409, {"reason": "Conflict"})
        self.writes.append(("update", name))
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["uid"] = current["metadata"]["uid"]
        return self._stored(obj, "MODIFIED")

    async def delete(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._check()
        name = self._name(path)
        current = self.objects.get(name)
        if current is None:
            raise KubeRejected(404, {"reason": "NotFound"})
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid and uid != current["metadata"]["uid"]:
            raise KubeRejected(409, {"reason": "Conflict"})
        del self.objects[name]
        self.writes.append(("delete", name))
        for queue in self._watchers:
            queue.put_nowait({"type": "DELETED", "object": copy.deepcopy(current)})
        return {}

    async def watch(self, path: str, params: Mapping[str, str], accept: str | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        self._check()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._watchers.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(queue)


def elector(kube: FakeKube, clock: FakeClock, identity: str) -> LeaderElector:
    return LeaderElector(kube, NS, "fanout", identity, lease_duration=15, renew_deadline=10,
                         retry_period=2, clock=clock, rand=lambda: 0.0)


class Campaign:
    """An elector's run() as a task, recording its leadership changes."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.log: list[str] = []
        self.task = asyncio.create_task(elector.run(self._started, self._stopped))

    async def _started(self) -> None:
        self.log.append("started")

    async def _stopped(self) -> None:
        self.log.append("stopped")

    async def cancel(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_micro_time_has_microseconds_and_reads_back() -> None:
    text = micro_time(START + 0.123456)
    assert text == "2027-01-15T08:00:00.123456Z"
    assert parse_timestamp(text) == pytest.approx(START + 0.123456)
    assert parse_timestamp("") is None and parse_timestamp("soon") is None


def test_replica_lease_names_are_valid_and_distinct() -> None:
    assert replica_lease_name("container-notifier-0") == (
        "container-notifier-replica-container-notifier-0")
    odd = replica_lease_name("Host_Name")
    assert odd.startswith("container-notifier-replica-host-name-") and odd == odd.lower()
    assert odd != replica_lease_name("host-name")
    assert len(replica_lease_name("x" * 400)) <= 253


async def test_of_two_electors_only_one_leads() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    first, second = Campaign(elector(kube, clock, "a")), Campaign(elector(kube, clock, "b"))
    await settle()
    await advance(clock, 60)
    leaders = [c for c in (first, second) if c.elector.is_leader]
    assert len(leaders) == 1
    assert sum(c.log.count("started") for c in (first, second)) == 1
    lease = kube.objects["fanout"]["spec"]
    assert lease["holderIdentity"] == leaders[0].elector.identity
    assert lease["leaseDurationSeconds"] == 15
    assert parse_timestamp(lease["renewTime"]) >= clock.now() - 2
    assert lease["leaseTransitions"] == 0
    assert leaders[0].elector.status().leading and leaders[0].elector.status().holder in "ab"
    await first.cancel()
    await second.cancel()


async def test_when_the_leader_stops_renewing_the_other_takes_over_after_the_duration() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    leader = Campaign(elector(kube, clock, "a"))
    await settle()
    assert leader.elector.is_leader
    other = Campaign(elector(kube, clock, "b"))
    await advance(clock, 5)
    assert not other.elector.is_leader
    leader.task.cancel()  # dies: no release (the task never gets to write again)
    kube.down = True
    await settle()
    kube.down = False
    last_renewal = parse_timestamp(kube.objects["fanout"]["spec"]["renewTime"])
    assert last_renewal is not None
    while clock.now() < last_renewal + 15 - 0.05:
        await advance(clock, 0.1)
        assert not other.elector.is_leader, clock.now() - last_renewal
    await advance(clock, 2 * 2 + 0.5)  # it sees the lease expire at its next try
    assert other.elector.is_leader
    spec = kube.objects["fanout"]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    await other.cancel()


async def test_a_leader_that_loses_kube_apiserver_steps_down_within_the_renew_deadline(
        ) -> None:
    kube, clock = FakeKube(), FakeClock(START)
    leader = Campaign(elector(kube, clock, "a"))
    await settle()
    await advance(clock, 3)
    assert leader.elector.is_leader
    renewed = parse_timestamp(kube.objects["fanout"]["spec"]["renewTime"])
    kube.down = True
    await advance(clock, renewed + 10 + 0.1 - clock.now())
    assert not leader.elector.is_leader
    assert leader.log == ["started", "stopped"]
    # the others could not have acquired yet: the lease is valid until renewed + 15
    kube.down = False
    other = Campaign(elector(kube, clock, "b"))
    await settle()
    assert not other.elector.is_leader
    await leader.cancel()
    await other.cancel()


async def test_a_conflict_on_update_means_someone_else_won() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    first, second = elector(kube, clock, "a"), elector(kube, clock, "b")
    # both read the lease free (released), then both write on that version
    kube.objects["fanout"] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                              "metadata": {"name": "fanout", "namespace": NS, "uid": "u",
                                           "resourceVersion": "0"},
                              "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
    real_put = kube.put
    raced = False

    async def put_after_b(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        nonlocal raced
        if not raced:
            raced = True
            assert await second.try_acquire_or_renew()  # b writes between a's read and write
        return await real_put(path, body)

    kube.put = put_after_b  # type: ignore[method-assign]
    assert not await first.try_acquire_or_renew()
    assert kube.objects["fanout"]["spec"]["holderIdentity"] == "b"
    kube.put = real_put  # type: ignore[method-assign]
    assert not await first.try_acquire_or_renew()  # b's lease is valid: a waits


async def test_a_restarted_process_with_the_same_identity_reacquires_at_once() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    before = Campaign(elector(kube, clock, "a"))
    await settle()
    await advance(clock, 4)
    acquired = kube.objects["fanout"]["spec"]["acquireTime"]
    before.task.cancel()
    kube.down = True  # killed: no release
    await settle()
    kube.down = False
    again = Campaign(elector(kube, clock, "a"))
    await settle()
    assert again.elector.is_leader
    spec = kube.objects["fanout"]["spec"]
    assert (spec["holderIdentity"], spec["acquireTime"], spec["leaseTransitions"]) == (
        "a", acquired, 0)
    await again.cancel()


async def test_cancelling_a_leader_stops_leading_then_releases_so_another_acquires_at_once(
        ) -> None:
    kube, clock = FakeKube(), FakeClock(START)
    leader = Campaign(elector(kube, clock, "a"))
    await settle()
    other = Campaign(elector(kube, clock, "b"))
    await advance(clock, 3)
    await leader.cancel()
    assert leader.log == ["started", "stopped"]
    assert kube.objects["fanout"]["spec"]["holderIdentity"] == ""
    await advance(clock, 2 * 2.2 + 0.2)  # its next try, not the lease duration
    assert other.elector.is_leader
    await other.cancel()


async def test_another_holder_seen_while_renewing_ends_leading_at_once() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    leader = Campaign(elector(kube, clock, "a"))
    await settle()
    stolen = copy.deepcopy(kube.objects["fanout"])
    stolen["spec"]["holderIdentity"] = "z"
    kube._stored(stolen, "MODIFIED")
    await advance(clock, 2.1)
    assert not leader.elector.is_leader and leader.log == ["started", "stopped"]
    await leader.cancel()


def test_timings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"lease duration \(10s\) > renew deadline \(10s\)"):
        LeaderElector(FakeKube(), NS, "x", "a", lease_duration=10, renew_deadline=10,
                      retry_period=2)


# the replica heartbeat


async def test_a_replica_lease_is_created_renewed_and_seen_alive_until_it_expires() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    mine = ReplicaLease(kube, NS, "container-notifier-0", 15, 2, clock=clock)
    theirs = ReplicaLease(kube, NS, "container-notifier-1", 15, 2, clock=clock)
    assert mine.is_alive("container-notifier-9")  # nothing known before the cache lists
    tasks = [asyncio.create_task(mine.run()), asyncio.create_task(theirs.run())]
    await settle()
    assert mine.synced and theirs.synced
    lease = kube.objects[mine.name]
    assert lease["metadata"]["labels"] == {REPLICA_LEASE_LABEL: "true"}
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseDurationSeconds"]) == (
        "container-notifier-0", 15)
    await advance(clock, 10)
    assert kube.writes.count(("update", mine.name)) == 5  # every 2 s
    assert mine.is_alive("container-notifier-1") and theirs.is_alive("container-notifier-0")
    assert not mine.is_alive("container-notifier-9")  # no lease: dead
    tasks[1].cancel()  # dies without releasing
    await asyncio.gather(tasks[1], return_exceptions=True)
    renewed = parse_timestamp(kube.objects[theirs.name]["spec"]["renewTime"])
    await advance(clock, renewed + 15 - 0.2 - clock.now())
    assert mine.is_alive("container-notifier-1")
    await advance(clock, 0.3)
    assert not mine.is_alive("container-notifier-1")
    tasks[0].cancel()
    await asyncio.gather(tasks[0], return_exceptions=True)


async def test_a_failed_renewal_is_retried_and_a_restart_takes_over_its_own_lease() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    first = ReplicaLease(kube, NS, "r", 15, 2, clock=clock)
    task = asyncio.create_task(first.run())
    await settle()
    kube.down = True
    await advance(clock, 4)
    assert not await first.renew()
    kube.down = False
    await advance(clock, 2)
    renewed = parse_timestamp(kube.objects[first.name]["spec"]["renewTime"])
    assert renewed is not None and renewed >= START + 4  # renewed again once it came back
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    again = ReplicaLease(kube, NS, "r", 15, 2, clock=clock)  # same replica, new process
    assert await again.renew()
    assert kube.objects[again.name]["spec"]["holderIdentity"] == "r"


async def test_release_deletes_only_the_lease_it_wrote() -> None:
    kube, clock = FakeKube(), FakeClock(START)
    lease = ReplicaLease(kube, NS, "r", 15, 2, clock=clock)
    assert await lease.renew()
    await lease.release()
    assert lease.name not in kube.objects
    assert await lease.renew()
    kube.objects[lease.name]["metadata"]["uid"] = "a-newer-one"
    await lease.release()  # logged, not raised
    assert lease.name in kube.objects
