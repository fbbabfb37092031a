"""Prometheus metrics of the server, served at /metrics (documented in docs/metrics.md).

`Metrics` owns its own CollectorRegistry (never prometheus_client's global one), so that every
server, and every test, has independent metrics. /metrics is authorized like kube-apiserver's:
a non-resource ``get`` on ``/metrics`` (SubjectAccessReview; RBAC grants it with
``nonResourceURLs: ["/metrics"]``, e.g. through the ClusterRole system:monitoring).

The authentication and authorization review counters are kept by the TokenReviewer and the
authorizer as plain integers; a custom collector reads them at scrape time. The registry also
holds prometheus_client's process, platform and garbage collector collectors (``process_*``,
``python_info``, ``python_gc_*``), and the HTTP request metrics are named as k8s.io/apiserver
names them (``apiserver_request_total``, ``apiserver_request_duration_seconds``).

The ``<name>_created`` samples prometheus_client adds to counters and histograms are left out
of the exposition (as Kubernetes components serve none): see docs/metrics.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from apiserver.ttlcache import ReviewCounters

PREFIX = "container_notifier"
METRICS_PATH = "/metrics"

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds; notifier timeouts are bounded by --max-timeout-seconds (default 600)."""

REQUEST_DURATION_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
                            4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120, 300, 600)
"""k8s.io/apiserver's buckets up to 60 s, then to 600 s: a pods/notify request waits for its run
(bounded by --max-timeout-seconds)."""

STORE_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                          10)
"""Seconds: a SQLite operation takes about a millisecond, a Kubernetes backend write a round
trip to kube-apiserver."""


