"""/metrics: the Metrics registry, the review counters read at scrape time, the route's access
control, and the wiring of build_app."""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

import httpx
from fastapi import APIRouter
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from apiserver.authn.authenticator import Authenticator
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustStore
from apiserver.authz.sar import SubjectAccessReviewAuthorizer
from apiserver.config import SQLITE, ServerOptions
from apiserver.handlers.watch_response import Watches
from apiserver.kube import Connection, KubeClient
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.server import build_app
from apiserver.serving.app import create_app
from apiserver.serving.health import Draining, Readiness
from apiserver.serving.metrics import Metrics
from apiserver.serving.tls import ServingTLS
from apiserver.ttlcache import ReviewCounters

SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN = {"authorization": "Bearer good"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_podnotifier_runs_are_counted_timed_and_tracked_in_flight():
    metrics = Metrics()
    value = metrics.registry.get_sample_value
    metrics.run_started()
    metrics.run_started()
    assert value("container_notifier_podnotifiers_in_flight") == 2
    assert value("container_notifier_podnotifiers_started_total") == 2
    metrics.run_finished("Succeeded", "Completed", 0.3)
    metrics.run_finished("Failed", "Timeout", 45.0)
    assert value("container_notifier_podnotifiers_in_flight") == 0
    assert value("container_notifier_podnotifiers_started_total") == 2
    assert value("container_notifier_podnotifiers_finished_total",
                 {"phase": "Succeeded", "reason": "Completed"}) == 1
    assert value("container_notifier_podnotifiers_finished_total",
                 {"phase": "Failed", "reason": "Timeout"}) == 1
    assert value("container_notifier_podnotifier_duration_seconds_count") == 2
    assert value("container_notifier_podnotifier_duration_seconds_sum") == 45.3
    assert value("container_notifier_podnotifier_duration_seconds_bucket", {"le": "0.5"}) == 1
    assert value("container_notifier_podnotifier_duration_seconds_bucket", {"le": "60.0"}) == 2


def test_notifications_are_counted_by_phase():
    metrics = Metrics()
    metrics.window_read()
    assert metrics.registry.get_sample_value("container_notifier_window_reads_total") == 1
    metrics.notification_finished("Succeeded")
    metrics.notification_finished("Failed")
    metrics.notification_finished("Failed")
    value = metrics.registry.get_sample_value
    assert value("container_notifier_notifications_finished_total", {"phase": "Succeeded"}) == 1
    assert value("container_notifier_notifications_finished_total", {"phase": "Failed"}) == 2


def test_review_counters_are_read_at_scrape_time():
    authorization, authentication = ReviewCounters(), ReviewCounters()
    metrics = Metrics()
    metrics.watch_reviews(authorization=authorization, authentication=authentication)
    before = samples(metrics.exposition()[0].decode())
    assert before[("container_notifier_authorization_reviews_total", ())] == 0
    authorization.reviews, authorization.cache_hits = 3, 7
    authorization.cache_misses, authorization.errors = 3, 1
    authentication.reviews, authentication.cache_hits = 2, 5
    authentication.cache_misses, authentication.errors = 2, 1
    after = samples(metrics.exposition()[0].decode())
    expected = {
        "container_notifier_authorization_reviews_total": 3,
        "container_notifier_authorization_cache_hits_total": 7,
        "container_notifier_authorization_cache_misses_total": 3,
        "container_notifier_authorization_review_errors_total": 1,
        "container_notifier_authentication_reviews_total": 2,
        "container_notifier_authentication_cache_hits_total": 5,
        "container_notifier_authentication_cache_misses_total": 2,
        "container_notifier_authentication_review_errors_total": 1,
    }
    assert {name: after[(name, ())] for name in expected} == expected


def test_each_metrics_has_its_own_registry():
    first, second = Metrics(), Metrics()
    first.run_started()
    assert first.registry.get_sample_value("container_notifier_podnotifiers_in_flight") == 1
    assert second.registry.get_sample_value("container_notifier_podnotifiers_in_flight") == 0
    assert REGISTRY.get_sample_value("container_notifier_podnotifiers_in_flight") is None


def test_exposition_formats():
    metrics = Metrics()
    text, text_type = metrics.exposition("")
    assert text_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE container_notifier_podnotifiers_in_flight gauge" in text
    open_metrics, open_type = metrics.exposition(
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert open_type.startswith("application/openmetrics-text; version=1.0.0")
    assert open_metrics.endswith(b"# EOF\n")


def _app(fake_kube, pki, metrics: Metrics | None):
    kube = fake_kube.client()
    store = TrustStore()
    store.update(pki.trust())
    tokens = TokenReviewer(kube, 10)
    authorizer = SubjectAccessReviewAuthorizer(kube, allowed_ttl=10, denied_ttl=10)
    app = create_app(authenticator=Authenticator(store, tokens), authorizer=authorizer,
                     readiness=Readiness(), resource_router=APIRouter(), metrics=metrics)
    if metrics is not None:
        metrics.watch_reviews(authorization=authorizer.counters, authentication=tokens.counters)
    return app


def _client(app, cert: bytes | None = None) -> httpx.AsyncClient:
    async def with_cert(scope, receive, send):
        scope["extensions"] = {"tls": {"client_cert_der": cert}}
        await app(scope, receive, send)

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert),
                             base_url="https://notifier.test")


