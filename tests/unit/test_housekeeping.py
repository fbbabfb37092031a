"""Restart recovery and garbage collection of PodNotifier records, on a real SQLite store."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apiserver.notifier import records
from apiserver.notifier.housekeeping import (
    DEFAULT_LEASE_DURATION_SECONDS,
    Takeover,
    collect_once,
    recover_interrupted,
)
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore, runner
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore

DEFAULT_TTL = 3600


def runs_everything(namespace: str, record: str) -> bool:
    """A runner that runs every record of its replica (none is left behind)."""
    return True


class FakePods:
    """Stands in for PodDirectory: `alive` maps (namespace, name) to the current pod UID."""

    def __init__(self, alive: dict[tuple[str, str], str], synced: bool = True) -> None:
        self.alive = alive
        self.synced = asyncio.Event()
        if synced:
            self.synced.set()
        self.asked: list[tuple[str, str, str]] = []

    def gone(self, namespace: str, name: str, uid: str) -> bool:
        self.asked.append((namespace, name, uid))
        return self.synced.is_set() and self.alive.get((namespace, name)) != uid


@pytest.fixture
def store(database: SqliteDatabase) -> PodNotifierStore:
    return PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")


def after_the_grace() -> float:
    """A clock past recovery's grace (the lease duration) for records created now that name no
    replica (written by an earlier version)."""
    return time.time() + DEFAULT_LEASE_DURATION_SECONDS + 1


def record(name: str, phase: str, *, pod: str = "db-0", pod_uid: str = "uid-0",
           containers: list[dict[str, Any]] | None = None, completed: datetime | None = None,
           ttl: int | None = None, namespace: str = "prod", notifier: str = "quiesce",
           replica: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podName": pod, "podUID": pod_uid, "notifier": notifier}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    status: dict[str, Any] = {"phase": phase, "containers": containers or []}
    if completed is not None:
        status["completionTime"] = records.rfc3339(completed)
    if replica is not None:
        status["replica"] = replica
    return {"apiVersion": records.API_VERSION, "kind": records.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}


def finished(name: str, *, ago: timedelta = timedelta(seconds=1), **kwargs: Any
             ) -> dict[str, Any]:
    return record(name, "Succeeded", completed=datetime.now(UTC) - ago,
                  containers=[{"name": "db", "phase": "Succeeded", "exitCode": 0}], **kwargs)


async def names(store: PodNotifierStore) -> set[str]:
    return {obj["metadata"]["name"] for obj in (await store.list(None)).items}


# recover_interrupted


async def test_recover_marks_unfinished_records_interrupted(store: PodNotifierStore) -> None:
    await store.create(record("pending", "Pending", containers=[
        {"name": "db", "phase": "Pending"}]))
    await store.create(record("running", "Running", containers=[
        {"name": "db", "phase": "Succeeded", "exitCode": 0, "reason": "Completed",
         "startTime": "2026-01-01T00:00:00.000Z"},
        {"name": "wal", "phase": "Running", "startTime": "2026-01-01T00:00:00.000Z"}]))

    assert await recover_interrupted(store, clock=after_the_grace) == 2

    pending = await store.get("prod", "pending")
    assert pending["status"]["phase"] == "Failed"
    assert pending["status"]["reason"] == "Interrupted"
    assert pending["status"]["message"] == records.INTERRUPTED_MESSAGE
    assert pending["status"]["completionTime"].endswith("Z")
    [db] = pending["status"]["containers"]
    assert (db["phase"], db["reason"], db["message"]) == ("Failed", "Interrupted",
                                                          records.INTERRUPTED_MESSAGE)

    running = await store.get("prod", "running")
    assert running["status"]["phase"] == "Failed"
    assert running["status"]["reason"] == "Interrupted"
    db, wal = running["status"]["containers"]
    assert db["phase"] == "Succeeded"
    assert (wal["phase"], wal["reason"]) == ("Failed", "Interrupted")
    assert wal["startTime"] == "2026-01-01T00:00:00.000Z"
    assert await store.unfinished() == []


async def test_recover_leaves_finished_records_alone(store: PodNotifierStore) -> None:
    done = await store.create(finished("done"))
    failed = await store.create(record("failed", "Failed", completed=datetime.now(UTC),
                                       containers=[{"name": "db", "phase": "Failed",
                                                    "reason": "Timeout"}]))

    assert await recover_interrupted(store, clock=after_the_grace) == 0

    assert await store.get("prod", "done") == done
    assert await store.get("prod", "failed") == failed


async def test_recover_with_nothing_to_do(store: PodNotifierStore) -> None:
    assert await recover_interrupted(store, clock=after_the_grace) == 0


async def test_recover_skips_a_record_deleted_meanwhile(store: PodNotifierStore) -> None:
    await store.create(record("a", "Running"))
    await store.create(record("b", "Running"))
    original = store.guaranteed_update

    async def deleting_first(namespace: str, name: str, mutate: Any) -> Any:
        if name == "a":
            await store.delete(namespace, name)
            raise NotFound("gone")
        return await original(namespace, name, mutate)

    store.guaranteed_update = deleting_first  # type: ignore[method-assign]

    assert await recover_interrupted(store, clock=after_the_grace) == 1
    assert (await store.get("prod", "b"))["status"]["reason"] == "Interrupted"


async def test_recover_ends_this_replicas_records_at_once(store: PodNotifierStore) -> None:
    """A record this replica runs (``status.replica``, as create_bounded writes it) was left by
    an earlier process of it: ended at start, with no grace; another replica's record is not
    this replica's to end, however old."""
    own = await store.create_bounded(record("own", "Running", notifier="flush"), max_per_pod=10)
    assert runner(own) == "replica-0"
    await store.create(record("other", "Running", replica="replica-1"))

    assert await recover_interrupted(store, clock=time.time) == 1
    ended = (await store.get("prod", "own"))["status"]
    assert (ended["phase"], ended["reason"], ended["message"]) == (
        "Failed", "Interrupted", records.INTERRUPTED_MESSAGE)
    assert ended["replica"] == "replica-0"

    assert await recover_interrupted(store, clock=after_the_grace) == 0
    other = (await store.get("prod", "other"))["status"]
    assert (other["phase"], other["replica"]) == ("Running", "replica-1")


