"""Quiesce windows (spec.release) and one quiesce at a time (spec.concurrencyPolicy), with the
fakes of test_fanout_run over the real SQLite stores: the window opens once every pod is
quiesced and ends on request, afterSeconds, maxHoldSeconds, the deadline, deletion or a failure;
every quiesced pod is released exactly once, also across a crash mid-window and mid-release."""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from apiserver.authn.user import UserInfo
from apiserver.fanout import run_base, scope
from apiserver.fanout.run_base import status_time
from apiserver.fanout.run_records import ROLLBACK_ATTEMPT_LABEL, record_name
from apiserver.notifier import records
from apiserver.timestamps import parse_timestamp
from tests.support.clock import START, FakeClock
from tests.unit.test_fanout_run import NS, QUIESCE, UNQUIESCE, Server, counts, restart

RELEASE = {"notifier": UNQUIESCE, "maxHoldSeconds": 3600}
NAMES = ["db-0", "db-1", "db-2"]


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    opened = await Server.open(tmp_path / "data")
    yield opened
    await opened.close()


@pytest.fixture
async def clocked(tmp_path: Path) -> Any:
    """A server whose fan-out runs on a FakeClock (`clocked.clock`) that the test advances."""
    opened = await Server.open(tmp_path / "data", clock=FakeClock())
    yield opened
    await opened.close()


def fake_clock(server: Server) -> FakeClock:
    assert isinstance(server.clock, FakeClock)
    return server.clock


async def window_waits(server: Server, name: str) -> FakeClock:
    """Once the window of `name` is open and its run sleeps until it looks again."""
    await window_open(server, name)
    clock = fake_clock(server)
    await clock.until_sleeping(task=f"notification {name}")
    return clock


async def window_open(server: Server, name: str, timeout: float = 5) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = (await server.get(name))["status"]
        if (status.get("window") or {}).get("quiescedTime"):
            return status
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name}'s window did not open: {(await server.get(name))['status']}")