class Metrics:
    """The server's metrics. Label values must come from small fixed sets (phases, reasons)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # prometheus_client's own instances: they keep no state of a registry, and each new
        # GCCollector would add a gc callback for the life of the process.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self._exposed = CollectorRegistry(auto_describe=False)
        self._exposed.register(_WithoutCreated(self.registry))
        self._requests = Counter(
            "apiserver_request_total",
            "Requests answered, by request verb, resource, subresource and HTTP status code "
            "(labels from fixed sets: apiserver/serving/request_labels.py).",
            ["verb", "resource", "subresource", "code"], registry=self.registry)
        self._request_duration = Histogram(
            "apiserver_request_duration_seconds",
            "Time from a request's arrival to the end of its answer (a watch: its length), "
            "by request verb, resource and subresource.",
            ["verb", "resource", "subresource"], buckets=REQUEST_DURATION_BUCKETS,
            registry=self.registry)
        self._podnotifiers_started = Counter(
            f"{PREFIX}_podnotifiers_started",
            "PodNotifier runs that started (each also counted once finished).",
            registry=self.registry)
        self._podnotifiers_finished = Counter(
            f"{PREFIX}_podnotifiers_finished",
            "PodNotifier runs that finished, by final phase and reason.",
            ["phase", "reason"], registry=self.registry)
        self._podnotifier_duration = Histogram(
            f"{PREFIX}_podnotifier_duration_seconds",
            "Time from the start of a PodNotifier run to its end, in seconds.",
            buckets=DURATION_BUCKETS, registry=self.registry)
        self._podnotifiers_in_flight = Gauge(
            f"{PREFIX}_podnotifiers_in_flight",
            "PodNotifier runs started and not finished yet.",
            registry=self.registry)
        self._notifications_finished = Counter(
            f"{PREFIX}_notifications_finished",
            "Notifications that finished, by final phase.",
            ["phase"], registry=self.registry)
        self._window_reads = Counter(
            f"{PREFIX}_window_reads",
            "Reads of a held quiesce window's stored run by the leader (each looks for a "
            "release request).", registry=self.registry)
        self._leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica leads the Notification fan-out (holds the leader Lease), "
            "else 0.", registry=self.registry)
        self._watches = Gauge(
            f"{PREFIX}_watches",
            "Watch streams served now, by resource.", ["resource"], registry=self.registry)
        self._cache_synced = Gauge(
            f"{PREFIX}_cache_synced",
            "1 once an informer cache has its first list of kube-apiserver's objects, else 0.",
            ["cache"], registry=self.registry)
        self._serving_certificate_expiration = Gauge(
            f"{PREFIX}_serving_certificate_expiration_timestamp_seconds",
            "The notAfter (Unix time) of the serving certificate this replica presents to new "
            "connections.", registry=self.registry)
        self._serving_ca_expiration = Gauge(
            f"{PREFIX}_serving_ca_expiration_timestamp_seconds",
            "The notAfter (Unix time) of the CA signing the bootstrapped serving certificate; "
            "0 when the certificate comes from --tls-cert-file.", registry=self.registry)
        self._secrets_refused = _CounterFunction(
            f"{PREFIX}_serving_certificate_secrets_refused",
            "Reads of the serving certificate Secret that were refused: it asked to trust a CA "
            "the server did not put into the APIService's caBundle (bootstrap mode; 0 in files "
            "mode).")
        self.registry.register(self._secrets_refused)
        self._store_duration = Histogram(
            f"{PREFIX}_store_operation_duration_seconds",
            "Time an operation of the object store took (success or error), by operation and "
            "stored resource.", ["operation", "resource"], buckets=STORE_DURATION_BUCKETS,
            registry=self.registry)
        self._storage_malformed = Counter(
            f"{PREFIX}_storage_malformed_objects",
            "Storage objects (--storage=kubernetes) the server ignores because they are not "
            "what their kind's decoder reads, by storage resource (e.g. storednotificationruns); "
            "each object is counted and logged once per resourceVersion, with its name.",
            ["resource"], registry=self.registry)
        self._unexpected_errors = Counter(
            f"{PREFIX}_unexpected_errors",
            "Requests that failed with an error the server did not expect (a bug): each is "
            "logged with its traceback and request id and answered with a 500 Status.",
            registry=self.registry)

        self._events_written = Counter(
            f"{PREFIX}_events_written",
            "Event writes kube-apiserver accepted: create (a new Event) or patch (a series "
            "count).", ["operation"], registry=self.registry)
        self._events_dropped = Counter(
            f"{PREFIX}_events_dropped",
            "Event occurrences not written: queue_full or rate_limited.",
            ["cause"], registry=self.registry)
        self._event_write_failures = Counter(
            f"{PREFIX}_event_write_failures",
            "Event writes that failed (kube-apiserver unreachable or refused), by operation.",
            ["operation"], registry=self.registry)

    def event_written(self, operation: str) -> None:
        self._events_written.labels(operation=operation).inc()

    def event_dropped(self, cause: str) -> None:
        self._events_dropped.labels(cause=cause).inc()

    def event_write_failed(self, operation: str) -> None:
        self._event_write_failures.labels(operation=operation).inc()

    def request_finished(self, verb: str, resource: str, subresource: str, code: int,
                         duration_seconds: float) -> None:
        """A request was answered; every label value must come from a fixed set
        (``apiserver.serving.request_labels``)."""
        self._requests.labels(verb=verb, resource=resource, subresource=subresource,
                              code=str(code)).inc()
        self._request_duration.labels(verb=verb, resource=resource,
                                      subresource=subresource).observe(max(duration_seconds, 0.0))

    def storage_object_malformed(self, resource: str) -> None:
        """A storage object of `resource` (a storage plural: a fixed set) was skipped."""
        self._storage_malformed.labels(resource=resource).inc()

    def unexpected_error(self) -> None:
        self._unexpected_errors.inc()

    def run_started(self) -> None:
        """A PodNotifier run started; pair it with exactly one `run_finished`."""
        self._podnotifiers_started.inc()
        self._podnotifiers_in_flight.inc()

    def run_finished(self, phase: str, reason: str, duration_seconds: float) -> None:
        """A PodNotifier run that `run_started` counted ended in `phase` with `reason`."""
        self._podnotifiers_in_flight.dec()
        self._podnotifiers_finished.labels(phase=phase, reason=reason).inc()
        self._podnotifier_duration.observe(max(duration_seconds, 0.0))

    def notification_finished(self, phase: str) -> None:
        self._notifications_finished.labels(phase=phase).inc()

    def window_read(self) -> None:
        """The leader read a held quiesce window's stored run (for a release request)."""
        self._window_reads.inc()

    def watch_leader(self, is_leader: Callable[[], bool]) -> None:
        """Read `is_leader()` at scrape time for the leader gauge."""
        self._leader.set_function(functools.partial(_as_gauge, is_leader))

    def watch_serving_certificate(self, certificate: Callable[[], float],
                                  ca: Callable[[], float] | None = None,
                                  refused: Callable[[], int] | None = None) -> None:
        """Read the serving certificate's and (bootstrap mode) its CA's notAfter, and the
        Secret reads the bootstrap refused, at scrape time."""
        self._serving_certificate_expiration.set_function(certificate)
        if ca is not None:
            self._serving_ca_expiration.set_function(ca)
        if refused is not None:
            self._secrets_refused.read = refused

    def watch_watches(self, count: Callable[[str], int], resources: Sequence[str]) -> None:
        """Read `count(resource)`, the watch streams of each of `resources` served now, at
        scrape time."""
        for resource in resources:
            self._watches.labels(resource=resource).set_function(
                functools.partial(count, resource))

    def watch_caches(self, synced: Mapping[str, Callable[[], bool]]) -> None:
        """Read each cache's `synced()` at scrape time; the keys are the fixed cache names."""
        for cache, is_synced in synced.items():
            self._cache_synced.labels(cache=cache).set_function(
                functools.partial(_as_gauge, is_synced))

    def store_operation_finished(self, operation: str, resource: str,
                                 duration_seconds: float) -> None:
        """An object store operation ended (``apiserver.registry.timed_store``)."""
        self._store_duration.labels(operation=operation, resource=resource).observe(
            max(duration_seconds, 0.0))

    def watch_reviews(self, authorization: ReviewCounters,
                      authentication: ReviewCounters) -> None:
        """Expose the authorizer's and the TokenReviewer's counters, read at scrape time."""
        self.registry.register(_ReviewCollector(authorization, authentication))

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The metrics in the format `accept` asks for (Prometheus text by default, or
        OpenMetrics), and its content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self._exposed), content_type


