"""/healthz, /livez and /readyz, answered like kube-apiserver: ``ok`` or 500 with the checks."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
"""The probes' paths: answered in every phase of a shutdown (``serving.late_requests``)."""


class Draining:
    """Where the server is in its shutdown (docs/high-availability.md, "Stopping a replica
    without failing a request").

    From the first SIGTERM until the end of --shutdown-delay-duration (``active``) it serves
    every request as usual, but /readyz fails (check ``shutdown``, as kube-apiserver's), so load
    balancers and endpoints take it out first. After the delay (``late``, as k8s.io/apiserver's
    "not accepting new requests" phase) it listens no more and a request that still arrives on
    an open connection is refused with 429 and Retry-After (``serving.late_requests``): it
    started nothing, so the client may retry it on another replica."""

    def __init__(self) -> None:
        self.active = False
        self.late = False

    def begin(self) -> None:
        self.active = True

    def stop_accepting(self) -> None:
        self.active = True
        self.late = True


class Readiness:
    """Named checks that must all pass before the server is ready."""

    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def results(self) -> dict[str, bool]:
        return {name: check() for name, check in self._checks.items()}


def _report(endpoint: str, results: dict[str, bool], verbose: bool) -> PlainTextResponse:
    failed = not all(results.values())
    if not failed and not verbose:
        return PlainTextResponse("ok")
    lines = [f"[+]{name} ok" if passed else f"[-]{name} failed: reason withheld"
             for name, passed in results.items()]
    lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
    return PlainTextResponse("\n".join(lines) + "\n", status_code=500 if failed else 200)


def health_router(readiness: Readiness) -> APIRouter:
    router = APIRouter()

    healthz, livez, readyz = HEALTH_PATHS

    @router.get(healthz)
    @router.get(livez)
    async def live(request: Request) -> PlainTextResponse:
        endpoint = request.url.path.lstrip("/")
        return _report(endpoint, {"ping": True}, "verbose" in request.query_params)

    @router.get(readyz)
    async def ready(request: Request) -> PlainTextResponse:
        results = {"ping": True, **readiness.results()}
        return _report("readyz", results, "verbose" in request.query_params)

    return router
