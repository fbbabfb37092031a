"""Run the server: wire the components, serve HTTPS with uvicorn, shut down gracefully.

uvicorn handles SIGINT/SIGTERM: it stops accepting connections, lets running requests finish
for up to GRACEFUL_SHUTDOWN_SECONDS, then runs the app's lifespan shutdown, which stops the
trust watcher and closes the kube-apiserver client. (uvicorn then re-raises the signal, so
cleanup must happen in the lifespan, not after serve() returns.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable

import uvicorn
from fastapi import FastAPI

from apiserver.authn.authenticator import Authenticator
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustMaterial, TrustStore, TrustWatcher
from apiserver.authz.sar import SubjectAccessReviewAuthorizer
from apiserver.config import ServerOptions
from apiserver.fanout.controller import FanoutManager, FanoutParts
from apiserver.fanout.pod_feed import KubeNewPods
from apiserver.fanout.scope import ScopeStore
from apiserver.handlers import resource_router
from apiserver.handlers.collection import stop_watches
from apiserver.kube import KubeClient
from apiserver.notifier import housekeeping
from apiserver.services import Services, ServicesAdmission
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from apiserver.serving.metrics import Metrics
from apiserver.serving.protocol import PeerCertH11Protocol
from apiserver.serving.tls import ServingTLS

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_SECONDS = 25


def uvicorn_config(app: FastAPI, tls: ServingTLS, host: str, port: int) -> uvicorn.Config:
    """HTTPS with the peer-certificate protocol and the reloadable TLS context."""

    def ssl_context(config: uvicorn.Config, default: Callable[[], ssl.SSLContext]
                    ) -> ssl.SSLContext:
        return tls.context

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=PeerCertH11Protocol,
        ws="none",
        lifespan="auto",
        ssl_context_factory=ssl_context,
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


async def serve(options: ServerOptions) -> None:
    """Serve until SIGINT or SIGTERM."""
    kube = (KubeClient.from_kubeconfig(options.kubeconfig) if options.kubeconfig
            else KubeClient.in_cluster())
    tls = ServingTLS(options.tls_cert_file, options.tls_private_key_file)
    app = build_app(options, kube, tls)
    await _Server(uvicorn_config(app, tls, options.bind_address, options.secure_port),
                  app).serve()


class _Server(uvicorn.Server):
    """uvicorn, ending open watches as shutdown starts: uvicorn waits for open responses
    before the lifespan shutdown, and a watch would otherwise hold it for the whole grace
    period."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stop_watches(self._app)
        await super().shutdown(sockets)


def build_app(options: ServerOptions, kube: KubeClient, tls: ServingTLS) -> FastAPI:
    """The app with delegated authentication and authorization; its lifespan keeps the trust
    material (and so `tls`'s client trust) current."""
    trust = TrustStore()

    def follow_trust(material: TrustMaterial) -> None:
        tls.set_client_trust(material.ca_bundle_pem())

    trust.subscribe(follow_trust)
    readiness = Readiness()
    readiness.add("trust-material", lambda: trust.material is not None)
    readiness.add("kube-apiserver", lambda: kube.last_success is not None)
    tokens = TokenReviewer(kube, options.authentication_token_cache_ttl)
    authorizer = SubjectAccessReviewAuthorizer(
        kube, allowed_ttl=options.authorization_allowed_cache_ttl,
        denied_ttl=options.authorization_denied_cache_ttl)
    metrics = Metrics()
    metrics.watch_reviews(authorization=authorizer.counters, authentication=tokens.counters)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await Services.open(options, kube, metrics)
        app.state.services = services
        await housekeeping.recover_interrupted(services.podnotifiers)
        services.fanout = FanoutManager(FanoutParts(
            notifications=services.notifications, podnotifiers=services.podnotifiers,
            scopes=ScopeStore(services.database),
            admission=ServicesAdmission(services, authorizer), runner=services.runner,
            authorizer=authorizer, metrics=metrics, new_pods=KubeNewPods(kube)))
        await services.fanout.resume()
        background = [
            asyncio.create_task(TrustWatcher(kube, trust).run(), name="trust-watcher"),
            asyncio.create_task(services.pods.run(), name="pod-index"),
            asyncio.create_task(housekeeping.collect_forever(
                services.podnotifiers, services.pods,
                options.default_ttl_seconds_after_finished), name="record-collector"),
        ]
        log.info("started", extra={"address": options.bind_address,
                                   "port": options.secure_port,
                                   "kube_apiserver": kube.base_url})
        try:
            yield
        finally:
            await services.fanout.shutdown()
            await services.runner.shutdown()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await services.close()
            await kube.aclose()
            log.info("stopped")

    return create_app(
        lifespan=lifespan,
        authenticator=Authenticator(trust, tokens),
        authorizer=authorizer,
        readiness=readiness,
        resource_router=resource_router(),
        metrics=metrics,
    )
