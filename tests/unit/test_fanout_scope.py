"""The fan-out state of a Notification on every storage backend (the ``backend`` fixture): the
run is written after the whole pod set, pods enter once and in order, in pod sets of at most
``POD_SET_SIZE``; a pod's state only moves forward and starts only while the run is not
stopped, also when another replica stopped it; rollback has its own state; an interrupted
create leaves no run without its pods; and the tables of schema 2 are dropped."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from apiserver.clock import SystemClock
from apiserver.fanout import scope
from apiserver.fanout.scope import POD_SET_SIZE, ScopedPod, counts
from apiserver.fanout.scope_store import ScopeStore
from apiserver.registry.errors import AlreadyExists
from apiserver.registry.resources import NOTIFICATION_POD_SETS, NOTIFICATION_RUNS
from apiserver.registry.sqlite_database import FILE_NAME, SqliteDatabase
from apiserver.registry.store import ObjectStore
from tests.support.backends import Backend

N1, N2 = "notification-uid-1", "notification-uid-2"


def notification(uid: str, name: str = "n", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "ns", "name": name},
            "spec": {"notifier": "quiesce", **spec}}


def pods_named(count: int, start: int = 0) -> list[tuple[str, str]]:
    return [(f"db-{i}", f"u{i}") for i in range(start, start + count)]


class Replica:
    """The stores one server process opens on the backend, and its ScopeStore."""

    def __init__(self, backend: Backend) -> None:
        self.runs = backend.store(NOTIFICATION_RUNS)
        self.pod_sets = backend.store(NOTIFICATION_POD_SETS)
        self.scopes = ScopeStore(self.runs, self.pod_sets, clock=SystemClock(), pod_set_wait=2)


@pytest.fixture
def replica(backend: Backend) -> Replica:
    return Replica(backend)


@pytest.fixture
def store(replica: Replica) -> ScopeStore:
    return replica.scopes


@pytest.fixture
async def scopes(store: ScopeStore) -> ScopeStore:
    await store.create(notification(N1), [])
    await store.create(notification(N2), [])
    return store


async def pod_set_sizes(pod_sets: ObjectStore, uid: str) -> list[int]:
    listed = await pod_sets.list("ns", field_selector=f"spec.notificationUID={uid}")
    by_index = sorted((item["spec"]["index"], len(item["pods"])) for item in listed.items)
    assert [index for index, _ in by_index] == list(range(len(by_index)))
    return [size for _, size in by_index]


async def eventually(check: Any, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.01)


async def test_create_writes_the_run_and_its_pods(store: ScopeStore) -> None:
    await store.create(notification("u", "snap", rollback={"notifier": "unquiesce"}),
                       [("db-2", "u2"), ("db-0", "u0")])

    run = await store.run("u")
    assert run is not None
    assert (run.namespace, run.name, run.spec["rollback"], run.stopped, run.outcome,
            run.finished) == ("ns", "snap", {"notifier": "unquiesce"}, "", "", False)
    assert [(p.pod, p.state) for p in await store.pods("u")] == [
        ("db-2", scope.PENDING), ("db-0", scope.PENDING)]
    assert await store.run("other") is None
    assert await store.pods("other") == []


async def test_a_second_create_changes_nothing(store: ScopeStore) -> None:
    await store.create(notification("u"), [("a", "ua")])
    await store.finish_pod("u", "ua", scope.SUCCEEDED, "Completed", record="rec-a")
    with pytest.raises(AlreadyExists):
        await store.create(notification("u"), [("b", "ub")])
    assert await store.pods("u") == [ScopedPod("a", "ua", scope.SUCCEEDED, "rec-a", "Completed")]


async def test_add_returns_the_new_pods_and_keeps_order(scopes: ScopeStore) -> None:
    added = await scopes.add(N1, [("db-2", "u2"), ("db-0", "u0"), ("db-1", "u1")])
    assert [p.pod for p in added] == ["db-2", "db-0", "db-1"]
    assert await scopes.add(N1, [("db-1", "u1"), ("db-3", "u3"), ("db-3", "u3")]) == [
        ScopedPod("db-3", "u3", scope.PENDING)]
    assert [p.pod for p in await scopes.pods(N1)] == ["db-2", "db-0", "db-1", "db-3"]
    assert await scopes.add("unknown", [("db-0", "u0")]) == []


async def test_a_replaced_pod_with_a_new_uid_enters_again(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "old")])
    assert len(await scopes.add(N1, [("db-0", "new")])) == 1
    assert [p.pod_uid for p in await scopes.pods(N1)] == ["old", "new"]


async def test_scopes_are_separate_per_notification(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    await scopes.add(N2, [("db-0", "u0")])
    await scopes.finish_pod(N2, "u0", scope.FAILED, "PodDeleted")
    assert (await scopes.pods(N1))[0].state == scope.PENDING
    assert (await scopes.pods(N2))[0].state == scope.FAILED


async def test_a_pod_state_only_moves_forward(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    assert await scopes.finish_pod(N1, "u0", scope.SUCCEEDED, "Completed", record="rec-0")
    assert not await scopes.finish_pod(N1, "u0", scope.FAILED, "Interrupted", record="again")

    assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.SUCCEEDED, "rec-0",
                                               "Completed")]
    with pytest.raises(ValueError):
        await scopes.finish_pod(N1, "u0", scope.STARTED, "")


async def test_finish_pod_may_name_the_record(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    assert await scopes.finish_pod(N1, "u0", scope.SKIPPED, "NotDeclared", record="r")
    assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.SKIPPED, "r", "NotDeclared")]


async def test_a_failure_can_stop_the_run_and_the_first_stop_stands(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("a", "ua"), ("b", "ub"), ("c", "uc")])
    assert await scopes.finish_pod(N1, "ua", scope.FAILED, "NonZeroExitCode", stop="FailFast")

    assert await scopes.stop(N1, "Deleted") == "FailFast"  # the first reason stands
    run = await scopes.run(N1)
    assert run is not None and run.stopped == "FailFast"
    assert [p.state for p in await scopes.pods(N1)] == [scope.FAILED, scope.PENDING,
                                                        scope.PENDING]
    assert await scopes.finish_pod(N2, "ub", scope.FAILED, "x") is False  # not in that scope
    assert await scopes.stop("unknown", "Deleted") == "Deleted"


async def test_the_first_outcome_stands_and_makes_succeeded_pods_due_a_rollback(
        replica: Replica) -> None:
    store = replica.scopes
    await store.create(notification("u", rollback={"notifier": "unquiesce"}),
                       [("a", "ua"), ("b", "ub"), ("c", "uc")])
    for uid, state in (("ua", scope.SUCCEEDED), ("ub", scope.FAILED)):
        await store.finish_pod("u", uid, state, "", record=f"rec-{uid}")
    real, writes = replica.pod_sets.guaranteed_update, []

    async def counted(*args: Any) -> Any:
        writes.append(args[1])
        return await real(*args)

    replica.pod_sets.guaranteed_update = counted  # type: ignore[method-assign]
    decided = await store.decide("u", scope.OUTCOME_FAILED, "PodsFailed")
    assert decided is not None and (decided.outcome, decided.stopped) == ("Failed", "PodsFailed")
    again = await store.decide("u", scope.OUTCOME_SUCCEEDED, "PodsSucceeded")
    assert again is not None and again.outcome == "Failed"  # the first decision stands
    assert writes == []  # no pod set is written to make the rollbacks due

    pods = {p.pod: p for p in await store.pods("u")}
    assert [pods[n].rollback_due for n in "abc"] == [True, False, False]
    assert await store.decide("unknown", scope.OUTCOME_FAILED, "Deleted") is None


def test_rollback_and_release_are_due_for_succeeded_pods_until_they_have_an_outcome() -> None:
    quiesced = ScopedPod("a", "ua", scope.SUCCEEDED, "rec", "Completed")
    assert quiesced.rollback_due and quiesced.release_due
    for old in ("pending", "started"):  # as an older release stored them
        assert replace(quiesced, rollback=old).rollback_due
        assert replace(quiesced, release=old).release_due
    assert not replace(quiesced, rollback=scope.ROLLBACK_DONE).rollback_due
    assert not replace(quiesced, rollback=scope.ROLLBACK_FAILED).rollback_due
    assert not replace(quiesced, release=scope.RELEASE_DONE).release_due
    assert not replace(quiesced, release=scope.RELEASE_FAILED).release_due
    for state in (scope.PENDING, scope.FAILED, scope.SKIPPED):
        other = replace(quiesced, state=state)
        assert not other.rollback_due and not other.release_due


async def test_rollback_state_never_touches_the_pod_state(store: ScopeStore) -> None:
    await store.create(notification("u", rollback={"notifier": "unquiesce"}), [("a", "ua")])
    await store.finish_pod("u", "ua", scope.SUCCEEDED, "Completed", record="rec")
    await store.decide("u", scope.OUTCOME_FAILED, "Deleted")

    await store.finish_rollback("u", "ua", scope.ROLLBACK_DONE, record="undo-2", attempts=2)
    await store.finish_rollback("u", "ua", scope.ROLLBACK_FAILED, record="undo-3", attempts=3)
    with pytest.raises(ValueError):
        await store.finish_rollback("u", "ua", "started", record="x", attempts=1)

    (pod,) = await store.pods("u")
    assert pod == ScopedPod("a", "ua", scope.SUCCEEDED, "rec", "Completed",
                            scope.ROLLBACK_DONE, "undo-2", 2)
    assert counts([pod])["rolledBack"] == 1


async def test_mark_finished(scopes: ScopeStore) -> None:
    await scopes.mark_finished(N1)
    run = await scopes.run(N1)
    assert run is not None and run.finished
    await scopes.mark_finished("unknown")  # nothing to mark


async def test_forget_only_that_notification(replica: Replica, scopes: ScopeStore) -> None:
    await scopes.add(N1, pods_named(POD_SET_SIZE + 1))
    await scopes.add(N2, [("db-0", "u0")])
    await scopes.forget(N1)
    assert await scopes.pods(N1) == []
    assert await scopes.run(N1) is None
    assert await pod_set_sizes(replica.pod_sets, N1) == []
    assert len(await scopes.pods(N2)) == 1
    assert [run.notification_uid for run in await scopes.runs()] == [N2]
    await scopes.forget(N1)  # again: nothing left


# Pod sets


async def test_pods_are_kept_in_pod_sets_of_at_most_100(replica: Replica) -> None:
    pods = pods_named(250)
    await replica.scopes.create(notification("u"), pods)

    assert await pod_set_sizes(replica.pod_sets, "u") == [100, 100, 50]
    assert [(p.pod, p.pod_uid) for p in await replica.scopes.pods("u")] == pods

    added = await replica.scopes.add("u", pods_named(60, start=250))
    assert len(added) == 60
    assert await pod_set_sizes(replica.pod_sets, "u") == [100, 100, 100, 10]
    assert [(p.pod, p.pod_uid) for p in await replica.scopes.pods("u")] == pods_named(310)

    assert await replica.scopes.finish_pod("u", "u305", scope.SUCCEEDED, "Completed",
                                           record="rec-305")  # in the newest pod set
    assert (await replica.scopes.pods("u"))[305].state == scope.SUCCEEDED
    run = await replica.runs.get("ns", "u")
    assert run["status"]["podSets"] == 4


async def test_a_pod_set_is_full_before_the_next(replica: Replica) -> None:
    await replica.scopes.create(notification("u"), pods_named(POD_SET_SIZE))
    await replica.scopes.add("u", pods_named(1, start=POD_SET_SIZE))
    assert await pod_set_sizes(replica.pod_sets, "u") == [POD_SET_SIZE, 1]
    await replica.scopes.create(notification("empty"), [])
    await replica.scopes.add("empty", [("db-0", "u0")])
    assert await pod_set_sizes(replica.pod_sets, "empty") == [1]


async def test_changes_of_one_pod_set_made_meanwhile_are_written_together(
        replica: Replica) -> None:
    await replica.scopes.create(notification("u"), pods_named(10))
    real, updates = replica.pod_sets.guaranteed_update, []

    async def counted(*args: Any) -> Any:
        updates.append(args[1])
        return await real(*args)

    replica.pod_sets.guaranteed_update = counted  # type: ignore[method-assign]
    finished = await asyncio.gather(
        *(replica.scopes.finish_pod("u", uid, scope.SUCCEEDED, "Completed", record=f"rec-{uid}")
          for _, uid in pods_named(10)),
        replica.scopes.finish_pod("u", "u3", scope.FAILED, "Interrupted", record="rec-again"))

    assert finished == [True] * 10 + [False]  # the pod's first result stands
    assert 1 <= len(updates) <= 2, updates  # one write, maybe after a first alone
    assert [(p.state, p.record) for p in await replica.scopes.pods("u")] == [
        (scope.SUCCEEDED, f"rec-{uid}") for _, uid in pods_named(10)]


def die_after(pod_sets: ObjectStore, writes: int) -> None:
    """`pod_sets` takes `writes` creates, then the process "dies" (the create raises)."""
    real = pod_sets.create
    left = writes

    async def create(*args: Any, **kwargs: Any) -> Any:
        nonlocal left
        if not left:
            raise OSError("the server was killed")
        left -= 1
        return await real(*args, **kwargs)

    pod_sets.create = create  # type: ignore[method-assign]


async def test_a_create_interrupted_between_pod_sets_leaves_no_run(backend: Backend) -> None:
    first = Replica(backend)
    die_after(first.pod_sets, 1)
    with pytest.raises(OSError):
        await first.scopes.create(notification("u"), pods_named(250))

    restarted = Replica(backend)
    assert await restarted.scopes.run("u") is None
    assert await restarted.scopes.runs() == []
    assert await restarted.scopes.pods("u") == []
    assert not await restarted.scopes.finish_pod("u", "u0", scope.SUCCEEDED, "Completed")
    assert await restarted.scopes.orphan_uids(await restarted.scopes.runs()) == ["u"]

    await restarted.scopes.forget("u")
    assert await restarted.scopes.orphan_uids(await restarted.scopes.runs()) == []
    assert await pod_set_sizes(restarted.pod_sets, "u") == []


async def test_a_forget_interrupted_after_the_pod_sets_leaves_the_run_to_forget_again(
        backend: Backend) -> None:
    """The pod sets go first: a crash then leaves the run (which the leader's next pass
    forgets again), never pod sets that no run counts and no pass would find."""
    first = Replica(backend)
    await first.scopes.create(notification("u"), pods_named(250))

    async def killed(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the server was killed")

    first.runs.delete = killed  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await first.scopes.forget("u")

    restarted = Replica(backend)
    assert await pod_set_sizes(restarted.pod_sets, "u") == []
    runs = await restarted.scopes.runs()
    assert [run.notification_uid for run in runs] == ["u"]
    assert await restarted.scopes.orphan_uids(runs) == []
    await restarted.scopes.forget("u")
    assert await restarted.scopes.runs() == []


async def test_an_interrupted_create_can_be_made_again(backend: Backend) -> None:
    first = Replica(backend)
    die_after(first.pod_sets, 2)
    with pytest.raises(OSError):
        await first.scopes.create(notification("u"), pods_named(250))

    restarted = Replica(backend)
    await restarted.scopes.create(notification("u"), pods_named(120))
    assert [(p.pod, p.pod_uid) for p in await restarted.scopes.pods("u")] == pods_named(120)
    assert await pod_set_sizes(restarted.pod_sets, "u") == [100, 20]
    assert await restarted.scopes.orphan_uids(await restarted.scopes.runs()) == []


async def test_a_create_interrupted_after_its_pod_sets_leaves_no_run(
        backend: Backend) -> None:
    """Every pod set is written and the run is not: the scope was not recorded (the leader
    fails the Notification), and its pod sets are found to be deleted."""
    first = Replica(backend)

    async def killed(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the server was killed")

    first.runs.create = killed  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await first.scopes.create(notification("u", "late"), pods_named(150))

    restarted = Replica(backend)
    assert await restarted.scopes.run("u") is None
    assert await restarted.scopes.pods("u") == []
    assert await restarted.scopes.orphan_uids(await restarted.scopes.runs()) == ["u"]
    await restarted.scopes.forget("u")
    assert await pod_set_sizes(restarted.pod_sets, "u") == []


# Another replica


async def test_a_stop_by_another_replica_is_read_by_the_leader(backend: Backend) -> None:
    leader, other = Replica(backend), Replica(backend)
    await leader.scopes.create(notification("u"), [("a", "ua"), ("b", "ub")])

    assert await other.scopes.stop("u", "Deleted") == "Deleted"

    async def leader_sees_it() -> bool:
        run = await leader.scopes.run("u")
        return run is not None and run.stopped == "Deleted"

    await eventually(leader_sees_it)
    assert await leader.scopes.stop("u", "FailFast") == "Deleted"


async def test_a_scope_is_read_whole_by_a_new_process(backend: Backend) -> None:
    first = Replica(backend)
    await first.scopes.create(notification(N1), pods_named(120))
    await first.scopes.finish_pod(N1, "u110", scope.FAILED, "Interrupted", record="rec-110")

    second = Replica(backend)

    async def whole() -> bool:
        pods = await second.scopes.pods(N1)
        return len(pods) == 120 and pods[110].state == scope.FAILED

    await eventually(whole)
    assert (await second.scopes.pods(N1))[110] == ScopedPod("db-110", "u110", scope.FAILED,
                                                             "rec-110", "Interrupted")
    assert await second.scopes.finish_pod(N1, "u111", scope.SUCCEEDED, "Completed")
    assert [run.notification_uid for run in await second.scopes.runs()] == [N1]


# The tables of schema 2


async def test_the_scope_tables_of_schema_2_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    connection = sqlite3.connect(tmp_path / "data" / FILE_NAME)
    connection.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
        INSERT INTO meta VALUES ('schema', 2), ('rv', 0), ('compacted', 0);
        CREATE TABLE notification_runs (notification_uid TEXT PRIMARY KEY);
        CREATE TABLE notification_pods (notification_uid TEXT, seq INTEGER);
        CREATE INDEX notification_pods_by_seq ON notification_pods (notification_uid, seq);
        INSERT INTO notification_runs VALUES ('n');
    """)
    connection.close()

    database = await SqliteDatabase.open(tmp_path / "data")
    try:
        tables = await database.run(lambda c: [row[0] for row in c.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'notification%'")])
        schema = await database.run(
            lambda c: c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])
    finally:
        await database.close()
    assert (tables, schema) == ([], 3)