async def test_recover_ends_records_naming_no_replica_after_the_grace(
    store: PodNotifierStore,
) -> None:
    """A record naming no replica (written by an earlier version) may still be run by a
    replica of that version: it is ended only once older than the grace."""
    await store.create(record("legacy", "Running"))

    assert await recover_interrupted(store, clock=time.time) == 0
    assert await recover_interrupted(store, clock=lambda: time.time() + 1,
                                     grace_seconds=DEFAULT_LEASE_DURATION_SECONDS) == 0
    assert (await store.get("prod", "legacy"))["status"]["phase"] == "Running"

    assert await recover_interrupted(store, clock=lambda: time.time() + 11,
                                     grace_seconds=10) == 1
    assert (await store.get("prod", "legacy"))["status"]["reason"] == "Interrupted"


# Takeover


class Alive:
    """Stands in for the replicas' Leases: the replicas named are alive."""

    def __init__(self, *replicas: str) -> None:
        self.replicas = set(replicas)
        self.asked: list[str] = []

    def is_alive(self, replica: str) -> bool:
        self.asked.append(replica)
        return replica in self.replicas


def after_the_lease() -> float:
    return time.time() + DEFAULT_LEASE_DURATION_SECONDS + 1


async def test_takeover_ends_a_dead_replicas_records_only(store: PodNotifierStore) -> None:
    await store.create(record("dead", "Running", replica="replica-1", notifier="a", containers=[
        {"name": "db", "phase": "Running"}]))
    await store.create(record("live", "Running", replica="replica-2", notifier="b"))
    await store.create(record("own", "Running", replica="replica-0", notifier="c"))
    done = await store.create(finished("done", replica="replica-1"))
    live = await store.get("prod", "live")
    own = await store.get("prod", "own")
    alive = Alive("replica-0", "replica-2")
    takeover = Takeover(store, alive, running=runs_everything, clock=after_the_lease)

    assert await takeover.once() == 1

    ended = (await store.get("prod", "dead"))["status"]
    assert (ended["phase"], ended["reason"]) == ("Failed", "Interrupted")
    assert ended["message"].startswith(
        'the server replica "replica-1" that ran this notifier stopped: its Lease had expired '
        'when replica "replica-0" checked at ')
    assert [(c["phase"], c["reason"]) for c in ended["containers"]] == [
        ("Failed", "Interrupted")]
    assert await store.get("prod", "live") == live
    assert await store.get("prod", "own") == own  # its own runs are not taken over
    assert await store.get("prod", "done") == done
    assert await takeover.once() == 0  # ended once
    assert "replica-0" not in alive.asked


async def test_takeover_waits_for_the_lease_duration(store: PodNotifierStore) -> None:
    """A young record of a replica with no Lease (it may not have renewed one yet, or the
    record was created just now) is left alone until the lease duration has passed."""
    await store.create(record("young", "Running", replica="replica-1"))
    young = await store.get("prod", "young")

    assert await Takeover(store, Alive(), running=runs_everything, clock=time.time).once() == 0
    assert await store.get("prod", "young") == young

    assert await Takeover(store, Alive(), running=runs_everything, lease_duration_seconds=5,
                          clock=lambda: time.time() + 6).once() == 1
    assert (await store.get("prod", "young"))["status"]["reason"] == "Interrupted"