async def finished_one(server: Server, name: str, timeout: float = 5) -> dict[str, Any]:
    """The Notification once finished, while others may still run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = await server.get(name)
        if obj["status"].get("phase") in records.FINISHED_PHASES:
            return obj
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} did not finish: {(await server.get(name))['status']}")


async def release(server: Server, name: str) -> None:
    assert await server.manager.request_release(await server.get(name),
                                                status_time(server.clock))


def quiesced(status: dict[str, Any]) -> dict[str, Any]:
    (condition,) = [c for c in status["conditions"] if c["type"] == "Quiesced"]
    return condition


def started(server: Server, notifier: str) -> list[str]:
    return sorted(pod for pod, n in server.fake.started if n == notifier)


async def test_the_window_holds_until_the_release_is_requested(clocked: Server) -> None:
    server = clocked
    await server.create("snap", server.fake.add(*NAMES), parallelism=2, release=RELEASE)
    status = await window_open(server, "snap")
    assert status["phase"] == "Running"
    condition = quiesced(status)
    assert (condition["status"], condition["reason"]) == ("True", "AllPodsQuiesced")
    assert "all 3 pods quiesced" in condition["message"]
    clock = await window_waits(server, "snap")
    clock.advance(RELEASE["maxHoldSeconds"] - 1)
    await clock.until_sleeping(task="notification snap")
    assert started(server, UNQUIESCE) == []  # nobody released: every pod stays quiesced
    assert (await server.get("snap"))["status"]["phase"] == "Running"
    await release(server, "snap")
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Succeeded", "PodsSucceeded")
    assert status["counts"] == {**counts(total=3, succeeded=3), "released": 3}
    window = status["window"]
    assert window["releaseReason"] == "ReleaseRequested"
    assert (window["quiescedTime"] <= window["releaseRequestedTime"] <= window["releaseTime"]
            <= window["unquiescedTime"])
    assert (quiesced(status)["status"], quiesced(status)["reason"]) == ("False", "Released")
    assert started(server, UNQUIESCE) == NAMES
    assert server.fake.started[:3] == [(pod, QUIESCE) for pod in NAMES]  # quiesce all first
    assert {labels.get(ROLLBACK_ATTEMPT_LABEL) for labels in server.fake.labels[3:]} == {"1"}
    assert "released 3 of 3" in status["conditions"][0]["message"]
    window_events = [o for o in server.events.occurrences
                     if o.reason in ("Quiesced", "Unquiesced")]
    assert [(o.reason, o.type, o.regarding.name) for o in window_events] == [
        ("Quiesced", "Normal", "snap"), ("Unquiesced", "Normal", "snap")]
    opened, closed = window_events
    assert f"all 3 pods quiesced with notifier {QUIESCE} at {window['quiescedTime']}" in (
        opened.note)
    assert closed.note.startswith("released (ReleaseRequested): the window was open "), closed
    assert (f"(from {window['quiescedTime']} to {window['unquiescedTime']}); 3 pods released, "
            "0 failed") in closed.note
    reasons = server.events.reasons()
    assert reasons.index("Started") < reasons.index("Quiesced") < reasons.index(
        "Unquiesced") < reasons.index("Completed"), reasons


async def test_the_held_window_counts_its_reads_and_stops_reading_once_released(
        clocked: Server) -> None:
    """``window_read`` is the point a cluster test waits on: it moves while the window holds,
    and not after the leader has seen the release (the loop that reads has returned)."""
    server = clocked
    await server.create("snap", server.fake.add(*NAMES), release=RELEASE)
    clock = await window_waits(server, "snap")
    before = server.metrics.window_reads
    for _ in range(2):
        clock.advance(run_base.RECORD_POLL_SECONDS)
        await clock.until_sleeping(task="notification snap")
    assert server.metrics.window_reads == before + 2
    await release(server, "snap")
    await server.finished("snap")
    ended = server.metrics.window_reads
    await server.create("later", server.fake.add(*NAMES))  # a later pass, without a window
    await server.finished("later")
    assert server.metrics.window_reads == ended


async def test_after_seconds_releases_by_itself_exactly_then(
        clocked: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_base, "RECORD_POLL_SECONDS", 0.25)
    server = clocked
    await server.create("snap", server.fake.add(*NAMES), release={**RELEASE, "afterSeconds": 1})
    clock = await window_waits(server, "snap")
    assert parse_timestamp((await server.get("snap"))["status"]["window"]["quiescedTime"]
                           ) == START
    reads = server.metrics.window_reads
    for _ in range(3):  # the run looks again at every poll, and the window stays open
        clock.advance(0.25)
        await clock.until_sleeping(task="notification snap")
    assert server.metrics.window_reads == reads + 3
    clock.advance(0.249)
    await clock.until_sleeping()
    assert (await server.get("snap"))["status"]["phase"] == "Running"
    assert started(server, UNQUIESCE) == []
    clock.advance(0.001)
    status = (await server.finished("snap", timeout=5))["status"]
    assert status["phase"] == "Succeeded"
    assert status["window"]["releaseReason"] == "AfterSeconds"
    assert parse_timestamp(status["window"]["releaseTime"]) == START + 1
    assert started(server, UNQUIESCE) == NAMES
    assert server.events.reasons().count("Quiesced") == 1


async def test_quiesced_time_is_when_the_last_quiesce_ended_not_when_it_was_known_or_stored(
        clocked: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Here the fan-out learns each pod's result 10 s after its quiesce ended (as if its
    record's final write took that long), and takes 30 s to store it: with parallelism 1 the
    last quiesce ended at START + 80 (learned at + 90, stored at + 120), and the window opened
    then, as its record's completionTime says."""
    server = clocked
    clock = fake_clock(server)
    finish_pod, wait = server.scopes.finish_pod, server.fake.wait

    async def slow_finish_pod(*args: Any, **kwargs: Any) -> bool:
        clock.advance(30)
        return await finish_pod(*args, **kwargs)

    async def late_wait(*args: Any) -> None:
        await wait(*args)
        clock.advance(10)

    monkeypatch.setattr(server.scopes, "finish_pod", slow_finish_pod)
    monkeypatch.setattr(server.fake, "wait", late_wait)
    await server.create("snap", server.fake.add(*NAMES), release=RELEASE)
    status = await window_open(server, "snap")
    assert parse_timestamp(status["window"]["quiescedTime"]) == START + 80
    assert clock.now() >= START + 120


