"""POST .../namespaces/{ns}/pods/{pod}/notify: run a notifier the pod declared.

The access middleware has already allowed `create pods/notify` on this pod. Then: read and
validate the body, read the pod and its declarations, apply the trust rules, and (unless
dryRun=All) create the bounded PodNotifier record and start the run. `waitSeconds` holds the
answer until the run finishes or that many seconds pass; the answer is always 201 with the
record as stored at that moment.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from apiserver.api import status
from apiserver.api.routes import POD_NOTIFY_PATH
from apiserver.api.status import Cause
from apiserver.authn.user import UserInfo
from apiserver.definitions import ANNOTATION, InvalidNotifiers, parse_notifiers, select_containers
from apiserver.kube import KubeError
from apiserver.notifier import records, request, trust
from apiserver.notifier.runner import ContainerPlan, Plan
from apiserver.registry.errors import NotFound
from apiserver.registry.objects import generate_name
from apiserver.registry.sqlite_store import DEFAULT_MAX_OBJECT_BYTES
from apiserver.services import Services, services
from apiserver.serving.access import CurrentAuthorizer, CurrentUser

router = APIRouter()

MAX_BODY_BYTES = 1024 * 1024
MAX_WAIT_SECONDS = 50
RETRY_AFTER_SECONDS = 1
JSON_MEDIA_TYPES = ("application/json",)


async def read_json_body(http: Request) -> dict[str, Any]:
    """The request body as a JSON object: 415 for another media type, 413 past 1 MiB.

    No Content-Type means JSON, as in kube-apiserver (`kubectl create --raw` sends none)."""
    media_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type and media_type not in JSON_MEDIA_TYPES:
        raise status.unsupported_media_type(JSON_MEDIA_TYPES)
    chunks, size = [], 0
    async for chunk in http.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise status.request_entity_too_large(
                f"the request body is larger than {MAX_BODY_BYTES} bytes; a PodNotifier is "
                "a few hundred bytes")
        chunks.append(chunk)
    return request.parse_body(b"".join(chunks))


def query_options(http: Request) -> tuple[bool, int]:
    """(dryRun=All, waitSeconds) from the query, or 400."""
    dry_run_values = http.query_params.getlist("dryRun")
    if any(value != "All" for value in dry_run_values):
        raise status.bad_request(f"dryRun: unsupported value {dry_run_values!r}: use dryRun=All")
    raw_wait = http.query_params.get("waitSeconds", "0")
    try:
        wait = int(raw_wait)
    except ValueError:
        wait = -1
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise status.bad_request(
            f"waitSeconds: invalid value {raw_wait!r}: use a whole number from 0 to "
            f"{MAX_WAIT_SECONDS} (kube-apiserver ends requests after 60 s)")
    return bool(dry_run_values), wait


async def read_pod(svc: Services, namespace: str, pod: str) -> dict[str, Any]:
    try:
        return await svc.kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    except KubeError as error:
        if error.code == 404:
            raise status.not_found("pods", "", pod) from None
        raise status.internal_error(f"reading pod {namespace}/{pod}: {error}") from None


def pod_not_running(pod: dict[str, Any]) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return f"pod {pod['metadata']['name']} is terminating"
    phase = pod.get("status", {}).get("phase", "Unknown")
    if phase != "Running":
        return f"pod {pod['metadata']['name']} is {phase}, not Running"
    return ""


def container_states(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Container name to (containerID, why it is not running or "")."""
    states = {}
    for container in pod.get("status", {}).get("containerStatuses", []):
        state = container.get("state", {})
        problem = "" if "running" in state else (
            f"container {container['name']} is not running ({', '.join(state) or 'no state'})")
        states[container["name"]] = (container.get("containerID", ""), problem)
    return states