async def test_takeover_ends_its_own_records_that_this_process_does_not_run(
    store: PodNotifierStore,
) -> None:
    """A refused create whose deletion failed, a run that ended without its result: the
    record names this replica, which is alive, but nothing runs it."""
    await store.create(record("left", "Running", replica="replica-0", notifier="a"))
    await store.create(record("run", "Running", replica="replica-0", notifier="b"))
    running = {("prod", "run")}

    takeover = Takeover(store, Alive("replica-0"), running=lambda ns, name: (ns, name) in running,
                        clock=after_the_lease)
    assert await takeover.once() == 1

    left = (await store.get("prod", "left"))["status"]
    assert (left["phase"], left["reason"]) == ("Failed", "Interrupted")
    assert left["message"].startswith(
        'the server replica "replica-0" that runs this notifier does not run it any more')
    assert (await store.get("prod", "run"))["status"]["phase"] == "Running"


async def test_takeover_ends_old_records_naming_no_replica(store: PodNotifierStore) -> None:
    await store.create(record("legacy", "Running"))

    assert await Takeover(store, Alive("replica-0"), running=runs_everything,
                          clock=time.time).once() == 0
    assert (await store.get("prod", "legacy"))["status"]["phase"] == "Running"

    assert await Takeover(store, Alive("replica-0"), running=runs_everything,
                          clock=after_the_lease).once() == 1
    status = (await store.get("prod", "legacy"))["status"]
    assert status["reason"] == "Interrupted"
    assert status["message"].startswith(
        "the record names no server replica that runs it (an earlier version wrote it) and was "
        'older than the lease duration when replica "replica-0" checked at ')
    assert status["message"].endswith(
        "; the notifier may or may not have completed in the container")


# collect_once


async def test_collect_deletes_expired_records(store: PodNotifierStore) -> None:
    await store.create(finished("old-default", ago=timedelta(seconds=DEFAULT_TTL + 5)))
    await store.create(finished("old-own-ttl", ago=timedelta(seconds=20), ttl=10))
    await store.create(finished("zero-ttl", ttl=0))
    await store.create(finished("fresh", ago=timedelta(seconds=20)))
    await store.create(finished("long-ttl", ago=timedelta(seconds=DEFAULT_TTL + 5), ttl=7200))
    pods = FakePods({("prod", "db-0"): "uid-0"})

    assert await collect_once(store, pods, DEFAULT_TTL, 10) == (3, 0, 0, 0)

    assert await names(store) == {"fresh", "long-ttl"}


async def test_collect_deletes_finished_records_of_gone_pods(store: PodNotifierStore) -> None:
    await store.create(finished("alive", pod="db-0", pod_uid="uid-0"))
    await store.create(finished("deleted-pod", pod="db-1", pod_uid="uid-1"))
    await store.create(finished("replaced-pod", pod="db-2", pod_uid="old-uid"))
    await store.create(finished("other-namespace", pod="db-0", pod_uid="uid-0",
                                namespace="staging"))
    await store.create(record("failed-gone", "Failed", pod="db-1", pod_uid="uid-1",
                              completed=datetime.now(UTC)))
    await store.create(record("running-gone", "Running", pod="db-1", pod_uid="uid-1"))
    await store.create(record("pending-gone", "Pending", pod="db-1", pod_uid="uid-1"))
    pods = FakePods({("prod", "db-0"): "uid-0", ("prod", "db-2"): "new-uid"})

    assert await collect_once(store, pods, DEFAULT_TTL, 10) == (0, 4, 0, 2)

    assert await names(store) == {"alive", "running-gone", "pending-gone"}
    assert {name for _, name, _ in pods.asked} == {"db-0", "db-1", "db-2"}


async def test_collect_waits_for_the_pod_index(store: PodNotifierStore) -> None:
    await store.create(finished("gone", pod="db-1", pod_uid="uid-1"))
    await store.create(finished("expired", ago=timedelta(seconds=DEFAULT_TTL + 1)))
    pods = FakePods({}, synced=False)

    assert await collect_once(store, pods, DEFAULT_TTL, 10) == (1, 0, 0, 0)

    assert await names(store) == {"gone"}
    assert pods.asked == []


async def test_collect_pages_through_many_records(store: PodNotifierStore) -> None:
    """More than one page (500) of records; the deletions stay within the event retention."""
    for index in range(503):
        await store.create(finished(f"r-{index:03}", pod=f"p-{index}", pod_uid=f"u-{index}"))
    alive = {("prod", "p-7"): "u-7", ("prod", "p-502"): "u-502"}

    assert await collect_once(store, FakePods(alive), DEFAULT_TTL, 10) == (0, 501, 0, 0)

    assert await names(store) == {"r-007", "r-502"}
