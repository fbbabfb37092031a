"""Notification runs with fake pods, a fake admission and fake runs over the real SQLite stores:
parallelism, Abort, Continue, deadline, rollback, deletion mid-run, every error path, and the
crash cases (a run cancelled at an await point is what SIGKILL leaves behind: nothing after
that point happens, and the next server ends the unfinished records as Interrupted)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.clock import Clock, SystemClock
from apiserver.fanout import scope
from apiserver.fanout.manager import FanoutManager
from apiserver.fanout.parts import FanoutParts
from apiserver.fanout.reasons import pod_outcome
from apiserver.fanout.run_base import status_time
from apiserver.fanout.run_records import ROLLBACK_ATTEMPT_LABEL, record_name, stored_record
from apiserver.fanout.scope_store import ScopeStore
from apiserver.fanout.status import waiting_for_pods
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.notifier import housekeeping, records
from apiserver.notifier.errors import (
    InvalidDeclaration,
    NotDeclared,
    PodNotFound,
    RunConflict,
    ServerAtCapacity,
    TooManyRuns,
    Untrusted,
)
from apiserver.notifier.events import NotificationEvents
from apiserver.notifier.holds import HoldReleases
from apiserver.notifier.request import NotifyRequest
from apiserver.registry.errors import NotFound
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import (
    NOTIFICATION_POD_SETS,
    NOTIFICATION_RUNS,
    NOTIFICATIONS,
    PODNOTIFIERS,
)
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from tests.support.clock import FakeClock
from tests.support.events import RecordingSink

NS = "prod"
QUIESCE, UNQUIESCE = "quiesce", "unquiesce"
CREATOR = UserInfo("db-operator", "uid-1", ["ops"])


@dataclass
class Admitted:
    pod: dict[str, Any]
    ask: NotifyRequest


RUN_SECONDS = 0.05
"""How long a fake run takes: long enough for `parallelism` starts (each a few storage
writes, slower on a loaded machine) to overlap."""


@dataclass
class FakePods:
    """Pods, their admission and their runs. A run's outcome is `outcomes[(pod, notifier)]`
    ("ok" by default, "fail", or an exception admission raises); `gates[pod]` holds a run
    until set. Counts what ran, and the peak of runs at once."""

    podnotifiers: PodNotifierStore
    clock: Clock = field(default_factory=SystemClock)
    """The records' times come from it: the runner's clock is the fan-out's (one process)."""
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[tuple[str, str], Any] = field(default_factory=dict)
    read_errors: dict[str, Exception] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    started: list[tuple[str, str]] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    running: int = 0
    peak: int = 0
    runs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    on_start: Callable[[str, str], Awaitable[None]] | None = None
    at_capacity: dict[tuple[str, str], int] = field(default_factory=dict)
    """(pod, notifier) -> how many more starts the server's capacity refuses."""
    capacity_refusals: int = 0

    def add(self, *names: str) -> list[tuple[str, str]]:
        for name in names:
            self.pods[name] = {"metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"},
                               "spec": {"containers": [{"name": "app"}]},
                               "status": {"phase": "Running"}}
        return [(name, f"uid-{name}") for name in names]

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        if name in self.read_errors:
            raise self.read_errors[name]
        if name not in self.pods:
            raise PodNotFound(namespace, name)
        return self.pods[name]

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: NotifyRequest) -> Admitted:
        assert user == CREATOR
        outcome = self.outcomes.get((pod["metadata"]["name"], ask.notifier))
        if isinstance(outcome, Exception):
            raise outcome
        return Admitted(pod, ask)

    async def start(self, admitted: Admitted) -> dict[str, Any]:
        meta, ask = admitted.pod["metadata"], admitted.ask
        key = (meta["name"], ask.notifier)
        if self.at_capacity.get(key, 0) > 0:
            self.at_capacity[key] -= 1
            self.capacity_refusals += 1
            raise ServerAtCapacity("the server is running its maximum of 64 notifiers at once")
        record = records.new_record(records.RecordRequest(
            namespace=NS, pod=meta["name"], pod_uid=meta["uid"], notifier=ask.notifier,
            containers=["app"], requested_containers=None, timeout_seconds=None,
            ttl_seconds_after_finished=3600, name=ask.name, generate_name="",
            labels=ask.labels, requested_by=CREATOR))
        created = await self.podnotifiers.create_bounded(record, max_per_pod=100)
        self.started.append((meta["name"], ask.notifier))
        self.labels.append(dict(created["metadata"].get("labels", {})))
        if self.on_start is not None:
            await self.on_start(meta["name"], ask.notifier)
        self.runs[ask.name] = asyncio.create_task(self._run(meta["name"], ask.notifier,
                                                            ask.name))
        return created

    async def _run(self, pod: str, notifier: str, name: str) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.podnotifiers.guaranteed_update(
                NS, name, lambda r: records.mark_running(r, status_time(self.clock)))
            if pod in self.gates:
                await self.gates[pod].wait()
            else:
                await asyncio.sleep(RUN_SECONDS)
            ok = self.outcomes.get((pod, notifier), "ok") == "ok"
            entry = {"name": "app", "phase": records.SUCCEEDED if ok else records.FAILED,
                     "reason": "Completed" if ok else "NonZeroExitCode",
                     "exitCode": 0 if ok else 1}
            await self.podnotifiers.guaranteed_update(NS, name, lambda r: records.finish(
                records.set_container(r, entry), status_time(self.clock)))
        finally:
            self.running -= 1

    async def wait(self, namespace: str, record: str, timeout: float) -> None:
        run = self.runs.get(record)
        if run is not None:
            await asyncio.shield(run)

    async def stop(self) -> None:
        """The server dies: runs end without writing anything."""
        for run in self.runs.values():
            run.cancel()
        await asyncio.gather(*self.runs.values(), return_exceptions=True)


@dataclass
class FakeAuthorizer:
    denied: set[str] = field(default_factory=set)
    asked: list[RequestAttributes] = field(default_factory=list)

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append(attributes)
        return Decision(attributes.name not in self.denied, "RBAC: no")


@dataclass
class FakeMetrics:
    finished: list[str] = field(default_factory=list)
    window_reads: int = 0

    def notification_finished(self, phase: str) -> None:
        self.finished.append(phase)

    def window_read(self) -> None:
        self.window_reads += 1


