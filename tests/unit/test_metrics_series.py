"""The watch, cache and store series: what feeds them and what a scrape shows."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.handlers.watch_response import Watches
from apiserver.registry.errors import NotFound
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.selectors import FieldSelector, LabelSelector
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.timed_store import OPERATIONS, TimedObjectStore
from apiserver.registry.watch import Watch, WatchFilter
from apiserver.serving.metrics import Metrics
from tests.unit.test_metrics import samples


def store_watch() -> Watch:
    return Watch([], WatchFilter(None, LabelSelector(), FieldSelector()))


def record(name: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": name},
            "spec": {"podName": "web-0", "notifier": "n"}, "status": {"phase": "Pending"}}


async def test_watches_are_gauged_by_resource_while_held():
    metrics, watches = Metrics(), Watches()
    metrics.watch_watches(watches.count, ("podnotifiers", "notifications"))

    def scraped() -> dict[str, float]:
        got = samples(metrics.exposition()[0].decode())
        return {resource: got[("container_notifier_watches", (("resource", resource),))]
                for resource in ("podnotifiers", "notifications")}

    assert scraped() == {"podnotifiers": 0, "notifications": 0}
    with watches.holding(store_watch(), 60, "podnotifiers"), \
            watches.holding(store_watch(), 60, "podnotifiers"), \
            watches.holding(store_watch(), 60, "notifications"):
        assert scraped() == {"podnotifiers": 2, "notifications": 1}
    with pytest.raises(RuntimeError), watches.holding(store_watch(), 60, "notifications"):
        assert scraped() == {"podnotifiers": 0, "notifications": 1}
        raise RuntimeError("stream failed")
    assert scraped() == {"podnotifiers": 0, "notifications": 0}


def test_caches_are_read_at_scrape_time():
    metrics = Metrics()
    state = {"pod-cache": False, "owner-templates": True}
    metrics.watch_caches({name: (lambda name=name: state[name]) for name in state})
    value = metrics.registry.get_sample_value
    assert value("container_notifier_cache_synced", {"cache": "pod-cache"}) == 0
    assert value("container_notifier_cache_synced", {"cache": "owner-templates"}) == 1
    state["pod-cache"] = True
    assert value("container_notifier_cache_synced", {"cache": "pod-cache"}) == 1


def test_leader_gauge_follows_the_elector():
    metrics = Metrics()
    leading = [False]
    metrics.watch_leader(lambda: leading[0])
    assert metrics.registry.get_sample_value("container_notifier_leader") == 0
    leading[0] = True
    assert metrics.registry.get_sample_value("container_notifier_leader") == 1


async def test_timed_store_reads_the_current_object_through_the_store_it_wraps(
        database: SqliteDatabase) -> None:
    """Not through its own get: on the Kubernetes backend get reads the cache, get_current
    kube-apiserver."""

    class Live(SqliteObjectStore):
        async def get_current(self, namespace: str, name: str) -> dict[str, Any]:
            return {"live": [namespace, name]}

    metrics = Metrics()
    store = TimedObjectStore(Live(database, PODNOTIFIERS), metrics)

    assert await store.get_current("ns", "a") == {"live": ["ns", "a"]}
    assert metrics.registry.get_sample_value(
        "container_notifier_store_operation_duration_seconds_count",
        {"operation": "get", "resource": "podnotifiers"}) == 1


async def test_timed_store_observes_each_operation_by_resource_errors_included(
        database: SqliteDatabase):
    metrics = Metrics()
    store = TimedObjectStore(SqliteObjectStore(database, PODNOTIFIERS), metrics)
    try:
        assert store.resource is PODNOTIFIERS
        created = await store.create(record("a"))
        await store.create(record("b"))
        assert (await store.get("ns", "a"))["metadata"]["uid"] == created["metadata"]["uid"]
        with pytest.raises(NotFound):
            await store.get("ns", "missing")
        await store.consistent_read("ns", "a")
        await store.guaranteed_update("ns", "a", lambda obj: obj)
        assert [o["metadata"]["name"] for o in (await store.list("ns")).items] == ["a", "b"]
        await store.watch("ns")
        await store.delete("ns", "a")
        await store.delete_collection("ns")
    finally:
        store.close()

    def count(operation: str) -> float | None:
        return metrics.registry.get_sample_value(
            "container_notifier_store_operation_duration_seconds_count",
            {"operation": operation, "resource": "podnotifiers"})

    assert {operation: count(operation) for operation in OPERATIONS} == {
        "get": 2, "list": 1, "watch": 1, "create": 2, "update": 1, "delete": 1,
        "deletecollection": 1, "consistentread": 1}
    total = metrics.registry.get_sample_value(
        "container_notifier_store_operation_duration_seconds_sum",
        {"operation": "create", "resource": "podnotifiers"})
    assert total is not None and total > 0


def test_serving_certificate_expiry_is_read_at_scrape_time():
    metrics = Metrics()
    value = metrics.registry.get_sample_value
    ca_name = "container_notifier_serving_ca_expiration_timestamp_seconds"
    cert_name = "container_notifier_serving_certificate_expiration_timestamp_seconds"
    expiry = {"cert": 100.0, "ca": 500.0}
    metrics.watch_serving_certificate(lambda: expiry["cert"])
    assert (value(cert_name), value(ca_name)) == (100.0, 0.0)  # files mode: no CA known
    metrics.watch_serving_certificate(lambda: expiry["cert"], lambda: expiry["ca"])
    expiry["cert"] = 200.0
    assert (value(cert_name), value(ca_name)) == (200.0, 500.0)


def test_refused_serving_certificate_secrets_are_counted_at_scrape_time():
    metrics = Metrics()
    value = metrics.registry.get_sample_value
    name = "container_notifier_serving_certificate_secrets_refused_total"
    assert value(name) == 0  # files mode, or before the bootstrap is watched
    refused = {"count": 0}
    metrics.watch_serving_certificate(lambda: 0.0, lambda: 0.0, lambda: refused["count"])
    refused["count"] = 2
    assert value(name) == 2
    assert f"{name} 2.0" in metrics.exposition()[0].decode()
