"""The fan-out with several replicas: two FanoutManagers over the same stores (two replicas of
one cluster), each with its own fake pods and runs (a replica's runner knows only its own
runs). Only the leader runs Notifications; a follower stores scopes and stop flags."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apiserver.fanout import reasons, run_base, scope
from apiserver.fanout.manager import FanoutManager
from apiserver.fanout.parts import FanoutParts
from apiserver.fanout.scope_store import ScopeStore
from apiserver.notifier import records
from apiserver.notifier.events import NotificationEvents
from apiserver.notifier.holds import HoldReleases
from apiserver.registry.resources import NOTIFICATION_POD_SETS, NOTIFICATION_RUNS
from apiserver.registry.sqlite_store import SqliteObjectStore
from tests.support.clock import FakeClock
from tests.support.events import RecordingSink
from tests.unit.test_fanout_run import (
    NS,
    QUIESCE,
    UNQUIESCE,
    FakeAuthorizer,
    FakeMetrics,
    FakeNewPods,
    FakePods,
    Server,
    counts,
)

INTERVAL = 0.05
WITHIN = 30.0
"""The bound of each wait here, for a failure only: every wait ends as soon as what it waits
for holds (a quarter of a second on a quiet machine), and a loaded CI machine once took over
2 s to start two pods."""


@dataclass
class Replica:
    manager: FanoutManager
    fake: FakePods


def replica(server: Server, *, scope_grace: float = 0, absent_grace: float = 0) -> Replica:
    """Another replica over `server`'s stores, not leading."""
    fake = FakePods(server.podnotifiers, server.clock)
    fake.pods = server.fake.pods  # the same cluster's pods
    manager = FanoutManager(FanoutParts(
        notifications=server.notifications, podnotifiers=server.podnotifiers,
        scopes=server.scopes, admission=fake, runner=fake, authorizer=FakeAuthorizer(),
        metrics=FakeMetrics(), new_pods=FakeNewPods(),
        events=NotificationEvents(RecordingSink()),
        holds=HoldReleases(server.podnotifiers)), sweep_delay=0.01, clock=server.clock,
        reconcile_interval=INTERVAL, scope_grace=scope_grace, absent_grace=absent_grace)
    return Replica(manager, fake)


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> AsyncIterator[tuple[Server, Replica, Replica]]:
    """The stores, and two replicas a and b, neither leading."""
    monkeypatch.setattr(run_base, "RECORD_POLL_SECONDS", 0.01)
    server = await Server.open(tmp_path / "data", lead=False)
    a, b = replica(server), replica(server)
    yield server, a, b
    for each in (a, b):
        await each.manager.shutdown()
        await each.fake.stop()
    await server.close()


async def create(server: Server, through: Replica, name: str, pods: list[tuple[str, str]],
                 **spec: Any) -> dict[str, Any]:
    """Create the Notification through replica `through` (as its handler does)."""
    full = {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE,
            "policy": "PreExistingPods", "parallelism": 1, "failurePolicy": "Abort",
            "requestedBy": {"username": "db-operator", "uid": "uid-1", "groups": ["ops"],
                            "extra": {}}, **spec}
    created = await server.notifications.create({
        "apiVersion": records.API_VERSION, "kind": "Notification",
        "metadata": {"namespace": NS, "name": name}, "spec": full,
        "status": {"phase": records.PENDING}})
    await through.manager.begin(created, pods)
    return created


async def finished(server: Server, name: str, *managers: FanoutManager,
                   timeout: float = WITHIN) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            obj = await server.get(name)
            if obj["status"].get("phase") in records.FINISHED_PHASES and not any(
                    m._runs for m in managers):
                return obj
            await asyncio.sleep(0.01)


def starts(*replicas: Replica) -> list[tuple[str, str]]:
    return sorted(start for r in replicas for start in r.fake.started)


async def test_a_follower_stores_the_scope_and_runs_nothing_until_it_leads(
        cluster: tuple[Server, Replica, Replica]) -> None:
    server, a, _ = cluster
    created = await create(server, a, "snap", server.fake.add("db-0", "db-1"))
    uid = created["metadata"]["uid"]
    await asyncio.sleep(3 * INTERVAL)
    assert [p.state for p in await server.scopes.pods(uid)] == [scope.PENDING] * 2
    assert a.fake.started == [] and not a.manager._runs
    assert await a.manager.reconcile() == 0  # a follower does not reconcile either
    assert (await server.get("snap"))["status"]["phase"] == records.PENDING
    await a.manager.lead()
    status = (await finished(server, "snap", a.manager))["status"]
    assert (status["phase"], status["counts"]) == ("Succeeded", counts(total=2, succeeded=2))
    assert starts(a) == [("db-0", QUIESCE), ("db-1", QUIESCE)]


async def test_the_leader_starts_a_notification_stored_through_another_replica(
        cluster: tuple[Server, Replica, Replica]) -> None:
    server, a, b = cluster
    await a.manager.lead()
    await create(server, b, "elsewhere", server.fake.add("db-0", "db-1"), parallelism=2)
    status = (await finished(server, "elsewhere", a.manager, timeout=2))["status"]
    assert status["counts"] == counts(total=2, succeeded=2)
    assert starts(a) == [("db-0", QUIESCE), ("db-1", QUIESCE)]
    assert b.fake.started == []


