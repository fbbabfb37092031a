"""The ASGI app: access control, health, discovery, OpenAPI and the resource routes.

Every error, including routing 404/405 and request validation, is a metav1.Status body.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from apiserver import errors
from apiserver.api import discovery, openapi, status
from apiserver.authn.authenticator import Authenticator
from apiserver.authz.sar import Authorizer
from apiserver.errors import APIError
from apiserver.kube import KubeUnavailable
from apiserver.serving.access import AccessControlMiddleware
from apiserver.serving.failsafe import FailSafeMiddleware
from apiserver.serving.health import Draining, Readiness, health_router
from apiserver.serving.late_requests import LateRequestsMiddleware
from apiserver.serving.metrics import Metrics, metrics_router

log = logging.getLogger(__name__)


def create_app(*, authenticator: Authenticator, authorizer: Authorizer, readiness: Readiness,
               resource_router: APIRouter, metrics: Metrics | None = None,
               draining: Draining | None = None,
               lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
               ) -> FastAPI:
    """The app. `resource_router` serves the resource paths (apiserver.handlers); `metrics`,
    if given, is served at /metrics and counts the requests; `lifespan` runs background work
    from startup to shutdown; `draining`, if given, refuses the requests that arrive after the
    shutdown delay (``serving.late_requests``).

    Handlers get the caller by declaring a parameter of the type ``CurrentUser``
    (apiserver.handlers.caller).
    """
    app = FastAPI(title="container-notifier", openapi_url=None, docs_url=None,
                  redoc_url=None, redirect_slashes=False, lifespan=lifespan)
    app.include_router(health_router(readiness))
    app.include_router(discovery.router)
    app.include_router(openapi.router)
    if metrics is not None:
        app.include_router(metrics_router(metrics))
    app.include_router(resource_router)
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(AccessControlMiddleware, authenticator=authenticator,
                       authorizer=authorizer, requests=metrics)
    app.add_middleware(FailSafeMiddleware, counter=metrics)
    if draining is not None:
        app.add_middleware(LateRequestsMiddleware, draining=draining)
    return app


async def _api_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, APIError)
    if isinstance(error, KubeUnavailable):
        log.warning("kube-apiserver unavailable", extra={"error": str(error)})
        return status.response(errors.service_unavailable(
            f"kube-apiserver is unavailable ({error})"))
    return status.response(error)


async def _http_exception(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    result: APIError
    if error.status_code == 404:
        result = status.path_not_found()
    elif error.status_code == 405:
        result = status.method_not_allowed()
    else:
        result = APIError(str(error.detail))
    response = status.response(result)
    response.headers.update(error.headers or {})
    return response


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item.get('loc', ()))}: {item.get('msg', '')}"
        for item in error.errors()
    )
    return status.response(errors.bad_request(f"invalid request: {problems}"))