async def test_metrics_is_authorized_as_the_non_resource_path(fake_kube, pki):
    fake_kube.tokens["good"] = {"username": "carol", "groups": ["monitoring"]}
    fake_kube.allow = lambda spec: spec["user"] == "carol"
    app = _app(fake_kube, pki, Metrics())
    async with _client(app) as client:
        anonymous = await client.get("/metrics")
        allowed = await client.get("/metrics", headers=TOKEN)
    assert anonymous.status_code == 403
    assert anonymous.json()["message"] == (
        'forbidden: User "system:anonymous" cannot get path "/metrics"')
    assert allowed.status_code == 200
    assert allowed.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    reviews = [body["spec"] for path, body in fake_kube.reviews if path == SAR]
    assert [r["nonResourceAttributes"] for r in reviews] == [
        {"path": "/metrics", "verb": "get"}, {"path": "/metrics", "verb": "get"}]
    assert [r["user"] for r in reviews] == ["system:anonymous", "carol"]
    # The scrape sees the reviews made to authorize it.
    scraped = samples(allowed.text)
    assert scraped[("container_notifier_authorization_reviews_total", ())] == 2
    assert scraped[("container_notifier_authentication_reviews_total", ())] == 1


async def test_build_app_counts_its_own_reviews(fake_kube, pki, tmp_path):
    """The server's authorizer and TokenReviewer feed the Metrics that /metrics serves."""
    fake_kube.tokens["good"] = {"username": "carol"}
    fake_kube.allow = lambda spec: True
    configmap = {"metadata": {"name": "extension-apiserver-authentication"},
                 "data": pki.configmap_data()}
    handle = fake_kube.handle

    def with_configmap(request: httpx.Request) -> httpx.Response:
        """The trust watcher's list finds the ConfigMap, the caches list no objects; every watch
        fails and they list again."""
        if request.url.path.endswith("/configmaps") and "watch" not in request.url.params:
            return httpx.Response(200, json={"items": [configmap],
                                             "metadata": {"resourceVersion": "1"}})
        if request.method == "GET" and "watch" not in request.url.params:
            # The pod and owner caches list an empty cluster.
            return httpx.Response(200, json={"items": None,
                                             "metadata": {"resourceVersion": "1"}})
        return handle(request)

    kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(with_configmap))
    pki.serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    options = ServerOptions(tls_cert_file=tmp_path / "tls.crt",
                            tls_private_key_file=tmp_path / "tls.key",
                            data_dir=tmp_path / "data", storage=SQLITE)
    app = build_app(options, kube, ServingTLS(options.tls_cert_file, options.tls_private_key_file),
                    await SqliteDatabase.open(options.data_dir), Watches(), Draining(),
                    "replica-0")
    async with app.router.lifespan_context(app), _client(app) as client:
        async with asyncio.timeout(5):
            while (await client.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.01)
        for _ in range(3):
            assert (await client.get("/metrics", headers=TOKEN)).status_code == 200
        scraped = samples((await client.get("/metrics", headers=TOKEN)).text)
    assert fake_kube.paths().count(SAR) == 1
    assert scraped[("container_notifier_authorization_reviews_total", ())] == 1
    assert scraped[("container_notifier_authorization_cache_hits_total", ())] == 3
    assert scraped[("container_notifier_authentication_reviews_total", ())] == 1
    assert scraped[("container_notifier_authentication_cache_hits_total", ())] == 3
    assert scraped[("container_notifier_podnotifiers_in_flight", ())] == 0
    # Ready: every cache has synced; no watch is served; the store is timed.
    assert {labels: value for (name, labels), value in scraped.items()
            if name == "container_notifier_cache_synced"} == {
        (("cache", cache),): 1 for cache in ("pod-cache", "owner-templates")}
    assert {labels: value for (name, labels), value in scraped.items()
            if name == "container_notifier_watches"} == {
        (("resource", resource),): 0 for resource in ("podnotifiers", "notifications")}
    assert any(name == "container_notifier_store_operation_duration_seconds_count"
               for name, _ in scraped)


def test_docs_list_every_series_served() -> None:
    """docs/metrics.md's tables name exactly the series families a server's /metrics serves."""
    metrics = Metrics()
    metrics.watch_reviews(authorization=ReviewCounters(), authentication=ReviewCounters())
    metrics.watch_leader(lambda: True)
    served = set()
    for family in text_string_to_metric_families(metrics.exposition()[0].decode()):
        served.add(f"{family.name}_total" if family.type == "counter" else family.name)
    docs = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", docs, re.MULTILINE))
    assert documented == served