def plan_run(svc: Services, pod: dict[str, Any], ask: request.NotifyRequest
             ) -> tuple[list[ContainerPlan], dict[str, int], int]:
    """Which containers run what, with which timeouts and output tail size; or 404/422."""
    meta = pod["metadata"]
    names = [c["name"] for c in pod["spec"]["containers"]]
    causes = [Cause("FieldValueNotFound",
                    f'spec.containers[{i}]: Not found: "{c}": pod {meta["name"]} has no such '
                    f"container (it has {', '.join(names)})", f"spec.containers[{i}]")
              for i, c in enumerate(ask.containers or []) if c not in names]
    if causes:
        raise status.invalid(request.RESOURCE, request.GROUP, ask.name or meta["name"], causes)
    try:
        declarations = parse_notifiers(meta.get("annotations", {}).get(ANNOTATION),
                                       max_timeout_seconds=svc.options.max_timeout_seconds,
                                       containers=names)
    except InvalidNotifiers as error:
        raise status.invalid("pods", "", meta["name"], [
            Cause(e.reason, f"{e.field}: {e.message}", e.field) for e in error.errors]) from None
    selection = select_containers(declarations, ask.notifier, ask.containers)
    if selection.undeclared:
        raise status.invalid(request.RESOURCE, request.GROUP, ask.name or meta["name"], [
            Cause("FieldValueInvalid", f'spec.containers: container "{c}" does not declare '
                  f'notifier "{ask.notifier}"; leave it out or declare the notifier in its '
                  f"{ANNOTATION} entry", "spec.containers")
            for c in selection.undeclared])
    if not selection.selected:
        declared = sorted({n.name for notifiers in declarations.values() for n in notifiers})
        raise status.StatusError(
            404, "NotFound",
            f'notifier "{ask.notifier}" is not declared by pod "{meta["name"]}" (declared: '
            f"{', '.join(declared) or 'none'}; see its {ANNOTATION} annotation)",
            details={"name": ask.notifier, "kind": "notifier"})
    states = container_states(pod)
    plans, timeouts = [], {}
    for name, notifier in selection.selected.items():
        container_id, problem = states.get(name, ("", f"container {name} has no status yet"))
        plans.append(ContainerPlan(name, notifier, container_id, problem))
        timeouts[name] = min(ask.timeout_seconds or notifier.timeout_seconds,
                             svc.options.max_timeout_seconds)
    # Tails must fit the record's size cap even if every byte needs JSON escaping.
    tail = min(svc.options.output_tail_bytes, DEFAULT_MAX_OBJECT_BYTES // (24 * len(plans)))
    return plans, timeouts, tail


@router.post(POD_NOTIFY_PATH, status_code=201)
async def notify(namespace: str, pod: str, http: Request, user: CurrentUser,
                 authorizer: CurrentAuthorizer,
                 svc: Annotated[Services, Depends(services)]) -> JSONResponse:
    dry_run, wait_seconds = query_options(http)
    ask = request.validate(await read_json_body(http), namespace, pod,
                           svc.options.max_timeout_seconds)
    pod_object = await read_pod(svc, namespace, pod)
    containers, timeouts, tail = plan_run(svc, pod_object, ask)
    decision = await trust.decide(svc.kube, authorizer, user, pod_object)
    if not decision.trusted:
        raise status.forbidden("pods", "", pod, decision.message)
    record = records.new_record(records.RecordRequest(
        namespace=namespace, pod=pod, pod_uid=pod_object["metadata"]["uid"],
        notifier=ask.notifier, containers=[c.name for c in containers],
        requested_containers=ask.containers, timeout_seconds=ask.timeout_seconds,
        ttl_seconds_after_finished=(ask.ttl_seconds_after_finished
                                    if ask.ttl_seconds_after_finished is not None
                                    else svc.options.default_ttl_seconds_after_finished),
        name=ask.name, generate_name=ask.generate_name, labels=ask.labels,
        requested_by=_requester(user)))
    if dry_run:
        meta = record["metadata"]
        meta.setdefault("name", generate_name(meta.pop("generateName", "")))
        return JSONResponse(record, status_code=201)
    if not svc.runner.has_capacity():
        raise status.too_many_requests(
            f"the server is running its maximum of {svc.options.max_concurrent_executions} "
            "notifiers at once; retry shortly", RETRY_AFTER_SECONDS)
    created = (await svc.podnotifiers.create_bounded(
        record, max_per_pod=svc.options.max_records_per_pod)).object
    name = created["metadata"]["name"]
    svc.runner.start(Plan(
        namespace=namespace, record=name, pod=pod, pod_uid=pod_object["metadata"]["uid"],
        containers=tuple(containers), timeout_seconds=timeouts, tail_bytes=tail,
        pod_not_running=pod_not_running(pod_object)))
    if wait_seconds:
        await svc.runner.wait(namespace, name, wait_seconds)
        with contextlib.suppress(NotFound):
            created = await svc.podnotifiers.get(namespace, name)
    return JSONResponse(created, status_code=201)


def _requester(user: UserInfo) -> UserInfo:
    return UserInfo(user.name, user.uid, list(user.groups))