async def test_the_first_release_does_not_wait_for_the_status_that_shows_the_end(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The status write that shows the window's end is held until an unquiesce has started:
    the run finishes, so the releases did not wait for it (the end was stored in the run
    before them)."""
    update = server.notifications.guaranteed_update

    async def gated(namespace: str, name: str, mutate: Any) -> dict[str, Any]:
        shown = mutate(copy.deepcopy(await server.notifications.get(namespace, name)))
        window = (shown.get("status") or {}).get("window") or {}
        if window.get("releaseTime") and not window.get("unquiescedTime"):
            await server.until(lambda: asyncio.sleep(0, bool(started(server, UNQUIESCE))))
        return await update(namespace, name, mutate)

    monkeypatch.setattr(server.notifications, "guaranteed_update", gated)
    await server.create("snap", server.fake.add(*NAMES), release=RELEASE)
    await window_open(server, "snap")
    await release(server, "snap")
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["counts"]["released"]) == ("Succeeded", 3)
    assert status["window"]["releaseTime"] <= status["window"]["unquiescedTime"]


async def test_max_hold_seconds_releases_when_nobody_does(clocked: Server) -> None:
    server = clocked
    await server.create("snap", server.fake.add(*NAMES),
                        release={"notifier": UNQUIESCE, "maxHoldSeconds": 1})
    clock = await window_waits(server, "snap")
    clock.advance(0.999)
    await clock.until_sleeping()
    assert started(server, UNQUIESCE) == []
    clock.advance(0.001)
    status = (await server.finished("snap", timeout=5))["status"]
    assert parse_timestamp(status["window"]["releaseTime"]) == START + 1
    assert (status["phase"], status["conditions"][0]["reason"]) == (
        "Failed", "ReleasedAfterMaxHold")
    assert "nobody released the window within maxHoldSeconds (1 s)" in (
        status["conditions"][0]["message"])
    assert (quiesced(status)["status"], quiesced(status)["reason"]) == (
        "False", "ReleasedAfterMaxHold")
    assert status["counts"]["released"] == 3
    assert started(server, UNQUIESCE) == NAMES


async def test_the_deadline_ends_the_window(clocked: Server) -> None:
    server = clocked
    await server.create("snap", server.fake.add(*NAMES), release=RELEASE,
                        activeDeadlineSeconds=1)
    clock = await window_waits(server, "snap")
    clock.advance(1)
    status = (await server.finished("snap", timeout=5))["status"]
    assert parse_timestamp(status["window"]["releaseTime"]) == START + 1
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "DeadlineExceeded")
    assert status["window"]["releaseReason"] == "DeadlineExceeded"
    assert started(server, UNQUIESCE) == NAMES


async def test_deleting_the_notification_releases(server: Server) -> None:
    created = await server.create("snap", server.fake.add(*NAMES), release=RELEASE)
    await window_open(server, "snap")
    await server.notifications.delete(NS, "snap")
    await server.manager.deleted(created["metadata"]["uid"])
    await server.idle()
    assert started(server, UNQUIESCE) == NAMES
    assert await server.scopes.run(created["metadata"]["uid"]) is None  # forgotten


async def test_a_failed_quiesce_releases_what_was_quiesced(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2", "db-3")
    server.fake.outcomes[("db-1", QUIESCE)] = "fail"
    await server.create("snap", pods, release=RELEASE)
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "FailFast")
    assert "quiescedTime" not in status["window"]  # not every pod was quiesced
    assert status["window"]["releaseReason"] == "FailFast"
    assert status["counts"] == {**counts(total=4, pending=2, succeeded=1, failed=1),
                                "released": 1}
    assert started(server, UNQUIESCE) == ["db-0"]
    assert "not every pod was quiesced" in quiesced(status)["message"]
    assert "Quiesced" not in server.events.reasons()
    (closed,) = [o for o in server.events.occurrences if o.reason == "Unquiesced"]
    assert closed.note == ("released (FailFast): not every pod was quiesced, so no window "
                           "opened; 1 pods released, 0 failed")


async def test_a_failed_release_fails_the_notification(server: Server) -> None:
    server.fake.outcomes[("db-1", UNQUIESCE)] = "fail"
    await server.create("snap", server.fake.add(*NAMES), release={**RELEASE, "afterSeconds": 0})
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "ReleaseFailed")
    assert "1 releases failed: db-1" in status["conditions"][0]["message"]
    assert status["counts"]["released"] == 2
    (closed,) = [o for o in server.events.occurrences if o.reason == "Unquiesced"]
    assert closed.type == "Warning" and closed.note.endswith("2 pods released, 1 failed")


async def test_a_release_without_a_notifier_of_an_ordinary_quiesce_fails_loudly(
        server: Server) -> None:
    await server.create("snap", server.fake.add("db-0"), release={"afterSeconds": 0,
                                                                  "maxHoldSeconds": 60})
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "ReleaseFailed")


async def test_without_release_nothing_changes(server: Server) -> None:
    await server.create("plain", server.fake.add(*NAMES))
    status = (await server.finished("plain"))["status"]
    assert "window" not in status and "released" not in status["counts"]
    assert [c["type"] for c in status["conditions"]] == ["Complete"]


# crashes


async def test_a_crash_mid_window_continues_the_window_and_releases_once(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = await Server.open(data)
    await first.create("snap", first.fake.add(*NAMES), parallelism=3, release=RELEASE)
    before = (await window_open(first, "snap"))["window"]
    await first.crash()

    second = await restart(data, first, NAMES)
    try:
        status = await window_open(second, "snap")
        assert status["window"]["quiescedTime"] == before["quiescedTime"]
        await asyncio.sleep(0.3)
        assert second.fake.started == []  # still held: nothing re-quiesced, nothing released
        await release(second, "snap")
        status = (await second.finished("snap"))["status"]
        assert status["phase"] == "Succeeded"
        assert sorted(second.fake.started) == [(pod, UNQUIESCE) for pod in NAMES]
        assert first.events.reasons().count("Quiesced") == 1
        assert "Quiesced" not in second.events.reasons(), "the resumed window opened again"
        assert second.events.reasons().count("Unquiesced") == 1
    finally:
        await second.close()


async def test_a_release_requested_while_the_leader_was_down_happens_at_once(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = await Server.open(data)
    created = await first.create("snap", first.fake.add(*NAMES), release=RELEASE)
    await window_open(first, "snap")
    await first.crash()
    second = await Server.open(data, lead=False)  # another replica takes the request
    await second.scopes.note_window(created["metadata"]["uid"],
                                    releaseRequestedTime=records.now())
    second.fake.add(*NAMES)
    try:
        await second.manager.lead()
        status = (await second.finished("snap"))["status"]
        assert status["window"]["releaseReason"] == "ReleaseRequested"
        assert started(second, UNQUIESCE) == NAMES
    finally:
        await second.close()


async def test_a_crash_mid_release_runs_the_interrupted_release_again_and_says_so(
        tmp_path: Path) -> None:
    """db-0's release finished, db-1's record was created and is running, db-2's was never
    started: after the restart db-0 is not released again, db-1's interrupted attempt runs
    again as attempt 2 (undo steps at least once: its first command may have run too, which
    counts.mayHaveRunTwice says), db-2 is released once."""
    data = tmp_path / "data"
    first = await Server.open(data)
    created = await first.create("snap", first.fake.add(*NAMES), release=RELEASE)
    uid = created["metadata"]["uid"]
    await window_open(first, "snap")

    async def hold_db1(pod: str, notifier: str) -> None:
        if (pod, notifier) == ("db-1", UNQUIESCE):
            first.fake.gates[pod] = asyncio.Event()

    first.fake.on_start = hold_db1
    await release(first, "snap")
    await first.until(lambda: _true(("db-1", UNQUIESCE) in first.fake.started))
    await first.crash()

    second = await restart(data, first, NAMES)
    try:
        status = (await second.finished("snap"))["status"]
        assert sorted(second.fake.started) == [("db-1", UNQUIESCE), ("db-2", UNQUIESCE)]
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Succeeded",
                                                                       "PodsSucceeded")
        assert status["counts"] == {**counts(total=3, succeeded=3), "released": 3,
                                    "mayHaveRunTwice": 1}
        pods = {p.pod: p for p in await second.scopes.pods(uid)}
        assert [pods[n].release for n in NAMES] == [scope.RELEASE_DONE] * 3
        assert [pods[n].release_attempts for n in NAMES] == [1, 2, 1]
        assert pods["db-1"].release_record == record_name("db-1", UNQUIESCE, uid, "uid-db-1", 2)
        interrupted = await second.podnotifiers.get(
            NS, record_name("db-1", UNQUIESCE, uid, "uid-db-1", 1))
        assert interrupted["status"]["reason"] == records.INTERRUPTED
        again = await second.podnotifiers.get(NS, pods["db-1"].release_record)
        assert again["metadata"]["labels"][ROLLBACK_ATTEMPT_LABEL] == "2"
    finally:
        await second.close()


async def _true(value: bool) -> bool:
    return value


async def test_a_release_whose_record_was_never_created_runs_once(tmp_path: Path) -> None:
    """A leader stopped after the window ended and before the release's record was created:
    the next leader runs the release as attempt 1, once (its claim, the record, never
    existed, so it never ran: it does not count as maybe run twice)."""
    data = tmp_path / "data"
    first = await Server.open(data)
    created = await first.create("snap", first.fake.add("db-0"), release=RELEASE)
    uid = created["metadata"]["uid"]
    await window_open(first, "snap")
    await first.crash()
    second = await Server.open(data, lead=False)
    second.fake.add("db-0")
    await second.scopes.end_window(uid, "ReleaseRequested", records.now())
    try:
        await second.manager.lead()
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == [("db-0", UNQUIESCE)]
        assert status["phase"] == "Succeeded"
        assert "mayHaveRunTwice" not in status["counts"]
        first_attempt = record_name("db-0", UNQUIESCE, uid, "uid-db-0", 1)
        assert (await second.podnotifiers.get(NS, first_attempt))["status"]["phase"] == (
            "Succeeded")
        (pod,) = await second.scopes.pods(uid)
        assert (pod.release, pod.release_record, pod.release_attempts) == (
            scope.RELEASE_DONE, first_attempt, 1)
    finally:
        await second.close()


async def test_a_release_that_ended_before_the_crash_is_not_repeated(tmp_path: Path) -> None:
    """The release's record of attempt 1 finished (failed) before its result was in the scope:
    the next leader takes that result; nothing runs again."""
    data = tmp_path / "data"
    first = await Server.open(data)
    first.fake.outcomes[("db-0", UNQUIESCE)] = "fail"
    await first.create("snap", first.fake.add("db-0"), release=RELEASE)
    await window_open(first, "snap")
    blocked = asyncio.Event()

    async def die_before_storing(*args: Any, **kwargs: Any) -> None:
        blocked.set()
        await asyncio.Event().wait()  # the server dies here: the record finished, scope not

    first.scopes.finish_release = die_before_storing  # type: ignore[method-assign]
    await release(first, "snap")
    await asyncio.wait_for(blocked.wait(), 5)
    await first.crash()
    second = await restart(data, first, ["db-0"])
    try:
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == []
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed",
                                                                       "ReleaseFailed")
    finally:
        await second.close()


# held quiesce records


class FakeHolds:
    """The hold releases of held notifiers: a request ends the Held record Succeeded."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.requested: list[str] = []
        self.cannot_stop: set[str] = set()
        """Records whose command the release fails to stop (they end Failed, StopFailed)."""

    async def request(self, namespace: str, name: str, by: UserInfo) -> dict[str, Any]:
        self.requested.append(name)
        if name in self.cannot_stop:
            entry = {"name": "app", "phase": "Failed", "reason": "StopFailed"}
        else:
            entry = {"name": "app", "phase": "Succeeded", "reason": "Completed", "exitCode": 0}
        return await self.server.podnotifiers.guaranteed_update(
            namespace, name, lambda r: records.finish(records.set_container(r, entry),
                                                      records.now()))


async def held_server(tmp_path: Path) -> tuple[Server, FakeHolds]:
    """A server whose quiesce runs become Held (and stay so until released)."""
    server = await Server.open(tmp_path / "data", lead=False)
    holds = FakeHolds(server)
    server.manager.parts = replace(server.manager.parts, holds=holds)
    real_run = server.fake._run

    async def run(pod: str, notifier: str, name: str) -> None:
        if notifier != QUIESCE:
            await real_run(pod, notifier, name)
            return

        def hold(record: dict[str, Any]) -> dict[str, Any]:
            return {**record, "status": {**record["status"], "phase": "Held",
                                         "heldTime": records.now()}}

        await server.podnotifiers.guaranteed_update(NS, name, hold)

    server.fake._run = run  # type: ignore[method-assign]
    await server.manager.lead()
    return server, holds


async def test_held_records_are_quiesced_and_released_through_their_hold(
        tmp_path: Path) -> None:
    server, holds = await held_server(tmp_path)
    try:
        await server.create("snap", server.fake.add(*NAMES), release={"maxHoldSeconds": 60})
        status = await window_open(server, "snap")
        assert status["counts"]["succeeded"] == 3
        assert holds.requested == []
        await release(server, "snap")
        status = (await server.finished("snap"))["status"]
        assert status["phase"] == "Succeeded"
        assert status["counts"]["released"] == 3
        assert len(holds.requested) == 3
        assert started(server, UNQUIESCE) == []  # no release notifier: the hold's end is it
    finally:
        await server.close()


async def test_a_hold_that_does_not_end_released_fails_its_release(tmp_path: Path) -> None:
    server, holds = await held_server(tmp_path)
    try:
        created = await server.create("snap", server.fake.add(*NAMES),
                                      release={"maxHoldSeconds": 60})
        holds.cannot_stop.add(record_name("db-1", QUIESCE, created["metadata"]["uid"],
                                          "uid-db-1"))
        await window_open(server, "snap")
        await release(server, "snap")
        status = (await server.finished("snap"))["status"]
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed",
                                                                         "ReleaseFailed")
        assert status["counts"]["released"] == 2
    finally:
        await server.close()


