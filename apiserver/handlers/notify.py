"""POST .../namespaces/{ns}/pods/{pod}/notify: run a notifier the pod declared.

The access middleware has already allowed `create pods/notify` on this pod. Then: read and
validate the body, read the pod and its declarations, apply the trust rules, and create the
bounded PodNotifier record and start the run; dryRun=All makes every check of that last step
too (``Admission.check``: capacity, the pod's bounds, the name, the size cap) and stores and
starts nothing. `waitSeconds` holds the
answer until the run settles (it finished, or a held notifier's record is Held) or that many
seconds pass; the answer is always 201 with the record as stored at that moment.
"""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from apiserver import errors
from apiserver.api.routes import POD_NOTIFY_PATH
from apiserver.api.warning_headers import add_warnings
from apiserver.handlers.body import by_size, read_object
from apiserver.handlers.caller import CurrentUser
from apiserver.handlers.options import field_validation
from apiserver.notifier import request
from apiserver.notifier.admission import Admission
from apiserver.notifier.runner import Runner
from apiserver.registry.errors import NotFound
from apiserver.registry.store import ObjectStore

MAX_WAIT_SECONDS = 50


def dry_run(http: Request) -> bool:
    """Whether the query asks for dryRun=All; 400 for any other dryRun value."""
    values = http.query_params.getlist("dryRun")
    if any(value != "All" for value in values):
        raise errors.bad_request(f"dryRun: unsupported value {values!r}: use dryRun=All")
    return bool(values)


def query_options(http: Request) -> tuple[bool, int]:
    """(dryRun=All, waitSeconds) from the query, or 400."""
    raw_wait = http.query_params.get("waitSeconds", "0")
    try:
        wait = int(raw_wait)
    except ValueError:
        wait = -1
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise errors.bad_request(
            f"waitSeconds: invalid value {raw_wait!r}: use a whole number from 0 to "
            f"{MAX_WAIT_SECONDS} (kube-apiserver ends requests after 60 s)")
    return dry_run(http), wait


def router(admission: Admission, runner: Runner, records: ObjectStore,
           max_timeout_seconds: int) -> APIRouter:
    """The pods/notify route, running notifiers through `admission` and `runner`."""
    routes = APIRouter()

    @routes.post(POD_NOTIFY_PATH, status_code=201)
    async def notify(namespace: str, pod: str, http: Request, user: CurrentUser) -> JSONResponse:
        dry_run, wait_seconds = query_options(http)
        body = await read_object(http)
        ask = await by_size(body.size, request.validate, body, namespace, pod,
                            max_timeout_seconds, field_validation(http))
        admitted = await admission.admit(user, await admission.read_pod(namespace, pod), ask)
        if dry_run:
            return add_warnings(JSONResponse(await admission.check(admitted), status_code=201),
                                ask.warnings)
        created = await admission.start(admitted)
        if wait_seconds:
            name = created["metadata"]["name"]
            await runner.wait(namespace, name, wait_seconds)
            with contextlib.suppress(NotFound):
                created = await records.get(namespace, name)
        return add_warnings(JSONResponse(created, status_code=201), ask.warnings)

    return routes