class FakeNewPods:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.asked: list[tuple[str, str]] = []

    async def matching(self, namespace: str, selector: str
                       ) -> AsyncGenerator[tuple[str, str], None]:
        self.asked.append((namespace, selector))
        while True:
            yield await self.queue.get()


def scope_store(database: SqliteDatabase, clock: Clock) -> ScopeStore:
    return ScopeStore(SqliteObjectStore(database, NOTIFICATION_RUNS),
                      SqliteObjectStore(database, NOTIFICATION_POD_SETS), clock=clock)


@dataclass
class Server:
    """One server process: its stores on the data directory and its fan-out."""

    database: SqliteDatabase
    notifications: SqliteObjectStore
    podnotifiers: PodNotifierStore
    scopes: ScopeStore
    fake: FakePods
    authorizer: FakeAuthorizer
    metrics: FakeMetrics
    new_pods: FakeNewPods
    manager: FanoutManager
    events: RecordingSink
    """The Notifications' Events."""
    clock: Clock
    """The fan-out's clock: the real one unless the test gives a fake one to advance."""

    @classmethod
    async def open(cls, data: Path, lead: bool = True, clock: Clock | None = None) -> Server:
        """The server, leading the fan-out unless `lead` is False (one replica over SQLite:
        no other replica writes scopes, so no grace before failing or rolling back)."""
        clock = clock or SystemClock()
        database = await SqliteDatabase.open(data)
        notifications = SqliteObjectStore(database, NOTIFICATIONS)
        podnotifiers = PodNotifierStore(SqliteObjectStore(database, PODNOTIFIERS), "replica-0")
        scopes = scope_store(database, clock)
        fake, authorizer = FakePods(podnotifiers, clock), FakeAuthorizer()
        metrics, new_pods, events = FakeMetrics(), FakeNewPods(), RecordingSink()
        manager = FanoutManager(FanoutParts(
            notifications=notifications, podnotifiers=podnotifiers, scopes=scopes,
            admission=fake, runner=fake, authorizer=authorizer, metrics=metrics,
            new_pods=new_pods, events=NotificationEvents(events),
            holds=HoldReleases(podnotifiers)), sweep_delay=0.01,
            clock=clock, scope_grace=0, absent_grace=0)
        if lead:
            await manager.lead()
        return cls(database, notifications, podnotifiers, scopes, fake, authorizer, metrics,
                   new_pods, manager, events, clock)

    async def create(self, name: str, pods: list[tuple[str, str]], **spec: Any
                     ) -> dict[str, Any]:
        full = {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE,
                "policy": "PreExistingPods", "parallelism": 1, "failurePolicy": "Abort",
                "requestedBy": {"username": CREATOR.name, "uid": CREATOR.uid,
                                "groups": CREATOR.groups, "extra": {}}, **spec}
        created = await self.notifications.create({
            "apiVersion": records.API_VERSION, "kind": "Notification",
            "metadata": {"namespace": NS, "name": name}, "spec": full,
            "status": {"phase": records.PENDING}})
        await self.manager.begin(created, pods)
        return created

    async def get(self, name: str) -> dict[str, Any]:
        return await self.notifications.get(NS, name)

    async def finished(self, name: str, timeout: float = 5) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            obj = await self.get(name)
            if obj["status"].get("phase") in records.FINISHED_PHASES and not self.manager._runs:
                return obj
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} did not finish: {(await self.get(name))['status']}")

    async def idle(self, timeout: float = 5) -> None:
        async with asyncio.timeout(timeout):
            while self.manager._runs:
                await asyncio.gather(*(task for _, task in list(self.manager._runs.values())),
                                     return_exceptions=True)

    async def until(self, check: Callable[[], Awaitable[bool]], timeout: float = 5) -> None:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.005)

    async def counts(self, name: str) -> dict[str, int]:
        return dict((await self.get(name))["status"].get("counts", {}))

    async def crash(self) -> None:
        """SIGKILL: every task stops at the await point it is at; nothing else is written."""
        await self.manager.step_down()
        await self.fake.stop()
        self.notifications.close()
        self.podnotifiers.close()
        await self.database.close()

    async def close(self) -> None:
        await self.manager.shutdown()
        await self.fake.stop()
        self.notifications.close()
        self.podnotifiers.close()
        await self.database.close()


async def restart(data: Path, before: Server, pods: list[str], *, lead: bool = True
                  ) -> Server:
    """A new server process on the same data directory, as serve() starts it: unfinished
    records end Interrupted, then (unless not `lead`) it leads the fan-out (resuming it)."""
    server = await Server.open(data, lead=False, clock=before.clock)
    server.fake.add(*pods)
    server.fake.outcomes.update(before.fake.outcomes)
    await housekeeping.recover_interrupted(server.podnotifiers)
    if lead:
        await server.manager.lead()
    return server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    opened = await Server.open(tmp_path / "data")
    yield opened
    await opened.close()


def counts(**given: int) -> dict[str, int]:
    return {"total": 0, "pending": 0, "running": 0, "succeeded": 0, "failed": 0, "skipped": 0,
            "rolledBack": 0, **given}


# the ordinary paths