async def test_a_window_whose_hold_broke_ends_when_it_broke_not_when_it_was_stored(
        tmp_path: Path) -> None:
    """The stream of a held command broke while kube-apiserver was away; its record could be
    written only later: the window ends at the break, so no snapshot taken since is trusted."""
    server, _ = await held_server(tmp_path)
    try:
        created = await server.create("snap", server.fake.add(*NAMES),
                                      release={"notifier": UNQUIESCE, "maxHoldSeconds": 60})
        await window_open(server, "snap")
        broke = records.rfc3339(datetime.now(UTC) - timedelta(seconds=20))
        broken = record_name("db-1", QUIESCE, created["metadata"]["uid"], "uid-db-1")
        await server.podnotifiers.guaranteed_update(NS, broken, lambda r: records.finish(
            records.set_container(r, {"name": "app", "phase": "Failed", "reason": "HoldEnded",
                                      "completionTime": broke}), records.now()))
        window = (await server.finished("snap"))["status"]["window"]
        assert (window["releaseReason"], window["releaseTime"]) == ("HoldEnded", broke)
    finally:
        await server.close()


async def test_a_hold_ending_on_its_own_ends_the_window_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken by the records' watch: the window's own re-read (RECORD_POLL_SECONDS) is made
    an hour here, so only the watch can end it within the test's wait."""
    monkeypatch.setattr(run_base, "RECORD_POLL_SECONDS", 3600.0)
    server, holds = await held_server(tmp_path)
    try:
        created = await server.create("snap", server.fake.add(*NAMES),
                                      release={"notifier": UNQUIESCE, "maxHoldSeconds": 60})
        await window_open(server, "snap")
        uid = created["metadata"]["uid"]
        expired = record_name("db-1", QUIESCE, uid, "uid-db-1")
        await server.podnotifiers.guaranteed_update(NS, expired, lambda r: records.finish(
            records.set_container(r, {"name": "app", "phase": "Failed",
                                      "reason": "HoldExpired"}), records.now()))
        status = (await server.finished("snap"))["status"]
        assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "HoldEnded")
        assert "the hold of pod db-1 ended on its own" in status["conditions"][0]["message"]
        assert len(holds.requested) == 2  # the expired one needs no release request
        assert started(server, UNQUIESCE) == NAMES  # every quiesced pod is unquiesced
    finally:
        await server.close()


