"""admission.start: the server-wide cap on runs in flight comes before the per-pod bounds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from apiserver.api.status import status_body
from apiserver.errors import APIError
from apiserver.notifier import admission


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


def services(capacity: bool) -> SimpleNamespace:
    options = SimpleNamespace(max_concurrent_executions=2, max_records_per_pod=10)
    return SimpleNamespace(options=options, runner=Runner(capacity), podnotifiers=Store())


ADMITTED = admission.Admitted(
    record={"metadata": {"namespace": "ns", "generateName": "p-q-"}, "spec": {}, "status": {}},
    pod={"metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
         "status": {"phase": "Running"}},
    containers=(), timeouts={}, tail_bytes=4096)


async def test_full_server_answers_429_and_stores_nothing() -> None:
    svc = services(capacity=False)
    with pytest.raises(APIError) as raised:
        await admission.start(svc, ADMITTED)  # type: ignore[arg-type]
    assert raised.value.code == 429
    assert status_body(raised.value)["details"]["retryAfterSeconds"] >= 1
    assert "maximum of 2 notifiers at once" in status_body(raised.value)["message"]
    assert svc.podnotifiers.created == []
    assert svc.runner.started == []


async def test_room_stores_the_record_and_starts_its_run() -> None:
    svc = services(capacity=True)
    created = await admission.start(svc, ADMITTED)  # type: ignore[arg-type]
    assert created["metadata"]["name"] == "r-1"
    (plan,) = svc.runner.started
    assert (plan.namespace, plan.record, plan.pod, plan.pod_uid) == ("ns", "r-1", "p", "u1")
    assert plan.pod_not_running == ""
