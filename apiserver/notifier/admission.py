"""Admitting one notifier run on one pod, shared by pods/notify and Notification fan-out.

`admit` reads the pod's declarations, picks the containers, applies the trust rules and builds
the record; `start` stores it (bounded per pod) and starts the run. Problems are APIErrors
that pods/notify answers as they are, and that a fan-out records as the pod's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver import errors
from apiserver.authn.user import UserInfo
from apiserver.authz.sar import Authorizer
from apiserver.definitions import ANNOTATION, InvalidNotifiers, parse_notifiers, select_containers
from apiserver.errors import Cause
from apiserver.kube import KubeRejected
from apiserver.notifier import records, request, trust
from apiserver.notifier.runner import ContainerPlan, Plan
from apiserver.registry.store import DEFAULT_MAX_OBJECT_BYTES
from apiserver.services import Services

RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class Admitted:
    """A run that may start: its record (not stored yet) and what it will execute."""

    record: dict[str, Any]
    pod: dict[str, Any]
    containers: tuple[ContainerPlan, ...]
    timeouts: dict[str, int]
    tail_bytes: int


async def read_pod(svc: Services, namespace: str, pod: str) -> dict[str, Any]:
    try:
        return await svc.kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    except KubeRejected as error:
        if error.status_code == 404:
            raise errors.not_found("pods", "", pod) from None
        raise errors.internal_error(f"reading pod {namespace}/{pod}: {error}") from None


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
        raise errors.invalid(request.RESOURCE, request.GROUP, ask.name or meta["name"], causes)
    try:
        declarations = parse_notifiers(meta.get("annotations", {}).get(ANNOTATION),
                                       max_timeout_seconds=svc.options.max_timeout_seconds,
                                       containers=names)
    except InvalidNotifiers as error:
        raise errors.invalid("pods", "", meta["name"], [
            e.as_cause() for e in error.errors]) from None
    selection = select_containers(declarations, ask.notifier, ask.containers)
    if selection.undeclared:
        raise errors.invalid(request.RESOURCE, request.GROUP, ask.name or meta["name"], [
            Cause("FieldValueInvalid", f'spec.containers: container "{c}" does not declare '
                  f'notifier "{ask.notifier}"; leave it out or declare the notifier in its '
                  f"{ANNOTATION} entry", "spec.containers")
            for c in selection.undeclared])
    if not selection.selected:
        declared = sorted({n.name for notifiers in declarations.values() for n in notifiers})
        raise errors.NotFound(
            f'notifier "{ask.notifier}" is not declared by pod "{meta["name"]}" (declared: '
            f"{', '.join(declared) or 'none'}; see its {ANNOTATION} annotation)",
            name=ask.notifier, resource="notifier")
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


async def admit(svc: Services, authorizer: Authorizer, user: UserInfo, pod: dict[str, Any],
                ask: request.NotifyRequest, owner_cache: trust.OwnerCache | None = None
                ) -> Admitted:
    """Decide whether `user` may run `ask` on `pod`, and how; raises an APIError if not."""
    containers, timeouts, tail = plan_run(svc, pod, ask)
    decision = await trust.decide(svc.kube, authorizer, user, pod, owner_cache)
    if not decision.trusted:
        raise errors.forbidden("pods", "", pod["metadata"]["name"], decision.message)
    meta = pod["metadata"]
    ttl = (ask.ttl_seconds_after_finished if ask.ttl_seconds_after_finished is not None
           else svc.options.default_ttl_seconds_after_finished)
    record = records.new_record(records.RecordRequest(
        namespace=meta["namespace"], pod=meta["name"], pod_uid=meta["uid"],
        notifier=ask.notifier, containers=[c.name for c in containers],
        requested_containers=ask.containers, timeout_seconds=ask.timeout_seconds,
        ttl_seconds_after_finished=ttl, name=ask.name, generate_name=ask.generate_name,
        labels=ask.labels, requested_by=UserInfo(user.name, user.uid, list(user.groups))))
    return Admitted(record, pod, tuple(containers), timeouts, tail)


async def start(svc: Services, admitted: Admitted) -> dict[str, Any]:
    """Store the record (at most K per pod: 409, 429 otherwise) and start its run."""
    if not svc.runner.has_capacity():
        raise errors.too_many_requests(
            f"the server is running its maximum of {svc.options.max_concurrent_executions} "
            "notifiers at once; retry shortly", RETRY_AFTER_SECONDS)
    created = await svc.podnotifiers.create_bounded(
        admitted.record, max_per_pod=svc.options.max_records_per_pod)
    meta = admitted.pod["metadata"]
    svc.runner.start(Plan(
        namespace=meta["namespace"], record=created["metadata"]["name"], pod=meta["name"],
        pod_uid=meta["uid"], containers=admitted.containers, timeout_seconds=admitted.timeouts,
        tail_bytes=admitted.tail_bytes, pod_not_running=pod_not_running(admitted.pod)))
    return created
