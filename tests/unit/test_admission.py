"""Admission.start: the server-wide cap on runs in flight comes before the per-pod bounds."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.api.status import status_body
from apiserver.notifier import admission, request
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.errors import InvalidSelection, TooManyRuns


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
    record={"metadata": {"namespace": "ns", "generateName": "p-q-"}, "spec": {}, "status": {}},
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
    assert plan.pod_not_running == ""


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
