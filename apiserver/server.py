"""The composition root: build every component from the options and hand each what it uses.

Nothing below this module imports it. ``serve`` connects to kube-apiserver, opens the store,
assembles authentication, authorization, the notifier runner, admission, the fan-out and the
HTTP routes, and runs them under uvicorn; a misconfiguration found on the way (``check``, the
serving certificate files, the kubeconfigs, the serving certificate bootstrap's Secret and
APIService, the storage CRDs, the trust ConfigMap's permission) is raised as a ``StartupError``
before anything is served. The app's lifespan starts and stops the background work (trust
material watch, pod index, record collection, this replica's Lease, the fan-out leader
election, and in bootstrap mode the serving certificate's renewal and rotation).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, FastAPI

from apiserver.authn.authenticator import Authenticator
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustMaterial, TrustStore, TrustWatcher, check_readable
from apiserver.authz.sar import SubjectAccessReviewAuthorizer
from apiserver.certificates.files import CertDir
from apiserver.certificates.plan import Policy
from apiserver.certificates.reconciler import ServingCertificates
from apiserver.clock import SystemClock
from apiserver.config import KUBERNETES, ServerOptions, check, tls_files
from apiserver.fanout import scope, spec
from apiserver.fanout.manager import FanoutManager
from apiserver.fanout.parts import FanoutParts
from apiserver.fanout.pod_feed import InformerNewPods, pod_informer
from apiserver.fanout.scope_store import ScopeStore
from apiserver.handlers import notifications, notifier_pods, notify, podnotifiers
from apiserver.handlers.watch_response import Watches
from apiserver.kube import KubeClient
from apiserver.kube.events import EventRecorder
from apiserver.kube.leases import LeaderElector, ReplicaLease
from apiserver.kube.namespaces import NamespaceDirectory
from apiserver.notifier import housekeeping, records
from apiserver.notifier.admission import Admission, Limits
from apiserver.notifier.events import REPORTING_CONTROLLER, NotificationEvents, RunEvents
from apiserver.notifier.exec_stream import KubeEndpoint
from apiserver.notifier.holds import HoldReleases
from apiserver.notifier.http_action import PodRequests
from apiserver.notifier.notifier_pods import NotifierPods
from apiserver.notifier.podcache import OwnerTemplates, PodCache
from apiserver.notifier.pods import PodDirectory
from apiserver.notifier.runner import KubeExec, Runner
from apiserver.notifier.trust import TrustRules
from apiserver.registry import namespace_guard
from apiserver.registry.decoding import Decoder
from apiserver.registry.kube_cache import DEFAULT_HISTORY
from apiserver.registry.kube_objects import DEFAULT_INSTANCE, check_installed
from apiserver.registry.kube_store import KubeObjectStore
from apiserver.registry.layout_migration import LayoutMigration
from apiserver.registry.namespace_guard import NamespaceGuardedStore
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.resources import (
    NOTIFICATION_POD_SETS,
    NOTIFICATION_RUNS,
    NOTIFICATIONS,
    PODNOTIFIERS,
    ResourceType,
)
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import ObjectStore
from apiserver.registry.timed_store import TimedObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Draining, Readiness
from apiserver.serving.metrics import Metrics
from apiserver.serving.server import Server, uvicorn_config
from apiserver.serving.tls import ServingTLS

log = logging.getLogger(__name__)

STORED_RESOURCES = (PODNOTIFIERS, NOTIFICATIONS, NOTIFICATION_RUNS, NOTIFICATION_POD_SETS)
"""What the server stores, in one backend: with ``--storage=kubernetes`` each has its storage
CRD (apiservice/storage-crds.yaml), checked at start."""

STORED_DECODERS: dict[ResourceType, Decoder] = {
    PODNOTIFIERS: records.decode_stored, NOTIFICATIONS: spec.decode_stored,
    NOTIFICATION_RUNS: scope.ScopeRun.of, NOTIFICATION_POD_SETS: scope.PodSet.of,
}
"""Each stored kind's decoder (``registry.decoding``): the storage caches skip what it refuses."""

WATCHED_RESOURCES = (PODNOTIFIERS.plural, NOTIFICATIONS.plural)
"""The resources whose watches the server serves (``container_notifier_watches``)."""

EVENTS_DRAIN_SECONDS = 2.0
"""At shutdown, how long writing the Events still queued may take."""


def _synced(cache: KubeObjectStore) -> bool:
    return cache.synced


