"""The fan-out state of a Notification in SQLite: the run row is written with the pod set, pods
enter once and in order, a pod's state only moves forward and starts only while the run is not
stopped, rollback has its own state, and a table made by the previous schema is migrated."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from apiserver.fanout import scope
from apiserver.fanout.scope import ScopedPod, ScopeStore, counts
from apiserver.registry.sqlite_database import FILE_NAME, SqliteDatabase

N1, N2 = "notification-uid-1", "notification-uid-2"


def notification(uid: str, name: str = "n", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "ns", "name": name},
            "spec": {"notifier": "quiesce", **spec}}


@pytest.fixture
async def scopes(database: SqliteDatabase) -> ScopeStore:
    store = ScopeStore(database)
    await store.create(notification(N1), [])
    await store.create(notification(N2), [])
    return store


async def test_create_writes_the_run_and_its_pods(database: SqliteDatabase) -> None:
    store = ScopeStore(database)
    await store.create(notification("u", "snap", rollback={"notifier": "unquiesce"}),
                       [("db-2", "u2"), ("db-0", "u0")])

    run = await store.run("u")
    assert run is not None
    assert (run.namespace, run.name, run.spec["rollback"], run.stopped, run.outcome,
            run.finished) == ("ns", "snap", {"notifier": "unquiesce"}, "", "", False)
    assert [(p.pod, p.state) for p in await store.pods("u")] == [
        ("db-2", scope.PENDING), ("db-0", scope.PENDING)]
    assert await store.run("other") is None


async def test_create_is_one_transaction(database: SqliteDatabase) -> None:
    store = ScopeStore(database)
    await store.create(notification("u"), [("a", "ua")])
    with pytest.raises(sqlite3.IntegrityError):
        await store.create(notification("u"), [("b", "ub")])  # the run row exists already
    assert [p.pod for p in await store.pods("u")] == ["a"]


async def test_add_returns_the_new_pods_and_keeps_order(scopes: ScopeStore) -> None:
    added = await scopes.add(N1, [("db-2", "u2"), ("db-0", "u0"), ("db-1", "u1")])
    assert [p.pod for p in added] == ["db-2", "db-0", "db-1"]
    assert await scopes.add(N1, [("db-1", "u1"), ("db-3", "u3")]) == [
        ScopedPod("db-3", "u3", scope.PENDING)]
    assert [p.pod for p in await scopes.pods(N1)] == ["db-2", "db-0", "db-1", "db-3"]


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
    assert await scopes.start_pod(N1, "u0", "rec-0")
    assert not await scopes.start_pod(N1, "u0", "rec-again")
    assert await scopes.finish_pod(N1, "u0", scope.SUCCEEDED, "Completed")
    assert not await scopes.finish_pod(N1, "u0", scope.FAILED, "Interrupted")

    assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.SUCCEEDED, "rec-0",
                                               "Completed")]
    with pytest.raises(ValueError):
        await scopes.finish_pod(N1, "u0", scope.STARTED, "")


async def test_no_pod_starts_once_the_run_is_stopped(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("a", "ua"), ("b", "ub"), ("c", "uc")])
    assert await scopes.start_pod(N1, "ua", "rec-a")
    assert await scopes.finish_pod(N1, "ua", scope.FAILED, "NonZeroExitCode", stop="FailFast")

    assert not await scopes.start_pod(N1, "ub", "rec-b")
    assert await scopes.stop(N1, "Deleted") == "FailFast"  # the first reason stands
    run = await scopes.run(N1)
    assert run is not None and run.stopped == "FailFast"
    assert [p.state for p in await scopes.pods(N1)] == [scope.FAILED, scope.PENDING,
                                                        scope.PENDING]
    assert await scopes.start_pod(N2, "ub", "x") is False  # not in that scope


async def test_a_failed_outcome_makes_rollback_due_for_succeeded_pods(
        database: SqliteDatabase) -> None:
    store = ScopeStore(database)
    await store.create(notification("u", rollback={"notifier": "unquiesce"}),
                       [("a", "ua"), ("b", "ub"), ("c", "uc")])
    for uid, state in (("ua", scope.SUCCEEDED), ("ub", scope.FAILED)):
        await store.start_pod("u", uid, f"rec-{uid}")
        await store.finish_pod("u", uid, state, "")

    decided = await store.decide("u", scope.OUTCOME_FAILED, "PodsFailed")
    assert decided is not None and (decided.outcome, decided.stopped) == ("Failed", "PodsFailed")
    again = await store.decide("u", scope.OUTCOME_SUCCEEDED, "PodsSucceeded")
    assert again is not None and again.outcome == "Failed"  # the first decision stands

    pods = {p.pod: p for p in await store.pods("u")}
    assert (pods["a"].state, pods["a"].rollback) == (scope.SUCCEEDED, scope.ROLLBACK_PENDING)
    assert pods["b"].rollback == pods["c"].rollback == ""


async def test_no_rollback_due_without_a_rollback_notifier(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("a", "ua")])
    await scopes.start_pod(N1, "ua", "rec")
    await scopes.finish_pod(N1, "ua", scope.SUCCEEDED, "Completed")
    await scopes.decide(N1, scope.OUTCOME_FAILED, "Deleted")
    assert (await scopes.pods(N1))[0].rollback == ""


async def test_rollback_state_never_touches_the_pod_state(database: SqliteDatabase) -> None:
    store = ScopeStore(database)
    await store.create(notification("u", rollback={"notifier": "unquiesce"}), [("a", "ua")])
    await store.start_pod("u", "ua", "rec")
    await store.finish_pod("u", "ua", scope.SUCCEEDED, "Completed")
    await store.decide("u", scope.OUTCOME_FAILED, "Deleted")

    assert await store.start_rollback("u", "ua", "undo-1")
    assert await store.start_rollback("u", "ua", "undo-2")  # again, after an interruption
    await store.finish_rollback("u", "ua", scope.ROLLBACK_DONE)
    assert not await store.start_rollback("u", "ua", "undo-3")

    (pod,) = await store.pods("u")
    assert pod == ScopedPod("a", "ua", scope.SUCCEEDED, "rec", "Completed",
                            scope.ROLLBACK_DONE, "undo-2", 2)
    assert counts([pod])["rolledBack"] == 1


async def test_forget_only_that_notification(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0"), ("db-1", "u1")])
    await scopes.add(N2, [("db-0", "u0")])
    await scopes.forget(N1)
    assert await scopes.pods(N1) == []
    assert await scopes.run(N1) is None
    assert len(await scopes.pods(N2)) == 1
    assert [run.notification_uid for run in await scopes.runs()] == [N2]


async def test_orphan_pods_and_adopt(database: SqliteDatabase) -> None:
    store = ScopeStore(database)
    await database.transaction(lambda c: c.execute(
        "INSERT INTO notification_pods (notification_uid, seq, pod, pod_uid, state) "
        "VALUES ('old', 1, 'a', 'ua', 'pending')"))
    assert await store.orphan_uids() == ["old"]
    await store.adopt(notification("old"))
    assert await store.orphan_uids() == []
    assert await store.start_pod("old", "ua", "rec")


async def test_scope_survives_reopening(tmp_path: Path) -> None:
    first = await SqliteDatabase.open(tmp_path / "data")
    await ScopeStore(first).create(notification(N1), [("db-0", "u0"), ("db-1", "u1")])
    await ScopeStore(first).start_pod(N1, "u1", "rec-1")
    await first.close()

    second = await SqliteDatabase.open(tmp_path / "data")
    try:
        scopes = ScopeStore(second)
        assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.PENDING),
                                         ScopedPod("db-1", "u1", scope.STARTED, "rec-1")]
    finally:
        await second.close()


OLD_TABLE = """
CREATE TABLE notification_pods (
    notification_uid TEXT NOT NULL, seq INTEGER NOT NULL, pod TEXT NOT NULL,
    pod_uid TEXT NOT NULL, state TEXT NOT NULL, record TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '', rollback TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (notification_uid, pod_uid));
INSERT INTO notification_pods VALUES ('n', 1, 'a', 'ua', 'succeeded', 'rec-a', '', 'rolledBack');
INSERT INTO notification_pods VALUES ('n', 2, 'b', 'ub', 'succeeded', 'rec-b', '',
                                      'rollbackFailed');
"""


async def test_a_table_of_the_previous_schema_is_migrated(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    connection = sqlite3.connect(tmp_path / "data" / FILE_NAME)
    connection.executescript(OLD_TABLE)
    connection.close()

    database = await SqliteDatabase.open(tmp_path / "data")
    try:
        pods = await ScopeStore(database).pods("n")
    finally:
        await database.close()
    assert [(p.pod, p.rollback, p.rollback_record, p.rollback_attempts) for p in pods] == [
        ("a", scope.ROLLBACK_DONE, "", 0), ("b", scope.ROLLBACK_FAILED, "", 0)]
