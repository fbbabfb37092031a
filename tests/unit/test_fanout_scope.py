"""The scope of a Notification in SQLite: pods enter once, in order; states, rollback, forget."""

from __future__ import annotations

from pathlib import Path

import pytest

from apiserver.fanout import scope
from apiserver.fanout.scope import ScopedPod, ScopeStore, counts
from apiserver.registry.sqlite_database import SqliteDatabase

N1, N2 = "notification-uid-1", "notification-uid-2"


@pytest.fixture
def scopes(database: SqliteDatabase) -> ScopeStore:
    return ScopeStore(database)


async def test_add_returns_new_pods_and_keeps_order(scopes: ScopeStore) -> None:
    assert await scopes.add(N1, [("db-2", "u2"), ("db-0", "u0"), ("db-1", "u1")]) == 3

    assert await scopes.pods(N1) == [
        ScopedPod("db-2", "u2", scope.PENDING), ScopedPod("db-0", "u0", scope.PENDING),
        ScopedPod("db-1", "u1", scope.PENDING)]


async def test_add_is_idempotent_per_pod_uid(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0"), ("db-1", "u1")])
    await scopes.set_state(N1, "u0", scope.STARTED, "rec-0")

    assert await scopes.add(N1, [("db-1", "u1"), ("db-3", "u3"), ("db-0", "u0")]) == 1
    assert await scopes.add(N1, [("db-3", "u3")]) == 0

    pods = await scopes.pods(N1)
    assert [(p.pod, p.pod_uid) for p in pods] == [("db-0", "u0"), ("db-1", "u1"), ("db-3", "u3")]
    assert pods[0].state == scope.STARTED
    assert pods[0].record == "rec-0"


async def test_a_replaced_pod_with_a_new_uid_enters_again(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "old")])
    assert await scopes.add(N1, [("db-0", "new")]) == 1
    assert [p.pod_uid for p in await scopes.pods(N1)] == ["old", "new"]


async def test_add_nothing(scopes: ScopeStore) -> None:
    assert await scopes.add(N1, []) == 0
    assert await scopes.pods(N1) == []


async def test_scopes_are_separate_per_notification(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    assert await scopes.add(N2, [("db-0", "u0")]) == 1
    await scopes.set_state(N2, "u0", scope.FAILED, "rec", "PodDeleted")

    assert (await scopes.pods(N1))[0].state == scope.PENDING
    assert (await scopes.pods(N2))[0].state == scope.FAILED


async def test_set_state_keeps_the_record_when_not_given(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    await scopes.set_state(N1, "u0", scope.STARTED, "db-0-quiesce-abcde")
    await scopes.set_state(N1, "u0", scope.SUCCEEDED, reason="Completed")

    assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.SUCCEEDED,
                                               "db-0-quiesce-abcde", "Completed")]


async def test_set_state_replaces_record_and_reason(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    await scopes.set_state(N1, "u0", scope.FAILED, "first", "Timeout")
    await scopes.set_state(N1, "u0", scope.SKIPPED, "second")

    pod = (await scopes.pods(N1))[0]
    assert (pod.state, pod.record, pod.reason) == (scope.SKIPPED, "second", "")


async def test_set_state_of_an_unknown_pod_changes_nothing(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0")])
    await scopes.set_state(N1, "nope", scope.FAILED, "rec")
    assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.PENDING)]


async def test_set_rollback(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0"), ("db-1", "u1")])
    await scopes.set_state(N1, "u0", scope.SUCCEEDED, "rec-0")
    await scopes.set_rollback(N1, "u0", scope.ROLLED_BACK)

    first, second = await scopes.pods(N1)
    assert (first.state, first.record, first.rollback) == (scope.SUCCEEDED, "rec-0",
                                                           scope.ROLLED_BACK)
    assert second.rollback == ""


async def test_forget_only_that_notification(scopes: ScopeStore) -> None:
    await scopes.add(N1, [("db-0", "u0"), ("db-1", "u1")])
    await scopes.add(N2, [("db-0", "u0")])

    await scopes.forget(N1)

    assert await scopes.pods(N1) == []
    assert len(await scopes.pods(N2)) == 1
    assert await scopes.add(N1, [("db-0", "u0")]) == 1


async def test_scope_survives_reopening(tmp_path: Path) -> None:
    first = await SqliteDatabase.open(tmp_path / "data")
    await ScopeStore(first).add(N1, [("db-0", "u0"), ("db-1", "u1")])
    await ScopeStore(first).set_state(N1, "u1", scope.STARTED, "rec-1")
    await first.close()

    second = await SqliteDatabase.open(tmp_path / "data")
    try:
        scopes = ScopeStore(second)
        assert await scopes.pods(N1) == [ScopedPod("db-0", "u0", scope.PENDING),
                                         ScopedPod("db-1", "u1", scope.STARTED, "rec-1")]
        assert await scopes.add(N1, [("db-2", "u2")]) == 1
        assert [p.pod for p in await scopes.pods(N1)] == ["db-0", "db-1", "db-2"]
    finally:
        await second.close()


def test_counts() -> None:
    pods = [
        ScopedPod("a", "1", scope.PENDING),
        ScopedPod("b", "2", scope.PENDING),
        ScopedPod("c", "3", scope.STARTED),
        ScopedPod("d", "4", scope.SUCCEEDED, rollback=scope.ROLLED_BACK),
        ScopedPod("e", "5", scope.SUCCEEDED, rollback=scope.ROLLBACK_FAILED),
        ScopedPod("f", "6", scope.SUCCEEDED),
        ScopedPod("g", "7", scope.FAILED),
        ScopedPod("h", "8", scope.SKIPPED),
    ]
    assert counts(pods) == {"total": 8, "pending": 2, "running": 1, "succeeded": 3,
                            "failed": 1, "skipped": 1, "rolledBack": 1}


def test_counts_of_nothing() -> None:
    assert counts([]) == {"total": 0, "pending": 0, "running": 0, "succeeded": 0, "failed": 0,
                          "skipped": 0, "rolledBack": 0}