# one quiesce at a time


async def test_forbid_fails_the_second_notification_fast(server: Server) -> None:
    pods = server.fake.add(*NAMES)
    await server.create("first", pods, release=RELEASE)
    await window_open(server, "first")
    await server.create("second", pods, release=RELEASE, parallelism=3)
    status = (await finished_one(server, "second"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "FailFast")
    assert "QuiesceConflict" in status["conditions"][0]["message"]
    assert "db-0 by first" in status["conditions"][0]["message"]
    assert sum(n == QUIESCE for _, n in server.fake.started) == 3  # only the first's
    await release(server, "first")
    assert (await server.finished("first"))["status"]["phase"] == "Succeeded"
    assert started(server, UNQUIESCE) == NAMES


async def test_wait_runs_the_second_after_the_first_released(clocked: Server) -> None:
    server = clocked
    pods = server.fake.add(*NAMES)
    await server.create("first", pods, release=RELEASE)
    clock = await window_waits(server, "first")
    await server.create("second", pods, release={**RELEASE, "afterSeconds": 0},
                        concurrencyPolicy="Wait", parallelism=3)
    await server.until(lambda: _true(sum(
        len(run.waiting) for run, _ in server.manager._runs.values()) == 3))
    clock.advance(60)
    await clock.until_sleeping()
    assert sum(n == QUIESCE for _, n in server.fake.started) == 3  # the second waits
    await release(server, "first")
    await server.finished("second")
    for name in ("first", "second"):
        assert (await server.get(name))["status"]["phase"] == "Succeeded"
    # every quiesce of the second came after the first's unquiesce of that pod
    for pod in NAMES:
        runs = [n for p, n in server.fake.started if p == pod]
        assert runs == [QUIESCE, UNQUIESCE, QUIESCE, UNQUIESCE]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), {})