async def test_after_a_step_down_the_next_leader_finishes_with_no_pod_notified_twice(
        cluster: tuple[Server, Replica, Replica]) -> None:
    server, a, b = cluster
    names = [f"db-{i}" for i in range(6)]
    pods = server.fake.add(*names)
    gates = {name: asyncio.Event() for name in ("db-0", "db-1")}
    a.fake.gates.update(gates)
    await a.manager.lead()
    created = await create(server, a, "handover", pods, parallelism=2,
                           rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    async with asyncio.timeout(WITHIN):
        while len(a.fake.started) < 2:
            await asyncio.sleep(0.01)
    await a.manager.step_down()
    assert not a.manager._runs and not a.manager.leading
    assert (await server.get("handover"))["status"]["phase"] == records.RUNNING  # nothing final
    await b.manager.lead()
    await asyncio.sleep(0.1)
    assert b.fake.started == []  # db-0 and db-1 still run on a: b waits for their records
    for gate in gates.values():
        gate.set()  # a's runner finishes them
    status = (await finished(server, "handover", a.manager, b.manager))["status"]
    assert (status["phase"], status["counts"]) == ("Succeeded", counts(total=6, succeeded=6))
    assert starts(a, b) == sorted((name, QUIESCE) for name in names)  # each pod once
    assert sorted(a.fake.started) == [("db-0", QUIESCE), ("db-1", QUIESCE)]
    assert (await server.scopes.run(uid)).finished


async def test_a_deletion_through_a_follower_stops_the_leaders_run_and_rolls_back(
        cluster: tuple[Server, Replica, Replica]) -> None:
    server, a, b = cluster
    pods = server.fake.add("db-0", "db-1", "db-2")
    gate = a.fake.gates["db-1"] = asyncio.Event()
    await a.manager.lead()
    created = await create(server, a, "cancelled", pods, rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    async with asyncio.timeout(WITHIN):
        while len(a.fake.started) < 2:
            await asyncio.sleep(0.01)
    await server.notifications.delete(NS, "cancelled")  # through b's handler
    await b.manager.deleted(uid)
    assert (await server.scopes.run(uid)).stopped == reasons.DELETED
    gate.set()
    async with asyncio.timeout(WITHIN):
        while await server.scopes.run(uid) is not None or a.manager._runs:
            await asyncio.sleep(0.01)
    assert a.fake.started[:2] == [("db-0", QUIESCE), ("db-1", QUIESCE)]
    assert sorted(a.fake.started[2:]) == [("db-0", UNQUIESCE), ("db-1", UNQUIESCE)]
    assert b.fake.started == []
    assert await server.scopes.pods(uid) == []


async def test_a_deletion_seen_only_by_reconciling_stops_a_run_waiting_on_its_pods(
        cluster: tuple[Server, Replica, Replica], monkeypatch: pytest.MonkeyPatch) -> None:
    """All pods started, none finished: no start of a pod or status write notices the deletion;
    the leader's reconciler does."""
    monkeypatch.setattr(run_base, "STATUS_INTERVAL_SECONDS", 60)  # no progress write
    server, a, b = cluster
    pods = server.fake.add("db-0")
    gate = a.fake.gates["db-0"] = asyncio.Event()
    await a.manager.lead()
    created = await create(server, a, "waiting", pods, rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    async with asyncio.timeout(WITHIN):
        while not a.fake.started:
            await asyncio.sleep(0.01)
    await server.notifications.delete(NS, "waiting")
    await b.manager.deleted(uid)
    run = a.manager._runs[uid][0]
    async with asyncio.timeout(WITHIN):
        await run.deleted.wait()
    gate.set()
    async with asyncio.timeout(WITHIN):
        while await server.scopes.run(uid) is not None:
            await asyncio.sleep(0.01)
    assert a.fake.started == [("db-0", QUIESCE), ("db-0", UNQUIESCE)]


async def test_a_notification_without_a_scope_fails_only_after_the_grace(
        tmp_path: Path) -> None:
    server = await Server.open(tmp_path / "data", lead=False)
    leader = replica(server, scope_grace=2.5)  # creationTimestamp has whole seconds
    try:
        await leader.manager.lead()
        await server.notifications.create({
            "apiVersion": records.API_VERSION, "kind": "Notification",
            "metadata": {"namespace": NS, "name": "young"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE},
            "status": {"phase": records.PENDING}})  # its scope is still being written
        await asyncio.sleep(0.5)
        assert (await server.get("young"))["status"]["phase"] == records.PENDING
        async with asyncio.timeout(WITHIN):
            while (await server.get("young"))["status"]["phase"] == records.PENDING:
                await asyncio.sleep(0.05)
        status = (await server.get("young"))["status"]
        assert status["conditions"][0]["reason"] == reasons.SCOPE_NOT_RECORDED
        assert leader.manager.parts.metrics.finished == ["Failed"]  # once, not every pass
    finally:
        await leader.manager.shutdown()
        await server.close()


async def test_a_scope_whose_notification_is_missing_is_rolled_back_only_after_the_grace(
        tmp_path: Path) -> None:
    """A lagging cache of Notifications must not make a new one look deleted."""
    server = await Server.open(tmp_path / "data", lead=False)
    leader = replica(server, absent_grace=1.0)
    try:
        pods = server.fake.add("db-0")
        missing = {"metadata": {"namespace": NS, "name": "unseen", "uid": "uid-unseen"},
                   "spec": {"notifier": QUIESCE, "parallelism": 1, "failurePolicy": "Abort",
                            "requestedBy": {"username": "db-operator"}}}
        await server.scopes.create(missing, pods)
        await leader.manager.lead()
        await asyncio.sleep(0.3)
        assert await server.scopes.run("uid-unseen") is not None
        async with asyncio.timeout(WITHIN):
            while await server.scopes.run("uid-unseen") is not None:
                await asyncio.sleep(0.02)
        assert leader.fake.started == []  # a deleted one starts no pod
    finally:
        await leader.manager.shutdown()
        await server.close()


async def test_pod_sets_without_a_run_go_once_their_notification_is_missing_long(
        tmp_path: Path) -> None:
    """A create interrupted before its run leaves its pod sets: they stay while the
    Notification has been missing for less than the grace (the cache of Notifications may lag
    the pod sets' cache), and go after it."""
    clock = FakeClock()
    server = await Server.open(tmp_path / "data", lead=False, clock=clock)
    leader = replica(server, absent_grace=5.0)
    runs = SqliteObjectStore(server.database, NOTIFICATION_RUNS)
    pod_sets = SqliteObjectStore(server.database, NOTIFICATION_POD_SETS)

    async def killed(*args: Any, **kwargs: Any) -> None:
        raise OSError("the server was killed")

    runs.create = killed  # type: ignore[method-assign]
    missing = {"metadata": {"namespace": NS, "name": "unseen", "uid": "uid-unseen"},
               "spec": {"notifier": QUIESCE}}
    with pytest.raises(OSError):
        await ScopeStore(runs, pod_sets, clock=clock).create(missing, server.fake.add("db-0"))
    try:
        await leader.manager.lead()  # its first pass, awaited
        assert len((await pod_sets.list(NS)).items) == 1
        clock.advance(5.0)
        await leader.manager.reconcile()
        assert (await pod_sets.list(NS)).items == []
        assert leader.fake.started == []
    finally:
        await leader.manager.shutdown()
        await server.close()


async def test_a_stale_listing_never_starts_again_a_run_that_ended_meanwhile(
        cluster: tuple[Server, Replica, Replica], monkeypatch: pytest.MonkeyPatch) -> None:
    """A reconcile pass may read the Notifications and the scopes from before a run ended
    (a lagging cache): the run is not started a second time."""
    server, a, _ = cluster
    gate = a.fake.gates["db-0"] = asyncio.Event()
    await a.manager.lead()
    created = await create(server, a, "once", server.fake.add("db-0"))
    async with asyncio.timeout(WITHIN):
        while not a.fake.started:
            await asyncio.sleep(0.01)
    stale_objects = {created["metadata"]["uid"]: await server.get("once")}
    stale_runs = await server.scopes.runs()
    gate.set()
    await finished(server, "once", a.manager)

    async def listed() -> dict[str, dict[str, Any]]:
        return stale_objects

    async def runs() -> list[Any]:
        return stale_runs

    monkeypatch.setattr(a.manager, "_all_notifications", listed)
    monkeypatch.setattr(server.scopes, "runs", runs)
    assert await a.manager.reconcile() == 0
    assert a.fake.started == [("db-0", QUIESCE)]
    assert (await server.get("once"))["status"]["phase"] == "Succeeded"


async def test_a_release_through_a_follower_wakes_the_leaders_window_without_its_poll(
        cluster: tuple[Server, Replica, Replica], monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's window re-reads its run only hourly here: the release stored through b
    reaches a's run by the runs' watch, or the window stays open and this times out."""
    server, a, b = cluster
    monkeypatch.setattr(run_base, "RECORD_POLL_SECONDS", 3600)
    await a.manager.lead()
    created = await create(server, a, "snap", server.fake.add("db-0", "db-1"), parallelism=2,
                           release={"notifier": UNQUIESCE, "maxHoldSeconds": 3600})
    async with asyncio.timeout(WITHIN):
        while not ((await server.get("snap"))["status"].get("window") or {}).get(
                "quiescedTime"):
            await asyncio.sleep(0.01)
    assert await b.manager.request_release(created, records.now())
    status = (await finished(server, "snap", a.manager))["status"]
    assert status["window"]["releaseReason"] == "ReleaseRequested"
    assert status["counts"] == {**counts(total=2, succeeded=2), "released": 2}
    assert sorted(p for p, n in a.fake.started if n == UNQUIESCE) == ["db-0", "db-1"]
