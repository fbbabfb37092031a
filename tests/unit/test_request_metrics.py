"""HTTP request metrics (apiserver_request_total, apiserver_request_duration_seconds) with
labels from fixed sets, the request log's levels (polls at debug), and the process and Python
runtime series; no ``*_created`` series in either exposition format."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from prometheus_client.parser import text_string_to_metric_families

from apiserver.authz.attributes import request_attributes
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from apiserver.serving.metrics import Metrics
from apiserver.serving.request_labels import POLLED_PATHS, RequestLabels, request_labels
from tests.support.access import AllowAll

API = "/apis/notifier.x-k8s.io/v1alpha1"
PODNOTIFIERS = f"{API}/namespaces/ns/podnotifiers"


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", PODNOTIFIERS, "", ("list", "podnotifiers", "")),
    ("GET", PODNOTIFIERS, "watch=true", ("watch", "podnotifiers", "")),
    ("GET", f"{PODNOTIFIERS}/x", "", ("get", "podnotifiers", "")),
    ("PATCH", f"{PODNOTIFIERS}/x", "", ("patch", "podnotifiers", "")),
    ("DELETE", PODNOTIFIERS, "", ("deletecollection", "podnotifiers", "")),
    ("POST", f"{PODNOTIFIERS}/x/release", "", ("create", "podnotifiers", "release")),
    ("POST", f"{API}/namespaces/ns/pods/db-0/notify", "", ("create", "pods", "notify")),
    ("GET", f"{API}/notifications", "", ("list", "notifications", "")),
    ("POST", f"{API}/namespaces/ns/notifications/n/release", "",
     ("create", "notifications", "release")),
    ("GET", "/apis", "", ("get", "", "/apis")),
    ("GET", "/apis/notifier.x-k8s.io", "", ("get", "", "/apis/notifier.x-k8s.io")),
    ("GET", API, "", ("get", "", API)),
    ("GET", "/openapi/v2", "", ("get", "", "/openapi/v2")),
    ("GET", f"/openapi/v3{API}", "hash=1", ("get", "", f"/openapi/v3{API}")),
    ("GET", "/readyz", "verbose", ("get", "", "/readyz")),
    ("GET", "/metrics", "", ("get", "", "/metrics")),
    # Nothing the caller invents becomes a label value.
    ("GET", "/random-4f2a/path", "", ("get", "", "other")),
    ("GET", "/apis/", "", ("get", "", "other")),
    ("GET", "/apis/other.example.com/v1/namespaces/ns/widgets", "", ("list", "", "other")),
    ("GET", f"{API}/namespaces/ns/widgets-4f2a", "", ("list", "", "other")),
    ("GET", f"{PODNOTIFIERS}/x/bogus-4f2a", "", ("get", "", "other")),
    ("GET", "/apis/notifier.x-k8s.io/v9/namespaces/ns/podnotifiers", "", ("list", "", "other")),
    ("BREW-4F2A", PODNOTIFIERS, "", ("other", "podnotifiers", "")),
    ("BREW-4F2A", "/healthz", "", ("other", "", "/healthz")),
])
def test_labels_come_from_fixed_sets(method: str, path: str, query: str,
                                     expected: tuple[str, str, str]) -> None:
    assert request_labels(request_attributes(method, path, query)) == RequestLabels(*expected)


def _app(metrics: Metrics) -> FastAPI:
    router = APIRouter()

    @router.get(f"{API}/namespaces/{{namespace}}/podnotifiers")
    async def listed(namespace: str) -> dict[str, Any]:
        return {"items": []}

    @router.get(f"{API}/namespaces/{{namespace}}/podnotifiers/{{name}}")
    async def boom(namespace: str, name: str, request: Request) -> dict[str, Any]:
        raise RuntimeError("a bug")

    return create_app(authenticator=AllowAll(), authorizer=AllowAll(),  # type: ignore[arg-type]
                      readiness=Readiness(), resource_router=router, metrics=metrics)


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                             base_url="https://notifier.test")


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def test_requests_are_counted_and_timed_by_verb_resource_subresource_and_code() -> None:
    metrics = Metrics()
    async with _client(_app(metrics)) as client:
        assert (await client.get(f"{PODNOTIFIERS}")).status_code == 200
        assert (await client.get(f"{PODNOTIFIERS}")).status_code == 200
        assert (await client.get(f"{PODNOTIFIERS}/x")).status_code == 500
        assert (await client.get("/apis")).status_code == 200
        assert (await client.get("/healthz")).status_code == 200
        for attempt in range(3):
            assert (await client.get(f"/random-{attempt}/x")).status_code == 404
        scraped = (await client.get("/metrics")).text
    counted = {tuple(sorted(sample.labels.items())): sample.value
               for sample in _families(scraped)["apiserver_request"].samples
               if sample.name == "apiserver_request_total"}
    assert counted == {
        (("code", "200"), ("resource", "podnotifiers"), ("subresource", ""), ("verb", "list")): 2,
        (("code", "500"), ("resource", "podnotifiers"), ("subresource", ""), ("verb", "get")): 1,
        (("code", "200"), ("resource", ""), ("subresource", "/apis"), ("verb", "get")): 1,
        (("code", "200"), ("resource", ""), ("subresource", "/healthz"), ("verb", "get")): 1,
        (("code", "404"), ("resource", ""), ("subresource", "other"), ("verb", "get")): 3,
    }
    value = metrics.registry.get_sample_value
    listed = {"verb": "list", "resource": "podnotifiers", "subresource": ""}
    assert value("apiserver_request_duration_seconds_count", listed) == 2
    assert value("apiserver_request_duration_seconds_bucket", {**listed, "le": "600.0"}) == 2
    assert "random" not in scraped


async def test_polls_are_logged_at_debug_and_other_requests_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    polls = ["/apis", "/apis/notifier.x-k8s.io", API, "/openapi/v2", "/openapi/v3",
             f"/openapi/v3{API}", "/healthz", "/livez", "/readyz", "/metrics"]
    assert set(polls) == POLLED_PATHS
    others = [PODNOTIFIERS, "/random/x"]
    with caplog.at_level(logging.DEBUG, logger="apiserver.serving.access"):
        async with _client(_app(Metrics())) as client:
            for path in polls + others:
                await client.get(path)
    levels = {record.path: record.levelno for record in caplog.records
              if record.name == "apiserver.serving.access" and record.getMessage() == "request"}
    assert levels == {**{path: logging.DEBUG for path in polls},
                      **{path: logging.INFO for path in others}}


async def test_process_and_python_runtime_series_are_served_without_created_series() -> None:
    async with _client(_app(Metrics())) as client:
        await client.get(PODNOTIFIERS)
        text = (await client.get("/metrics")).text
        open_metrics = (await client.get("/metrics", headers={
            "accept": "application/openmetrics-text;version=1.0.0"})).text
    families = _families(text)
    for name in ("process_cpu_seconds", "process_resident_memory_bytes",
                 "process_start_time_seconds", "process_open_fds", "python_info",
                 "python_gc_objects_collected", "python_gc_collections"):
        assert name in families, name
    assert families["python_info"].samples[0].labels["implementation"]
    assert "apiserver_request_total{" in text
    for exposition in (text, open_metrics):
        assert "_created" not in exposition
