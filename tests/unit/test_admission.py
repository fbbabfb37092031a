"""Admission.start: the server-wide cap on runs in flight comes before the per-pod bounds;
Admission.check (a dry run) makes every check start makes, through the same code, and stores
and starts nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from apiserver.api.status import status_body
from apiserver.notifier import admission, request
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.errors import InvalidSelection, RunConflict, TooManyRuns
from apiserver.registry.errors import TooLarge
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore


class Store:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def create_bounded(self, record: dict[str, Any], *, max_per_pod: int) -> Any:
        self.created.append(record)
        return {**record, "metadata": {**record["metadata"], "name": "r-1"}}


class Runner:
    def __init__(self, capacity: bool) -> None:
        self.capacity = capacity
        self.started: list[Any] = []

    def has_capacity(self) -> bool:
        return self.capacity

    def start(self, plan: Any) -> None:
        self.started.append(plan)


def admission_with(capacity: bool) -> tuple[admission.Admission, Store, Runner]:
    store, runner = Store(), Runner(capacity)
    limits = admission.Limits(max_timeout_seconds=600, output_tail_bytes=4096,
                              default_ttl_seconds_after_finished=3600, max_records_per_pod=10,
                              max_concurrent_executions=2)
    built = admission.Admission(pods=None, trust=None, records=store,  # type: ignore[arg-type]
                                runner=runner, limits=limits)  # type: ignore[arg-type]
    return built, store, runner


ADMITTED = admission.Admitted(
    record={"metadata": {"namespace": "ns", "generateName": "p-q-"},
            "spec": {"requestedBy": {"username": "alice"}}, "status": {}},
    pod={"metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
         "status": {"phase": "Running"}},
    containers=(), timeouts={}, tail_bytes=4096)


async def test_full_server_answers_429_and_stores_nothing() -> None:
    admit, store, runner = admission_with(capacity=False)
    with pytest.raises(TooManyRuns) as raised:
        await admit.start(ADMITTED)
    assert raised.value.code == 429
    assert status_body(raised.value)["details"]["retryAfterSeconds"] >= 1
    assert "maximum of 2 notifiers at once" in status_body(raised.value)["message"]
    assert store.created == []
    assert runner.started == []


async def test_room_stores_the_record_and_starts_its_run() -> None:
    admit, _, runner = admission_with(capacity=True)
    created = await admit.start(ADMITTED)
    assert created["metadata"]["name"] == "r-1"
    (plan,) = runner.started
    assert (plan.namespace, plan.record, plan.pod, plan.pod_uid) == ("ns", "r-1", "p", "u1")
    assert (plan.pod_not_running, plan.requester) == ("", "alice")


def stored_admission(database: SqliteDatabase, capacity: bool = True
                     ) -> tuple[admission.Admission, PodNotifierStore, Runner]:
    """An Admission over real PodNotifier records (SQLite, a 4 KiB size cap), K = 2."""
    records = PodNotifierStore(
        SqliteObjectStore(database, PODNOTIFIERS, max_object_bytes=4096), "replica-0")
    runner = Runner(capacity)
    limits = admission.Limits(max_timeout_seconds=600, output_tail_bytes=4096,
                              default_ttl_seconds_after_finished=3600, max_records_per_pod=2,
                              max_concurrent_executions=2)
    built = admission.Admission(pods=None, trust=None, records=records,  # type: ignore[arg-type]
                                runner=runner, limits=limits)  # type: ignore[arg-type]
    return built, records, runner


def admitted(notifier: str = "quiesce", **labels: str) -> admission.Admitted:
    return admission.Admitted(
        record={"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
                "metadata": {"namespace": "ns", "generateName": f"p-{notifier}-",
                             "labels": labels},
                "spec": {"podName": "p", "podUID": "u1", "notifier": notifier,
                         "requestedBy": {"username": "alice"}},
                "status": {"phase": "Running"}},
        pod=ADMITTED.pod, containers=(), timeouts={}, tail_bytes=4096)


async def test_a_dry_run_refuses_what_start_refuses_and_stores_nothing(
        database: SqliteDatabase) -> None:
    admit, records, runner = stored_admission(database)
    big = admitted(**{f"label-{i}": "v" * 60 for i in range(60)})
    with pytest.raises(TooLarge) as dry:
        await admit.check(big)
    with pytest.raises(TooLarge) as real:
        await admit.start(big)
    generated = re.compile(r'"p-quiesce-\w{5}"')
    assert dry.value.code == real.value.code == 413
    assert generated.sub("NAME", dry.value.message) == generated.sub("NAME", real.value.message)

    await admit.start(admitted())
    with pytest.raises(RunConflict):
        await admit.check(admitted())
    await admit.start(admitted("flush"))
    with pytest.raises(TooManyRuns) as bounded:
        await admit.check(admitted("reload"))
    assert "2 or more unfinished notifier records" in bounded.value.message
    full, _, _ = stored_admission(database, capacity=False)
    with pytest.raises(TooManyRuns, match="maximum of 2 notifiers at once"):
        await full.check(admitted("other"))
    assert len(runner.started) == 2
    assert len((await records.list("ns")).items) == 2


async def test_a_dry_run_answers_the_record_with_a_name(database: SqliteDatabase) -> None:
    admit, records, runner = stored_admission(database)
    checked = await admit.check(admitted())
    assert checked["metadata"]["name"].startswith("p-quiesce-")
    assert (await records.list("ns")).items == [] and runner.started == []


def notify_request(**overrides: Any) -> request.NotifyRequest:
    fields: dict[str, Any] = {"name": "", "generate_name": "", "labels": {},
                              "notifier": "quiesce", "containers": None,
                              "timeout_seconds": None, "ttl_seconds_after_finished": None}
    return request.NotifyRequest(**{**fields, **overrides})


POD = {"metadata": {"namespace": "ns", "name": "db-0", "uid": "u1", "annotations": {
    ANNOTATION: '{"db": [{"name": "quiesce", "action": {"signal": "SIGHUP"}}]}'}},
    "spec": {"containers": [{"name": "db"}, {"name": "side"}]}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(("containers", "field", "problem"), [
    (["nope"], "spec.containers[0]", 'Not found: "nope": pod db-0 has no such container'),
    (["side"], "spec.containers", 'container "side" does not declare notifier "quiesce"'),
])
def test_selection_422_names_the_record_and_each_field_once(
        containers: list[str], field: str, problem: str) -> None:
    admit, _, _ = admission_with(capacity=True)
    with pytest.raises(InvalidSelection) as raised:
        admit.plan(POD, notify_request(generate_name="nightly-", containers=containers))
    body = status_body(raised.value)
    assert body["details"]["kind"] == "PodNotifier"
    assert body["details"]["name"] == "nightly-"
    (cause,) = body["details"]["causes"]
    assert cause["field"] == field
    assert cause["message"].startswith(problem)
    assert body["message"].startswith(
        f'PodNotifier.notifier.x-k8s.io "nightly-" is invalid: {field}: {problem}')


async def test_a_conflict_names_the_record_and_a_held_one_how_to_release_it(
        database: SqliteDatabase) -> None:
    admit, records, _ = stored_admission(database)
    first = await admit.start(admitted())
    name = first["metadata"]["name"]
    with pytest.raises(RunConflict) as running:
        await admit.start(admitted())
    assert running.value.record == name and not running.value.held
    assert running.value.message == (
        f'notifier "quiesce" is already running on pod "p" (podnotifiers.notifier.x-k8s.io '
        f'"{name}"); wait for it to finish: kubectl -n ns get podnotifier {name} -w')
    assert status_body(running.value)["details"] == {
        "name": name, "group": "notifier.x-k8s.io", "kind": "podnotifiers"}

    await records.guaranteed_update("ns", name, lambda obj: {
        **obj, "status": {**obj["status"], "phase": "Held"}})
    for attempt in (admit.start, admit.check):
        with pytest.raises(RunConflict) as held:
            await attempt(admitted())
        assert held.value.code == 409 and held.value.held
        assert held.value.message == (
            f'notifier "quiesce" is held on pod "p" by podnotifiers.notifier.x-k8s.io "{name}" '
            f"until it is released; release it with: kubectl notify -n ns release "
            f"podnotifier/{name} (or: kubectl create --raw /apis/notifier.x-k8s.io/v1alpha1/"
            f"namespaces/ns/podnotifiers/{name}/release -f /dev/null)")
    assert len((await records.list("ns")).items) == 1