async def test_a_waiting_pod_shows_a_condition_naming_what_it_waits_for(server: Server) -> None:
    pods = server.fake.add("db-0")
    await server.create("first", pods, release=RELEASE)
    await window_open(server, "first")
    await server.create("second", pods, release={**RELEASE, "afterSeconds": 0},
                        concurrencyPolicy="Wait")

    async def waiting() -> bool:
        found = condition(await server.get("second"), "WaitingForNotification")
        return found.get("status") == "True"

    await server.until(waiting)
    shown = condition(await server.get("second"), "WaitingForNotification")
    assert shown["reason"] == "OtherNotificationQuiescing"
    assert shown["message"] == (
        f'1 pod waits for another Notification quiescing it with notifier "{QUIESCE}" to '
        'release it (concurrencyPolicy Wait): db-0 for notification "first"')
    assert shown["lastTransitionTime"]
    await release(server, "first")
    done = await server.finished("second")
    assert done["status"]["phase"] == "Succeeded"
    ended = condition(done, "WaitingForNotification")
    assert (ended["status"], ended["reason"]) == ("False", "NoPodWaiting")
    assert condition(await server.get("first"), "WaitingForNotification") == {}


async def test_wait_is_bounded_by_the_deadline(clocked: Server) -> None:
    server = clocked
    pods = server.fake.add("db-0")
    await server.create("first", pods, release=RELEASE)
    clock = await window_waits(server, "first")
    await server.create("second", pods, concurrencyPolicy="Wait", activeDeadlineSeconds=1)
    await clock.until_sleeping(task="notification second")
    clock.advance(0.999)
    await clock.until_sleeping()
    assert (await server.get("second"))["status"]["phase"] == "Running"
    clock.advance(0.001)
    status = (await finished_one(server, "second"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "DeadlineExceeded")
    assert status["counts"]["pending"] == 1


async def test_a_new_leader_rebuilds_the_locks_before_any_pod_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = await Server.open(data)
    await first.create("first", first.fake.add(*NAMES), release=RELEASE)
    await window_open(first, "first")
    await first.crash()
    second = await restart(data, first, NAMES)
    try:
        await second.create("second", [(n, f"uid-{n}") for n in NAMES])
        status = (await finished_one(second, "second"))["status"]
        assert status["conditions"][0]["reason"] == "FailFast"
        assert "QuiesceConflict" in status["conditions"][0]["message"]
        assert second.fake.started == []
        await release(second, "first")
        await second.finished("first")
        assert started(second, UNQUIESCE) == NAMES
    finally:
        await second.close()


async def test_without_release_the_lock_lasts_the_run_of_the_pod(server: Server) -> None:
    pods = server.fake.add("db-0")
    gate = server.fake.gates["db-0"] = asyncio.Event()
    await server.create("first", pods)
    await server.until(lambda: _true(bool(server.fake.started)))
    await server.create("second", pods, concurrencyPolicy="Wait")
    await asyncio.sleep(0.2)
    assert len(server.fake.started) == 1
    gate.set()
    await server.finished("second")
    assert server.fake.started == [("db-0", QUIESCE), ("db-0", QUIESCE)]