def replica_name() -> str:
    """This replica, as Events' reportingInstance: POD_NAME (downward API) or the hostname
    (a pod's hostname is its name)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


@dataclass(frozen=True)
class KubeClients:
    """The server's connections to kube-apiserver: `main` for everything but the delegated
    reviews, `authentication` for TokenReviews and the trust ConfigMap (as k8s.io/apiserver
    reads it with its authentication client), `authorization` for SubjectAccessReviews. The
    last two are `main` itself unless their kubeconfig flag names another file."""

    main: KubeClient
    authentication: KubeClient
    authorization: KubeClient

    def distinct(self) -> list[KubeClient]:
        """Each client once (to close them)."""
        return list({id(client): client for client in
                     (self.main, self.authentication, self.authorization)}.values())

    async def aclose(self) -> None:
        for client in self.distinct():
            await client.aclose()


def connect(options: ServerOptions,
            from_kubeconfig: Callable[..., KubeClient] = KubeClient.from_kubeconfig,
            in_cluster: Callable[[], KubeClient] = KubeClient.in_cluster) -> KubeClients:
    """The clients of --kubeconfig (else in-cluster), --authentication-kubeconfig and
    --authorization-kubeconfig (each else the main one). Raises KubeconfigError naming the flag
    whose file is unusable, or saying to pass --kubeconfig outside a cluster."""
    main = (from_kubeconfig(options.kubeconfig, flag="--kubeconfig") if options.kubeconfig
            else in_cluster())

    def delegated(path: Path | None, flag: str) -> KubeClient:
        if path is None or path == options.kubeconfig:
            return main
        return from_kubeconfig(path, flag=flag)

    return KubeClients(main, delegated(options.authentication_kubeconfig,
                                       "--authentication-kubeconfig"),
                       delegated(options.authorization_kubeconfig, "--authorization-kubeconfig"))


def serving_certificates(options: ServerOptions, kube: KubeClient) -> ServingCertificates:
    """The bootstrap's reconciler of the --serving-cert-* options, --cert-dir and
    --apiservice-name."""
    policy = Policy(service=options.serving_cert_service,
                    namespace=options.serving_cert_secret_namespace,
                    serving_validity=datetime.timedelta(seconds=options.serving_cert_validity),
                    ca_validity=datetime.timedelta(seconds=options.serving_cert_ca_validity))
    return ServingCertificates(kube, policy, CertDir(options.cert_dir),
                               secret_name=options.serving_cert_secret,
                               apiservice=options.apiservice_name)


async def serve(options: ServerOptions) -> None:
    """Serve until SIGINT or SIGTERM; a StartupError if the server cannot start. In bootstrap
    mode (no TLS files given) the serving certificate is in --cert-dir before anything
    listens."""
    check(options)
    given = tls_files(options)
    files = ServingTLS(*given) if given else None
    clients = connect(options)
    database = None
    certificates = None
    try:
        if files is None:
            certificates = serving_certificates(options, clients.main)
            await certificates.start()
            tls = ServingTLS(certificates.cert_dir.cert_file, certificates.cert_dir.key_file)
        else:
            tls = files
        if options.storage == KUBERNETES:
            await check_installed(clients.main, STORED_RESOURCES)
            await LayoutMigration(clients.main, storage_namespace=options.storage_namespace,
                                  instance=DEFAULT_INSTANCE).run(STORED_RESOURCES)
        await check_readable(clients.authentication)
        if options.storage != KUBERNETES:
            database = await SqliteDatabase.open(options.data_dir)
    except BaseException:
        await clients.aclose()
        raise
    watches, draining = Watches(), Draining()
    app = build_app(options, clients.main, tls, database, watches, draining, replica_name(),
                    authentication=clients.authentication, authorization=clients.authorization,
                    certificates=certificates)
    await Server(uvicorn_config(app, tls, options.bind_address, options.secure_port),
                 watches.stop, draining=draining,
                 shutdown_delay=options.shutdown_delay_duration).serve()


def build_app(options: ServerOptions, kube: KubeClient, tls: ServingTLS,
              database: SqliteDatabase | None, watches: Watches, draining: Draining,
              replica: str, *, authentication: KubeClient | None = None,
              authorization: KubeClient | None = None,
              certificates: ServingCertificates | None = None) -> FastAPI:
    """The app with every component wired; its lifespan runs the background work and closes
    the clients and `database` at the end. TokenReviews and the trust ConfigMap go through
    `authentication`, SubjectAccessReviews through `authorization` (each `kube` if not given;
    see ``KubeClients``), everything else through `kube`. `replica` names this server in the
    Events it records and its heartbeat Lease, in the records it runs (``status.replica``), and
    is its identity in the fan-out leader election.
    With ``--storage=kubernetes`` records, Notifications and their scopes are
    kept as storage custom resources (``registry/kube_store.py``) and `database` is not used
    (``serve`` opens none); otherwise all of them are kept in `database`. `certificates` (bootstrap
    mode) keeps the serving certificate current in the background."""
    clients = KubeClients(kube, authentication or kube, authorization or kube)
    trust_store = TrustStore()

    def follow_trust(material: TrustMaterial) -> None:
        tls.set_client_trust(material.ca_bundle_pem())

    trust_store.subscribe(follow_trust)
    tokens = TokenReviewer(clients.authentication, options.authentication_token_webhook_cache_ttl)
    authorizer = SubjectAccessReviewAuthorizer(
        clients.authorization, allowed_ttl=options.authorization_webhook_cache_authorized_ttl,
        denied_ttl=options.authorization_webhook_cache_unauthorized_ttl)
    metrics = Metrics()
    if certificates is None:
        metrics.watch_serving_certificate(tls.expiration_timestamp)
    else:
        metrics.watch_serving_certificate(tls.expiration_timestamp, certificates.ca_expiration,
                                          lambda: certificates.refused)
    metrics.watch_reviews(authorization=authorizer.counters, authentication=tokens.counters)
    readiness = Readiness()
    readiness.add("trust-material", lambda: trust_store.material is not None)
    readiness.add("kube-apiserver", lambda: kube.last_success is not None)
    readiness.add("shutdown", lambda: not draining.active)

    stores: list[ObjectStore]
    caches: list[KubeObjectStore] = []
    if options.storage == KUBERNETES:
        caches = [KubeObjectStore(kube, resource, history=history,
                                  storage_namespace=options.storage_namespace,
                                  decode=STORED_DECODERS[resource],
                                  malformed=metrics.storage_object_malformed)
                  for resource, history in ((PODNOTIFIERS, DEFAULT_HISTORY),
                                            (NOTIFICATIONS, DEFAULT_HISTORY),
                                            (NOTIFICATION_RUNS, scope.STORE_HISTORY),
                                            (NOTIFICATION_POD_SETS, scope.STORE_HISTORY))]
        stores = list(caches)
        readiness.add("storage-cache", lambda: all(cache.synced for cache in caches))
    else:
        if database is None:
            raise ValueError("the SQLite storage needs a database")
        sqlite = database
        readiness.add("storage", lambda: sqlite.writable)
        stores = [SqliteObjectStore(database, resource) for resource in STORED_RESOURCES]
    stores = [TimedObjectStore(store, metrics) for store in stores]
    namespaces = NamespaceDirectory(kube)
    readiness.add("namespaces", namespaces.has_synced)
    record_store, notification_store, run_store, pod_set_store = stores
    record_store = NamespaceGuardedStore(record_store, namespaces)
    notification_store = NamespaceGuardedStore(notification_store, namespaces)
    metrics.watch_watches(watches.count, WATCHED_RESOURCES)
    records = PodNotifierStore(record_store, replica)
    clock = SystemClock()
    replica_lease = ReplicaLease(
        kube, options.leader_elect_resource_namespace, replica,
        lease_duration=options.leader_elect_lease_duration,
        renew_interval=options.leader_elect_retry_period, clock=clock)
    readiness.add("replica-lease", lambda: replica_lease.synced)
    elector = LeaderElector(
        kube, options.leader_elect_resource_namespace, options.leader_elect_resource_name,
        replica, lease_duration=options.leader_elect_lease_duration,
        renew_deadline=options.leader_elect_renew_deadline,
        retry_period=options.leader_elect_retry_period, clock=clock)
    metrics.watch_leader(lambda: elector.is_leader)
    pod_cache = PodCache(kube)
    pod_index = PodDirectory(pod_cache.informer)
    owners = OwnerTemplates(kube)
    trust_watcher = TrustWatcher(clients.authentication, trust_store)
    readiness.add("pod-cache", pod_cache.has_synced)
    readiness.add("owner-templates", owners.has_synced)
    metrics.watch_caches({"pod-cache": pod_cache.has_synced,
                          "owner-templates": owners.has_synced,
                          **{f"storage-{cache.resource.plural}": functools.partial(
                              _synced, cache) for cache in caches}})

    def exec_endpoint() -> KubeEndpoint:
        """Where runs exec, as the server's own identity (re-read: tokens rotate)."""
        return KubeEndpoint(kube.base_url, kube.ssl_context, kube.auth_headers())

    events = EventRecorder(kube, REPORTING_CONTROLLER, replica, metrics)
    kube_exec = KubeExec(exec_endpoint)
    pod_requests = PodRequests()
    runner = Runner(records, kube_exec, pod_index, metrics,
                    options.max_concurrent_executions, RunEvents(events), holding=kube_exec,
                    requests=pod_requests)
    takeover = housekeeping.Takeover(
        records, replica_lease, running=runner.is_running,
        lease_duration_seconds=options.leader_elect_lease_duration, stopper=kube_exec)
    admission = Admission(
        pods=pod_cache, trust=TrustRules(owners, authorizer), records=records,
        runner=runner, limits=Limits(
            max_timeout_seconds=options.max_timeout_seconds,
            output_tail_bytes=options.output_tail_bytes,
            default_ttl_seconds_after_finished=options.default_ttl_seconds_after_finished,
            max_records_per_pod=options.max_records_per_pod,
            max_concurrent_executions=options.max_concurrent_executions,
            max_hold_seconds=options.max_hold_seconds,
            max_grace_period_seconds=options.max_grace_period_seconds))
    holds = HoldReleases(records)
    fanout = FanoutManager(FanoutParts(
        notifications=notification_store, podnotifiers=records,
        scopes=ScopeStore(run_store, pod_set_store, clock=clock),
        admission=admission, runner=runner, authorizer=authorizer, metrics=metrics,
        new_pods=InformerNewPods(pod_informer(kube)), events=NotificationEvents(events),
        holds=holds), clock=clock)

    routes = APIRouter()
    routes.include_router(notify.router(admission, runner, records,
                                        options.max_timeout_seconds))
    routes.include_router(podnotifiers.router(records, watches))
    routes.include_router(notifier_pods.router(NotifierPods(
        pod_cache, owners, authorizer, max_timeout_seconds=options.max_timeout_seconds,
        max_hold_seconds=options.max_hold_seconds,
        max_grace_period_seconds=options.max_grace_period_seconds), authorizer))
    routes.include_router(podnotifiers.release_router(records, holds,
                                                      authorizer))
    routes.include_router(notifications.router(
        notification_store, fanout, kube, authorizer, watches,
        max_parallelism=options.max_notification_parallelism,
        max_timeout_seconds=options.max_timeout_seconds,
        max_hold_seconds=options.max_hold_seconds))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for cache in caches:
            cache.start()
        await housekeeping.recover_interrupted(
            records, stopper=kube_exec, grace_seconds=options.leader_elect_lease_duration)
        event_writer = asyncio.create_task(events.run(), name="event-recorder")
        heartbeat = asyncio.create_task(replica_lease.run(), name="replica-lease")
        election = asyncio.create_task(elector.run(fanout.lead, fanout.step_down),
                                       name="leader-election")
        background = [
            asyncio.create_task(trust_watcher.run(), name="trust-watcher"),
            asyncio.create_task(pod_cache.run(), name="pod-cache"),
            asyncio.create_task(owners.run(), name="owner-templates"),
            asyncio.create_task(housekeeping.collect_forever(
                records, pod_index, options.default_ttl_seconds_after_finished,
                options.max_records_per_pod), name="record-collector"),
            asyncio.create_task(takeover.run(), name="takeover"),
            asyncio.create_task(namespaces.run(), name="namespaces"),
            asyncio.create_task(namespace_guard.collect_forever(notification_store, namespaces),
                                name="namespace-collector"),
        ]
        if certificates is not None:
            background.append(asyncio.create_task(certificates.run(),
                                                  name="serving-certificates"))
        log.info("started", extra={"address": options.bind_address,
                                   "port": options.secure_port,
                                   "kube_apiserver": kube.base_url})
        try:
            yield
        finally:
            # Stop leading (the fan-out steps down) and release the leader Lease, so another
            # replica resumes the Notifications at once; end this replica's runs; then release
            # its heartbeat Lease, last, so survivors see it gone once nothing is left running.
            election.cancel()
            await asyncio.gather(election, return_exceptions=True)
            await fanout.shutdown()
            await runner.shutdown()
            await pod_requests.aclose()
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await replica_lease.release()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            event_writer.cancel()
            await asyncio.gather(event_writer, return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EVENTS_DRAIN_SECONDS):
                    await events.drain()
            for store in stores:
                store.close()
            if database is not None:
                await database.close()
            await clients.aclose()
            log.info("stopped")

    return create_app(
        lifespan=lifespan,
        authenticator=Authenticator(trust_store, tokens),
        authorizer=authorizer,
        readiness=readiness,
        resource_router=routes,
        metrics=metrics,
        draining=draining,
    )