async def test_every_pod_succeeds(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2")
    await server.create("all", pods, parallelism=3)
    status = (await server.finished("all"))["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"] == counts(total=3, succeeded=3)
    assert status["conditions"][0]["reason"] == "PodsSucceeded"
    assert sorted(server.fake.started) == [("db-0", QUIESCE), ("db-1", QUIESCE),
                                           ("db-2", QUIESCE)]
    assert server.metrics.finished == ["Succeeded"]
    labelled = {r["metadata"]["labels"].get(records.NOTIFICATION_LABEL)
                for r in (await server.podnotifiers.list(NS)).items}
    assert labelled == {"all"}
    # each pod's turn asks whether the creator may create pods/notify on every pod of the
    # namespace (the real authorizer caches it); allowed, so no pod is asked by name
    assert [a.name for a in server.authorizer.asked] == ["", "", ""]
    assert {a.namespace for a in server.authorizer.asked} == {NS}
    assert {(a.resource, a.subresource, a.verb) for a in server.authorizer.asked} == {
        ("pods", "notify", "create")}


@pytest.mark.parametrize("parallelism", [1, 2, 5])
async def test_parallelism_is_never_exceeded(server: Server, parallelism: int) -> None:
    """Every run is held until `parallelism` are in flight, so the cap is reached whatever the
    machine's load (a run that ended before the next began used to leave the peak lower)."""
    pods = server.fake.add(*(f"db-{i}" for i in range(12)))
    gates = [server.fake.gates.setdefault(f"db-{i}", asyncio.Event()) for i in range(12)]
    await server.create("capped", pods, parallelism=parallelism)

    async def full() -> bool:
        return server.fake.running == parallelism

    await server.until(full)
    for gate in gates:
        gate.set()
    assert (await server.finished("capped"))["status"]["counts"]["succeeded"] == 12
    assert server.fake.peak == parallelism


async def test_abort_stops_new_starts_and_rolls_back(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2", "db-3")
    server.fake.outcomes[("db-1", QUIESCE)] = "fail"
    await server.create("snap", pods, rollback={"notifier": UNQUIESCE})
    status = (await server.finished("snap"))["status"]
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["reason"] == "FailFast"
    assert status["counts"] == counts(total=4, pending=2, succeeded=1, failed=1, rolledBack=1)
    assert "NonZeroExitCode: 1" in status["conditions"][0]["message"]
    assert server.fake.started == [("db-0", QUIESCE), ("db-1", QUIESCE), ("db-0", UNQUIESCE)]
    assert server.fake.labels[-1][ROLLBACK_ATTEMPT_LABEL] == "1"


async def test_abort_with_parallelism_lets_runs_in_flight_finish(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2", "db-3", "db-4")
    server.fake.outcomes[("db-0", QUIESCE)] = "fail"
    gate = server.fake.gates["db-1"] = asyncio.Event()
    await server.create("wide", pods, parallelism=2)
    await server.until(lambda: _has_failed(server, "wide"))
    gate.set()
    status = (await server.finished("wide"))["status"]
    assert status["counts"] == counts(total=5, pending=3, succeeded=1, failed=1)
    assert [pod for pod, _ in server.fake.started] == ["db-0", "db-1"]


async def test_a_notification_finished_by_another_leader_is_never_written_again(
        server: Server) -> None:
    """A leader paused past its Lease resumes with a run in flight, after the leader that took
    over finished the Notification: its run writes nothing more over that result."""
    pods = server.fake.add("db-0", "db-1")
    gate = server.fake.gates["db-0"] = asyncio.Event()
    await server.create("taken", pods)
    await server.until(lambda: _started(server, "db-0"))
    elsewhere = {"phase": "Failed", "completionTime": "2026-12-03T10:00:00.000Z",
                 "counts": counts(total=2, failed=1, pending=1),
                 "conditions": [{"type": "Failed", "status": "True", "reason": "FailFast",
                                 "message": "by the leader that took over"}]}
    await server.notifications.guaranteed_update(
        NS, "taken", lambda obj: {**obj, "status": elsewhere})
    gate.set()
    await server.idle()
    assert (await server.get("taken"))["status"] == elsewhere
    assert server.metrics.finished == []  # counted by the leader that finished it


async def _started(server: Server, pod: str) -> bool:
    return any(started == pod for started, _ in server.fake.started)


async def _has_failed(server: Server, name: str) -> bool:
    return any(p.state == scope.FAILED for p in await server.scopes.pods(
        (await server.get(name))["metadata"]["uid"]))


async def test_continue_runs_every_pod(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2")
    server.fake.outcomes[("db-1", QUIESCE)] = "fail"
    await server.create("best", pods, failurePolicy="Continue")
    status = (await server.finished("best"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "PodsFailed")
    assert status["counts"] == counts(total=3, succeeded=2, failed=1)
    assert len(server.fake.started) == 3


@pytest.mark.parametrize("elapsed", [0.999, 1.0])
async def test_deadline_stops_starting_pods_once_passed_and_not_before(
        tmp_path: Path, elapsed: float) -> None:
    """db-1 waits for db-0's slot; the slot frees `elapsed` seconds (of the fake clock) after
    the start, under activeDeadlineSeconds 1."""
    clock = FakeClock()
    server = await Server.open(tmp_path / "data", clock=clock)
    try:
        pods = server.fake.add("db-0", "db-1")
        gate = server.fake.gates["db-0"] = asyncio.Event()
        await server.create("late", pods, activeDeadlineSeconds=1,
                            rollback={"notifier": UNQUIESCE})
        await server.until(lambda: _started(server, "db-0"))
        clock.advance(elapsed)
        gate.set()
        status = (await server.finished("late"))["status"]
        if elapsed < 1:
            assert (status["phase"], status["counts"]["succeeded"]) == ("Succeeded", 2)
            assert server.fake.started == [("db-0", QUIESCE), ("db-1", QUIESCE)]
            return
        assert (status["phase"], status["conditions"][0]["reason"]) == (
            "Failed", "DeadlineExceeded")
        assert status["counts"] == counts(total=2, pending=1, succeeded=1, rolledBack=1)
        assert server.fake.started == [("db-0", QUIESCE), ("db-0", UNQUIESCE)]
    finally:
        await server.close()


async def test_all_pods_notifies_later_pods_once_until_the_deadline(server: Server) -> None:
    pods = server.fake.add("early")
    await server.create("follow", pods, policy="AllPods", activeDeadlineSeconds=1)
    await server.until(lambda: _started(server, "early"))
    for pod in server.fake.add("late"):
        server.new_pods.queue.put_nowait(pod)
        server.new_pods.queue.put_nowait(pod)  # reported twice
    server.new_pods.queue.put_nowait(("early", "uid-early"))
    status = (await server.finished("follow", timeout=3))["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"] == counts(total=2, succeeded=2)
    assert server.fake.started == [("early", QUIESCE), ("late", QUIESCE)]
    assert server.new_pods.asked == [(NS, "app=db")]


async def test_a_pod_without_the_notifier_is_skipped(server: Server) -> None:
    pods = server.fake.add("db-0", "cache")
    server.fake.outcomes[("cache", QUIESCE)] = NotDeclared("cache", QUIESCE, ["flush"])
    await server.create("q", pods)
    status = (await server.finished("q"))["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"] == counts(total=2, succeeded=1, skipped=1)
    complete, skipped = status["conditions"]
    assert complete["type"] == "Complete"
    assert (skipped["type"], skipped["status"], skipped["reason"]) == (
        "PodsSkipped", "True", "NotifierNotDeclared")
    assert skipped["message"] == ('1 of 2 pods do not declare notifier "quiesce" and were '
                                  "skipped: cache")


async def test_the_skipped_condition_counts_and_names_a_few(server: Server) -> None:
    names = [f"db-{i}" for i in range(8)]
    pods = server.fake.add(*names)
    for name in names[1:]:
        server.fake.outcomes[(name, QUIESCE)] = NotDeclared(name, QUIESCE, [])
    gate = server.fake.gates["db-0"] = asyncio.Event()
    await server.create("many", pods, failurePolicy="Continue", parallelism=8)

    async def skipped_condition() -> dict[str, Any] | None:
        found = [c for c in (await server.get("many"))["status"].get("conditions") or []
                 if c["type"] == "PodsSkipped"]
        return found[0] if found else None

    async def all_skipped() -> bool:
        condition = await skipped_condition()
        return condition is not None and condition["message"].startswith("7 of 8")

    await server.until(all_skipped)  # visible while the run goes on
    first = await skipped_condition()
    assert first is not None
    gate.set()
    status = (await server.finished("many"))["status"]
    assert status["phase"] == "Succeeded"
    assert status["counts"] == counts(total=8, succeeded=1, skipped=7)
    final = status["conditions"][1]
    assert final["message"] == ('7 of 8 pods do not declare notifier "quiesce" and were '
                                "skipped: db-1, db-2, db-3, db-4, db-5 and 2 more")
    assert final["lastTransitionTime"] == first["lastTransitionTime"]  # status unchanged


async def test_a_run_where_every_pod_was_skipped_fails(server: Server) -> None:
    """The create handler refuses a scope in which no pod declares the notifier; pods whose
    declarations changed before their turn can still leave nothing notified: not Complete."""
    pods = server.fake.add("db-0", "db-1")
    for name in ("db-0", "db-1"):
        server.fake.outcomes[(name, QUIESCE)] = NotDeclared(name, QUIESCE, ["flush"])
    await server.create("none", pods, rollback={"notifier": UNQUIESCE})
    status = (await server.finished("none"))["status"]
    assert status["phase"] == "Failed"
    assert status["counts"] == counts(total=2, skipped=2)
    failed, skipped = status["conditions"]
    assert (failed["type"], failed["reason"]) == ("Failed", "NotifierNotDeclared")
    assert failed["message"] == ('no pod declared notifier "quiesce" when its turn came: 2 of '
                                 "2 pods skipped")
    assert skipped["type"] == "PodsSkipped"
    assert server.fake.started == []  # nothing to roll back


async def test_an_empty_all_pods_start_waits_visibly_until_a_pod_joins(server: Server) -> None:
    waiting = waiting_for_pods(NS, "app=db", records.now())
    created = await server.notifications.create({
        "apiVersion": records.API_VERSION, "kind": "Notification",
        "metadata": {"namespace": NS, "name": "later"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE,
                 "policy": "AllPods", "parallelism": 1, "failurePolicy": "Abort",
                 "activeDeadlineSeconds": 2,
                 "requestedBy": {"username": CREATOR.name, "uid": CREATOR.uid,
                                 "groups": CREATOR.groups, "extra": {}}},
        "status": {"phase": records.PENDING, "conditions": [waiting]}})
    await server.manager.begin(created, [])

    async def conditions() -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in (await server.get("later"))["status"]["conditions"]}

    async def running() -> bool:
        return (await server.get("later"))["status"]["phase"] == "Running"

    await server.until(running)
    assert (await conditions())["WaitingForPods"] == waiting  # still waiting, as created
    await asyncio.sleep(0.02)  # so that the transition's time differs
    for joined in server.fake.add("db-0"):
        server.new_pods.queue.put_nowait(joined)

    async def joined() -> bool:
        return (await conditions())["WaitingForPods"]["status"] == "False"

    await server.until(joined)
    now = (await conditions())["WaitingForPods"]
    assert (now["reason"], now["message"]) == ("PodsJoined", "the first pods joined; 1 in scope")
    status = (await server.finished("later", timeout=5))["status"]
    assert status["phase"] == "Succeeded"
    assert [c["type"] for c in status["conditions"]] == ["Complete", "WaitingForPods"]
    assert status["conditions"][1] == now


async def test_an_all_pods_notification_nobody_joins_keeps_waiting_visible(server: Server
                                                                          ) -> None:
    created = await server.notifications.create({
        "apiVersion": records.API_VERSION, "kind": "Notification",
        "metadata": {"namespace": NS, "name": "never"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE,
                 "policy": "AllPods", "activeDeadlineSeconds": 1,
                 "requestedBy": {"username": CREATOR.name, "uid": CREATOR.uid,
                                 "groups": CREATOR.groups, "extra": {}}},
        "status": {"phase": records.PENDING,
                   "conditions": [waiting_for_pods(NS, "app=db", records.now())]}})
    await server.manager.begin(created, [])
    status = (await server.finished("never", timeout=5))["status"]
    assert status["counts"] == counts()
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Complete", "True"), ("WaitingForPods", "True")]


async def test_a_pod_deleted_before_its_turn_is_podDeleted(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1")
    del server.fake.pods["db-1"]
    await server.create("gone", pods, failurePolicy="Continue")
    status = (await server.finished("gone"))["status"]
    assert status["counts"] == counts(total=2, succeeded=1, failed=1)
    assert "PodDeleted: 1" in status["conditions"][0]["message"]


async def test_a_pod_replaced_under_the_same_name_is_podDeleted(server: Server) -> None:
    pods = server.fake.add("db-0")
    server.fake.pods["db-0"]["metadata"]["uid"] = "another"
    await server.create("replaced", pods)
    status = (await server.finished("replaced"))["status"]
    assert "PodDeleted: 1" in status["conditions"][0]["message"]
    assert server.fake.started == []


# every error path: no exception leaves a pod running or the Notification with a wrong phase

ERRORS: list[tuple[str, Exception, str, str]] = [
    ("forbidden-owner", KubeRejected(403, {"message": "replicasets forbidden"}), "failed",
     "KubeRejected"),
    ("unavailable", KubeUnavailable("kube-apiserver is down"), "failed", "ServiceUnavailable"),
    ("untrusted", Untrusted("p", "no rule vouches"), "failed", "Untrusted"),
    ("invalid", InvalidDeclaration("p", []), "failed", "InvalidDeclaration"),
    ("conflict", RunConflict("ns", "conflict", QUIESCE, "conflict-quiesce-x1", held=False),
     "failed", "RunConflict"),
    ("busy", TooManyRuns("too many"), "failed", "TooManyRuns"),
    ("bug", ZeroDivisionError("oops"), "failed", "InternalError"),
    ("undeclared", NotDeclared("p", QUIESCE, []), "skipped", "NotifierNotDeclared"),
]


@pytest.mark.parametrize(("pod", "error", "state", "reason"), ERRORS,
                         ids=[e[0] for e in ERRORS])
async def test_every_admission_error_is_a_pod_result(
        server: Server, pod: str, error: Exception, state: str, reason: str) -> None:
    pods = server.fake.add(pod)
    server.fake.outcomes[(pod, QUIESCE)] = error
    created = await server.create("err", pods)
    status = (await server.finished("err"))["status"]
    assert status["counts"]["running"] == 0
    assert status["counts"][state] == 1
    assert status["phase"] == "Failed"  # a lone skipped pod: nothing was notified
    (scoped,) = await server.scopes.pods(created["metadata"]["uid"])
    assert (scoped.state, scoped.reason) == (state, reason)
    assert pod_outcome(error) == (state, reason)


async def test_a_run_conflict_names_the_record_in_the_failed_message(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1")
    server.fake.outcomes[("db-1", QUIESCE)] = RunConflict("ns", "db-1", QUIESCE,
                                                          "db-1-quiesce-held1", held=True)
    await server.create("busy", pods, failurePolicy="Continue")
    message = (await server.finished("busy"))["status"]["conditions"][0]["message"]
    assert "RunConflict: 1" in message
    assert f'notifier "{QUIESCE}" was already running on: db-1 (podnotifier ' \
           'db-1-quiesce-held1)' in message


@pytest.mark.parametrize("error", [KubeRejected(403, {"message": "no"}),
                                   KubeUnavailable("down"), RuntimeError("bug")])
async def test_an_error_reading_the_pod_is_a_pod_result(server: Server, error: Exception
                                                        ) -> None:
    pods = server.fake.add("db-0", "db-1")
    server.fake.read_errors["db-0"] = error
    await server.create("read", pods, failurePolicy="Continue")
    status = (await server.finished("read"))["status"]
    assert status["counts"] == counts(total=2, succeeded=1, failed=1)


async def test_a_pod_the_creator_may_no_longer_notify_fails(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1")
    server.authorizer.denied.update({"", "db-1"})  # db-0 is still granted by name
    await server.create("revoked", pods, failurePolicy="Continue")
    status = (await server.finished("revoked"))["status"]
    assert status["counts"] == counts(total=2, succeeded=1, failed=1)
    assert "NotAuthorized: 1" in status["conditions"][0]["message"]
    assert server.fake.started == [("db-0", QUIESCE)]
    assert sorted(a.name for a in server.authorizer.asked) == ["", "", "db-0", "db-1"]


async def test_a_failing_scope_store_is_retried_not_lost(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = server.fake.add("db-0")
    real = server.scopes.finish_pod
    failures = 2

    async def flaky(*args: Any, **kwargs: Any) -> bool:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError("database or disk is full")
        return await real(*args, **kwargs)

    monkeypatch.setattr(server.scopes, "finish_pod", flaky)
    monkeypatch.setattr("apiserver.notifier.runner.RETRY_INITIAL_SECONDS", 0.001)
    await server.create("flaky", pods)
    status = (await server.finished("flaky"))["status"]
    assert status["counts"] == counts(total=1, succeeded=1)
    assert failures == 0


async def test_a_failure_of_the_run_itself_ends_it_failed(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = server.fake.add("db-0")

    async def broken(*args: Any) -> None:
        raise RuntimeError("bug in the run")

    monkeypatch.setattr("apiserver.fanout.run.NotificationRun._run_pods", broken)
    await server.create("broken", pods)
    status = (await server.finished("broken"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "InternalError")
    assert "RuntimeError" in status["conditions"][0]["message"]


# deletion


async def test_deleting_mid_run_stops_starts_and_rolls_back(server: Server) -> None:
    pods = server.fake.add("db-0", "db-1", "db-2")
    gate = server.fake.gates["db-1"] = asyncio.Event()
    created = await server.create("cancelled", pods, rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    await server.until(lambda: _started(server, "db-1"))
    await server.notifications.delete(NS, "cancelled")
    await server.manager.deleted(uid)
    gate.set()
    await server.idle()
    assert server.fake.started[:2] == [("db-0", QUIESCE), ("db-1", QUIESCE)]
    assert sorted(server.fake.started[2:]) == [("db-0", UNQUIESCE), ("db-1", UNQUIESCE)]
    assert await server.scopes.run(uid) is None  # bug 6: scope deleted with it
    assert await server.scopes.pods(uid) == []


async def test_deleting_a_finished_notification_deletes_its_scope(server: Server) -> None:
    pods = server.fake.add("db-0")
    created = await server.create("done", pods, rollback={"notifier": UNQUIESCE})
    await server.finished("done")
    uid = created["metadata"]["uid"]
    assert await server.scopes.run(uid) is not None
    await server.notifications.delete(NS, "done")
    await server.manager.deleted(uid)
    assert await _forgotten(server, uid)  # at once, not at the next sweep
    assert server.fake.started == [("db-0", QUIESCE)]  # succeeded: nothing to roll back


async def _forgotten(server: Server, uid: str) -> bool:
    return await server.scopes.run(uid) is None and await server.scopes.pods(uid) == []


async def test_the_start_sweep_deletes_the_scope_of_notifications_gone_meanwhile(
        tmp_path: Path) -> None:
    first = await Server.open(tmp_path / "data")
    created = await first.create("done", first.fake.add("db-0"))
    await first.finished("done")
    await first.notifications.delete(NS, "done")  # e.g. by a path that did not tell the fan-out
    await first.close()
    second = await restart(tmp_path / "data", first, ["db-0"])
    try:
        assert await _forgotten(second, created["metadata"]["uid"])
    finally:
        await second.close()


# crashes


async def test_bug3_a_resumed_abort_keeps_its_fail_fast_decision(tmp_path: Path) -> None:
    """Killed with 4 succeeded, 4 running, 12 pending: the 4 runs end Interrupted (failures),
    so under Abort none of the 12 is started after the restart."""
    data, names = tmp_path / "data", [f"db-{i:02}" for i in range(20)]
    first = await Server.open(data)
    pods = first.fake.add(*names)
    for name in names[4:8]:
        first.fake.gates[name] = asyncio.Event()
    created = await first.create("snap", pods, parallelism=4)
    uid = created["metadata"]["uid"]
    await first.until(lambda: _states(first, uid, succeeded=4, started=4))
    await first.crash()

    second = await restart(data, first, names)
    try:
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == []
        assert status["phase"] == "Failed"
        assert status["conditions"][0]["reason"] == "FailFast"
        assert status["counts"] == counts(total=20, pending=12, succeeded=4, failed=4)
        assert "Interrupted: 4" in status["conditions"][0]["message"]
    finally:
        await second.close()


async def _states(server: Server, uid: str, **wanted: int) -> bool:
    """The pods' states as a run sees them: a pending pod whose record exists (its claim) is
    started."""
    have = {state: 0 for state in wanted}
    for pod in await server.scopes.pods(uid):
        state = pod.state
        if state == scope.PENDING and await stored_record(
                server.podnotifiers, NS, record_name(pod.pod, QUIESCE, uid, pod.pod_uid)):
            state = scope.STARTED
        have[state] = have.get(state, 0) + 1
    return all(have[state] == n for state, n in wanted.items())


async def test_a_resumed_continue_runs_the_pending_pods(tmp_path: Path) -> None:
    data, names = tmp_path / "data", ["db-0", "db-1", "db-2"]
    first = await Server.open(data)
    first.fake.gates["db-1"] = asyncio.Event()
    created = await first.create("resumed", first.fake.add(*names), failurePolicy="Continue")
    await first.until(lambda: _states(first, created["metadata"]["uid"], succeeded=1,
                                      started=1))
    await first.until(lambda: _started(first, "db-1"))  # its record is stored, not only marked
    await first.crash()
    second = await restart(data, first, names)
    try:
        status = (await second.finished("resumed"))["status"]
        assert status["counts"] == counts(total=3, succeeded=2, failed=1)
        assert second.fake.started == [("db-2", QUIESCE)]  # db-1 is never run twice
    finally:
        await second.close()


async def test_a_stop_decided_before_the_crash_holds_after_it(tmp_path: Path) -> None:
    """Killed right after the first failure was stored (its run row says FailFast) while
    another run was in flight: nothing more starts after the restart."""
    data, names = tmp_path / "data", ["db-0", "db-1", "db-2", "db-3"]
    first = await Server.open(data)
    first.fake.outcomes[("db-0", QUIESCE)] = "fail"
    first.fake.gates["db-1"] = asyncio.Event()
    created = await first.create("snap", first.fake.add(*names), parallelism=2)
    uid = created["metadata"]["uid"]
    await first.until(lambda: _has_failed(first, "snap"))
    await first.crash()
    second = await restart(data, first, names)
    try:
        await second.finished("snap")
        assert second.fake.started == []
        stored = await second.scopes.run(uid)
        assert stored is not None and stored.stopped == "FailFast"
    finally:
        await second.close()


async def test_bug4_an_interrupted_rollback_runs_again_and_the_pod_state_is_kept(
        tmp_path: Path) -> None:
    """Killed while two pods were rolling back: after the restart their pod state is still
    succeeded, each rollback runs once more (attempt 2), the pods Abort had stopped are never
    quiesced, and every succeeded pod ends rolled back."""
    data, names = tmp_path / "data", ["db-0", "db-1", "db-2", "db-3", "db-4"]
    first = await Server.open(data)
    first.fake.outcomes[("db-2", QUIESCE)] = "fail"
    for name in ("db-0", "db-1"):
        first.fake.outcomes[(name, UNQUIESCE)] = "ok"
    quiesce_db1 = first.fake.gates["db-1"] = asyncio.Event()
    created = await first.create("snap", first.fake.add(*names), parallelism=2,
                                 rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    await first.until(lambda: _has_failed(first, "snap"))

    async def hold_unquiesce(pod: str, notifier: str) -> None:
        if notifier == UNQUIESCE:
            first.fake.gates[pod] = asyncio.Event()

    first.fake.on_start = hold_unquiesce
    quiesce_db1.set()
    # both rollback records are created (each attempt's claim)
    await first.until(lambda: _true(sum(n == UNQUIESCE for _, n in first.fake.started) == 2))
    await first.crash()

    second = await restart(data, first, names)
    try:
        status = (await second.finished("snap"))["status"]
        assert sorted(second.fake.started) == [("db-0", UNQUIESCE), ("db-1", UNQUIESCE)]
        assert {labels[ROLLBACK_ATTEMPT_LABEL] for labels in second.fake.labels} == {"2"}
        assert status["counts"] == counts(total=5, pending=2, succeeded=2, failed=1,
                                          rolledBack=2, mayHaveRunTwice=2)
        pods = {p.pod: p for p in await second.scopes.pods(uid)}
        assert pods["db-0"].state == pods["db-1"].state == scope.SUCCEEDED
        assert pods["db-3"].state == pods["db-4"].state == scope.PENDING
        assert (pods["db-0"].rollback, pods["db-0"].rollback_attempts) == (
            scope.ROLLBACK_DONE, 2)
        interrupted = await second.podnotifiers.get(NS, record_name(
            "db-0", UNQUIESCE, uid, "uid-db-0", 1))
        assert interrupted["status"]["reason"] == records.INTERRUPTED
    finally:
        await second.close()


async def _true(value: bool) -> bool:
    return value


async def test_a_rollback_that_finished_before_the_crash_is_not_repeated(
        tmp_path: Path) -> None:
    data, names = tmp_path / "data", ["db-0", "db-1"]
    first = await Server.open(data)
    first.fake.outcomes[("db-1", QUIESCE)] = "fail"
    await first.create("snap", first.fake.add(*names), rollback={"notifier": UNQUIESCE})
    blocked = asyncio.Event()

    async def die_before_storing(*args: Any, **kwargs: Any) -> None:
        blocked.set()
        await asyncio.Event().wait()  # the server dies here: the record finished, scope not

    first.scopes.finish_rollback = die_before_storing  # type: ignore[method-assign]
    await asyncio.wait_for(blocked.wait(), 5)
    await first.crash()
    second = await restart(data, first, names)
    try:
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == []
        assert status["counts"]["rolledBack"] == 1
    finally:
        await second.close()


async def test_a_notification_deleted_while_the_server_was_down_is_rolled_back(
        tmp_path: Path) -> None:
    data, names = tmp_path / "data", ["db-0", "db-1", "db-2"]
    first = await Server.open(data)
    first.fake.gates["db-1"] = asyncio.Event()
    created = await first.create("snap", first.fake.add(*names),
                                 rollback={"notifier": UNQUIESCE})
    uid = created["metadata"]["uid"]
    await first.until(lambda: _states(first, uid, succeeded=1, started=1))
    await first.until(lambda: _started(first, "db-1"))  # its record is stored, not only marked
    await first.notifications.delete(NS, "snap")  # the server dies before it hears of it
    await first.crash()
    second = await restart(data, first, names)
    try:
        await second.until(lambda: _forgotten(second, uid))
        assert second.fake.started == [("db-0", UNQUIESCE)]  # db-1 was Interrupted: failed
    finally:
        await second.close()


async def test_a_notification_whose_scope_was_never_recorded_fails_clearly(
        tmp_path: Path) -> None:
    """Bug 6: the server died between storing the Notification and writing its scope."""
    data = tmp_path / "data"
    first = await Server.open(data)
    first.fake.add("db-0")
    await first.notifications.create({
        "apiVersion": records.API_VERSION, "kind": "Notification",
        "metadata": {"namespace": NS, "name": "lost"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE},
        "status": {"phase": records.PENDING}})
    await first.crash()
    second = await restart(data, first, ["db-0"])
    try:
        status = (await second.get("lost"))["status"]
        assert status["phase"] == "Failed"
        assert status["conditions"][0]["reason"] == "ScopeNotRecorded"
        assert "create it again" in status["conditions"][0]["message"]
        assert second.fake.started == []
    finally:
        await second.close()


async def test_when_the_scope_cannot_be_stored_the_notification_is_removed(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    async def full(*args: Any) -> None:
        raise OSError("database or disk is full")

    monkeypatch.setattr(server.scopes, "create", full)
    with pytest.raises(OSError):
        await server.create("never", server.fake.add("db-0"))
    assert (await server.notifications.list(NS)).items == []


async def test_a_failing_status_write_is_retried_not_a_failure(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    real = server.notifications.guaranteed_update
    failures = 3

    async def flaky(*args: Any) -> dict[str, Any]:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError("database or disk is full")
        return await real(*args)

    monkeypatch.setattr("apiserver.notifier.runner.RETRY_INITIAL_SECONDS", 0.001)
    monkeypatch.setattr(server.notifications, "guaranteed_update", flaky)
    await server.create("flaky-status", server.fake.add("db-0"))
    status = (await server.finished("flaky-status"))["status"]
    assert (status["phase"], status["counts"]["succeeded"]) == ("Succeeded", 1)
    assert failures == 0


async def test_a_scope_interrupted_before_its_run_fails_clearly_and_is_deleted(
        tmp_path: Path) -> None:
    """A scope whose pod sets were all written when the server died (its run not yet) was not
    recorded: the Notification fails ScopeNotRecorded, no pod runs, and its pod sets go."""
    data = tmp_path / "data"
    first = await Server.open(data)
    created = await first.notifications.create({
        "apiVersion": records.API_VERSION, "kind": "Notification",
        "metadata": {"namespace": NS, "name": "legacy"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": QUIESCE,
                 "policy": "PreExistingPods", "parallelism": 1, "failurePolicy": "Abort",
                 "requestedBy": {"username": CREATOR.name, "uid": CREATOR.uid,
                                 "groups": CREATOR.groups}},
        "status": {"phase": records.RUNNING}})
    runs = SqliteObjectStore(first.database, NOTIFICATION_RUNS)

    async def died(*args: Any, **kwargs: Any) -> None:
        raise OSError("killed")

    runs.create = died  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await ScopeStore(runs, SqliteObjectStore(first.database, NOTIFICATION_POD_SETS),
                         clock=first.clock).create(created, [("db-0", "uid-db-0")])
    await first.crash()
    second = await restart(data, first, ["db-0"])
    try:
        status = (await second.finished("legacy"))["status"]
        assert (status["phase"], status["conditions"][0]["reason"]) == (
            "Failed", "ScopeNotRecorded")
        assert second.fake.started == []
        assert (await SqliteObjectStore(second.database, NOTIFICATION_POD_SETS).list(
            NS)).items == []
    finally:
        await second.close()


async def test_a_decided_run_whose_pod_sets_are_gone_is_forgotten_without_reading_them(
        tmp_path: Path) -> None:
    """A forget interrupted after the pod sets (a Succeeded run whose Notification was deleted)
    leaves a run with an outcome and no pods: a new leader rebuilds its locks without reading
    them (it would wait for them, and fail every pass) and forgets the run."""
    data = tmp_path / "data"
    first = await Server.open(data, lead=False)
    uid = (await first.create("gone", first.fake.add("db-0")))["metadata"]["uid"]
    await first.scopes.decide(uid, scope.OUTCOME_SUCCEEDED, "PodsSucceeded")
    await SqliteObjectStore(first.database, NOTIFICATION_POD_SETS).delete_collection(
        NS, field_selector=f"spec.notificationUID={uid}")
    await first.notifications.delete(NS, "gone")
    await first.crash()
    second = await Server.open(data)
    try:
        async def forgotten() -> bool:
            return not await second.scopes.runs()

        await second.until(forgotten)
        assert second.fake.started == []
    finally:
        await second.close()


def finished_record(pod: str, uid: str) -> dict[str, Any]:
    """The Succeeded record of pod's quiesce in the run of Notification `uid`."""
    return {"apiVersion": records.API_VERSION, "kind": "PodNotifier",
            "metadata": {"namespace": NS, "name": record_name(pod, QUIESCE, uid, f"uid-{pod}")},
            "spec": {"podName": pod, "notifier": QUIESCE},
            "status": {"phase": records.SUCCEEDED, "reason": records.COMPLETED}}


@pytest.mark.parametrize("older_release", [False, True])
async def test_a_pod_is_claimed_by_its_record_alone(tmp_path: Path, older_release: bool) -> None:
    """The leader stopped after db-0's record was created (and finished) and before its result
    was in the scope, and before db-1's record was created: the next leader takes db-0's
    result from its record without running it, and runs db-1 exactly once. The same when an
    older release had marked both pods started in their pod set before creating records."""
    data, names = tmp_path / "data", ["db-0", "db-1"]
    first = await Server.open(data, lead=False)
    first.fake.add(*names)
    created = await first.create("snap", [("db-0", "uid-db-0"), ("db-1", "uid-db-1")])
    uid = created["metadata"]["uid"]
    await first.podnotifiers.create_bounded(finished_record("db-0", uid), max_per_pod=10)

    def marked_started(pod_set: dict[str, Any]) -> dict[str, Any]:
        for entry in pod_set["pods"]:
            entry.update(state=scope.STARTED,
                         record=record_name(entry["pod"], QUIESCE, uid, entry["podUID"]))
        return pod_set

    if older_release:
        await SqliteObjectStore(first.database, NOTIFICATION_POD_SETS).guaranteed_update(
            NS, f"{uid}-0", marked_started)
    await first.crash()

    second = await restart(data, first, names)
    try:
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == [("db-1", QUIESCE)]
        assert status["counts"] == counts(total=2, succeeded=2)
        assert [p.record for p in await second.scopes.pods(uid)] == [
            record_name(pod, QUIESCE, uid, f"uid-{pod}") for pod in names]
    finally:
        await second.close()


@pytest.mark.parametrize("refusal", ["AlreadyExists", "RunConflict"])
async def test_a_create_refused_for_the_pods_own_record_takes_that_records_result(
        tmp_path: Path, refusal: str) -> None:
    """db-0's record was created by a leader that stopped, and this leader's store did not
    have it yet when its run began (a cache that lags): its own create is refused for that
    very record (the name exists, or it is the notifier's unfinished run on the pod), and the
    pod takes that record's result instead of failing or running again."""
    data = tmp_path / "data"
    first = await Server.open(data, lead=False)
    pods = first.fake.add("db-0")
    created = await first.create("snap", pods)
    uid = created["metadata"]["uid"]
    name = record_name("db-0", QUIESCE, uid, "uid-db-0")
    await first.crash()

    second = await restart(data, first, ["db-0"], lead=False)
    real_get, real_read = second.podnotifiers.get, second.podnotifiers.consistent_read
    landed = hidden = False

    async def lagging_get(namespace: str, record: str) -> dict[str, Any]:
        """The late create lands at the first read of the record, and stays out of reads
        until a consistent read catches up with it."""
        nonlocal landed, hidden
        if record == name and not landed:
            landed = hidden = True
            await second.podnotifiers.create_bounded(finished_record("db-0", uid),
                                                     max_per_pod=10)
        if record == name and hidden:
            raise NotFound(f"{record} not found", resource=PODNOTIFIERS, name=record)
        return await real_get(namespace, record)

    async def catching_up(namespace: str | None, record: str = "") -> None:
        nonlocal hidden
        hidden = False
        await real_read(namespace, record)

    second.podnotifiers.get = lagging_get  # type: ignore[method-assign]
    second.podnotifiers.consistent_read = catching_up  # type: ignore[method-assign]
    if refusal == "RunConflict":
        second.fake.outcomes[("db-0", QUIESCE)] = RunConflict(NS, "db-0", QUIESCE, name,
                                                              held=False)
    try:
        await second.manager.lead()
        status = (await second.finished("snap"))["status"]
        assert second.fake.started == []
        assert status["counts"] == counts(total=1, succeeded=1)
    finally:
        await second.close()


async def test_pods_the_servers_capacity_refuses_wait_for_it_and_run_once(
        server: Server) -> None:
    """A Notification's parallelism may exceed the server's --max-concurrent-executions: a
    start refused for it (nothing stored, nothing run) is asked again, so no pod fails for
    it and none runs twice; a rollback refused for it waits too."""
    pods = server.fake.add("db-0", "db-1", "db-2", "db-3")
    for pod in ("db-0", "db-2"):
        server.fake.at_capacity[(pod, QUIESCE)] = 3
    server.fake.outcomes[("db-3", QUIESCE)] = "fail"
    server.fake.at_capacity[("db-1", UNQUIESCE)] = 2
    await server.create("snap", pods, parallelism=4, failurePolicy="Continue",
                        rollback={"notifier": UNQUIESCE})
    status = (await server.finished("snap"))["status"]
    assert status["counts"] == counts(total=4, succeeded=3, failed=1, rolledBack=3)
    assert sorted(server.fake.started) == sorted(
        [(pod, QUIESCE) for pod in ("db-0", "db-1", "db-2", "db-3")]
        + [(pod, UNQUIESCE) for pod in ("db-0", "db-1", "db-2")])
    assert server.fake.capacity_refusals == 8


async def test_a_pod_waiting_for_capacity_never_starts_once_the_run_stopped(
        server: Server) -> None:
    """Under Abort, db-0 fails while db-1 waits for the server's capacity: db-1 is never
    started (it stays pending), as no pod starts after the run stopped."""
    pods = server.fake.add("db-0", "db-1")
    gate = server.fake.gates["db-0"] = asyncio.Event()
    server.fake.outcomes[("db-0", QUIESCE)] = "fail"
    server.fake.at_capacity[("db-1", QUIESCE)] = 10**6
    await server.create("snap", pods, parallelism=2)
    await server.until(lambda: _true(server.fake.capacity_refusals >= 2))
    gate.set()
    status = (await server.finished("snap"))["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "FailFast")
    assert status["counts"] == counts(total=2, pending=1, failed=1)
    assert server.fake.started == [("db-0", QUIESCE)]


async def test_a_run_conflict_with_another_record_fails_the_pod(server: Server) -> None:
    """A RunConflict naming a record that is not the pod's own (a direct notify of the same
    notifier) is that pod's failure, not a claim to take over."""
    pods = server.fake.add("db-0")
    server.fake.outcomes[("db-0", QUIESCE)] = RunConflict(NS, "db-0", QUIESCE, "by-hand",
                                                          held=False)
    await server.create("snap", pods, failurePolicy="Continue")
    status = (await server.finished("snap"))["status"]
    assert status["counts"] == counts(total=1, failed=1)
    assert "by-hand" in status["conditions"][0]["message"]