def _as_gauge(condition: Callable[[], bool]) -> float:
    return 1.0 if condition() else 0.0


class _WithoutCreated:
    """The metrics of `registry` without the ``<name>_created`` samples of its counters and
    histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            created = f"{metric.name}_created"
            kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            kept.samples = [sample for sample in metric.samples if sample.name != created]
            yield kept


class _CounterFunction:
    """A counter whose value `read()` returns at scrape time (0 until it is set)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation = name, documentation
        self.read: Callable[[], int] = lambda: 0

    def describe(self) -> Iterator[Metric]:
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.read())


class _ReviewCollector:
    """Counters of SubjectAccessReviews (authorization) and TokenReviews (authentication)."""

    def __init__(self, authorization: ReviewCounters, authentication: ReviewCounters):
        self._sources = (
            ("authorization", "SubjectAccessReview", authorization),
            ("authentication", "TokenReview", authentication),
        )

    def describe(self) -> Iterator[Metric]:
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        for kind, review, counters in self._sources:
            yield CounterMetricFamily(
                f"{PREFIX}_{kind}_reviews",
                f"{review}s sent to kube-apiserver (cache misses), including those that failed.",
                value=counters.reviews)
            yield CounterMetricFamily(
                f"{PREFIX}_{kind}_review_errors",
                f"{review}s that got no usable answer (unreachable or an error status).",
                value=counters.errors)
            yield CounterMetricFamily(
                f"{PREFIX}_{kind}_cache_hits",
                f"{review} answers served from the cache.",
                value=counters.cache_hits)
            yield CounterMetricFamily(
                f"{PREFIX}_{kind}_cache_misses",
                f"{review} answers not in the cache (each sends a review).",
                value=counters.cache_misses)


def metrics_router(registry: Metrics) -> APIRouter:
    """GET /metrics; access control (the middleware) has already authorized the caller."""
    router = APIRouter()

    @router.get(METRICS_PATH, include_in_schema=False)
    async def metrics(request: Request) -> Response:
        body, content_type = registry.exposition(request.headers.get("accept", ""))
        return Response(body, media_type=content_type)

    return router
