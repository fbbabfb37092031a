"""Admitting one notifier run on one pod, shared by pods/notify and Notification fan-out.

``Admission.admit`` reads the pod's declarations, picks the containers, applies the trust rules
and builds the record; ``Admission.start`` stores it (bounded per pod) and starts the run.
Problems are the domain errors of ``apiserver.notifier.errors`` (and the registry's and kube
client's kinds), which pods/notify answers as they are and a fan-out records as the pod's result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from apiserver.authn.user import UserInfo
from apiserver.errors import Cause, quoted
from apiserver.notifier import records, request
from apiserver.notifier.declarations import (
    ANNOTATION,
    DEFAULT_MAX_GRACE_PERIOD_SECONDS,
    DEFAULT_MAX_HOLD_SECONDS,
    InvalidNotifiers,
    container_ports,
    parse_notifiers,
    select_containers,
)
from apiserver.notifier.errors import (
    InvalidDeclaration,
    InvalidSelection,
    NotDeclared,
    PodNotFound,
    RunConflict,
    ServerAtCapacity,
    TooManyRuns,
    Untrusted,
)
from apiserver.notifier.http_declaration import HttpAction
from apiserver.notifier.runner import ContainerPlan, Plan, Runner
from apiserver.notifier.trust import TrustDecision
from apiserver.registry.errors import Conflict, NotFound, TooManyRequests
from apiserver.registry.podnotifiers import PodNotifierStore
from apiserver.registry.store import DEFAULT_MAX_OBJECT_BYTES

RETRY_AFTER_SECONDS = 1


class PodSource(Protocol):
    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None if it does not exist."""


class TrustRules(Protocol):
    async def decide(self, user: UserInfo, pod: dict[str, Any]) -> TrustDecision: ...


@dataclass(frozen=True)
class Limits:
    """The server's bounds on runs (from its flags)."""

    max_timeout_seconds: int
    output_tail_bytes: int
    default_ttl_seconds_after_finished: int
    max_records_per_pod: int
    max_concurrent_executions: int
    max_hold_seconds: int = DEFAULT_MAX_HOLD_SECONDS
    max_grace_period_seconds: int = DEFAULT_MAX_GRACE_PERIOD_SECONDS


@dataclass(frozen=True)
class Admitted:
    """A run that may start: its record (not stored yet) and what it will execute."""

    record: dict[str, Any]
    pod: dict[str, Any]
    containers: tuple[ContainerPlan, ...]
    timeouts: dict[str, int]
    tail_bytes: int
    max_hold_seconds: int | None = None
    """Set for a held notifier: the least maxHoldSeconds of its containers' declarations."""


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


class Admission:
    def __init__(self, *, pods: PodSource, trust: TrustRules, records: PodNotifierStore,
                 runner: Runner, limits: Limits) -> None:
        self._pods = pods
        self._trust = trust
        self._records = records
        self._runner = runner
        self._limits = limits

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The pod to notify; raises ``PodNotFound``."""
        pod = await self._pods.pod(namespace, name)
        if pod is None:
            raise PodNotFound(namespace, name)
        return pod

    def plan(self, pod: dict[str, Any], ask: request.NotifyRequest
             ) -> tuple[list[ContainerPlan], dict[str, int], int]:
        """Which containers run what, with which timeouts and output tail size."""
        meta = pod["metadata"]
        names = [c["name"] for c in pod["spec"]["containers"]]
        causes = [Cause("FieldValueNotFound",
                        f'Not found: {quoted(c)}: pod {meta["name"]} has no such container (it has '
                        f"{', '.join(names)})", f"spec.containers[{i}]")
                  for i, c in enumerate(ask.containers or []) if c not in names]
        if causes:
            raise InvalidSelection(ask.name or ask.generate_name, causes)
        try:
            declarations = parse_notifiers(meta.get("annotations", {}).get(ANNOTATION),
                                           max_timeout_seconds=self._limits.max_timeout_seconds,
                                           max_hold_seconds=self._limits.max_hold_seconds,
                                           max_grace_period_seconds=(
                                               self._limits.max_grace_period_seconds),
                                           containers=container_ports(pod))
        except InvalidNotifiers as error:
            raise InvalidDeclaration(meta["name"], [e.as_cause() for e in error.errors]
                                     ) from None
        selection = select_containers(declarations, ask.notifier, ask.containers)
        if selection.undeclared:
            raise InvalidSelection(ask.name or ask.generate_name, [
                Cause("FieldValueInvalid", f'container "{c}" does not declare notifier '
                      f'"{ask.notifier}"; leave it out or declare the notifier in its '
                      f"{ANNOTATION} entry", "spec.containers")
                for c in selection.undeclared])
        if not selection.selected:
            raise NotDeclared(meta["name"], ask.notifier, sorted(
                {n.name for notifiers in declarations.values() for n in notifiers}))
        held = sorted(c for c, n in selection.selected.items() if n.hold is not None)
        if held and len(held) < len(selection.selected):
            plain = sorted(set(selection.selected) - set(held))
            raise InvalidSelection(ask.name or ask.generate_name, [Cause(
                "FieldValueInvalid", f'notifier "{ask.notifier}" is held in containers '
                f"{', '.join(held)} but not in {', '.join(plain)}: one run cannot hold some "
                "containers and not others; select the held ones with spec.containers, or "
                f"declare hold alike in their {ANNOTATION} entries", "spec.containers")])
        requests = sorted(c for c, n in selection.selected.items()
                          if isinstance(n.action, HttpAction))
        if requests and pod["spec"].get("hostNetwork"):
            raise InvalidDeclaration(meta["name"], [Cause(
                "FieldValueForbidden", f'Forbidden: notifier "{ask.notifier}" sends an HTTP '
                f"request (containers {', '.join(requests)}), and a hostNetwork pod's IP is its "
                "node's: the request could reach any service of the node. Use an exec "
                "notifier in hostNetwork pods", "spec.hostNetwork")])
        states = container_states(pod)
        plans, timeouts = [], {}
        for name, notifier in selection.selected.items():
            container_id, problem = states.get(name, ("", f"container {name} has no status yet"))
            plans.append(ContainerPlan(name, notifier, container_id, problem))
            timeouts[name] = min(ask.timeout_seconds or notifier.timeout_seconds,
                                 self._limits.max_timeout_seconds)
        # Tails must fit the record's size cap even if every byte needs JSON escaping.
        tail = min(self._limits.output_tail_bytes,
                   DEFAULT_MAX_OBJECT_BYTES // (24 * len(plans)))
        return plans, timeouts, tail

    async def admit(self, user: UserInfo, pod: dict[str, Any], ask: request.NotifyRequest
                    ) -> Admitted:
        """Decide whether `user` may run `ask` on `pod`, and how."""
        containers, timeouts, tail = self.plan(pod, ask)
        holds = [c.notifier.hold.max_hold_seconds for c in containers
                 if c.notifier.hold is not None]
        max_hold = min(holds) if holds else None
        decision = await self._trust.decide(user, pod)
        meta = pod["metadata"]
        if not decision.trusted:
            raise Untrusted(meta["name"], decision.message)
        ttl = (ask.ttl_seconds_after_finished if ask.ttl_seconds_after_finished is not None
               else self._limits.default_ttl_seconds_after_finished)
        # Created Running with its start time: the run's next write is its final one.
        record = records.mark_running(records.new_record(records.RecordRequest(
            namespace=meta["namespace"], pod=meta["name"], pod_uid=meta["uid"],
            notifier=ask.notifier, containers=[c.name for c in containers],
            requested_containers=ask.containers, timeout_seconds=ask.timeout_seconds,
            ttl_seconds_after_finished=ttl, name=ask.name, generate_name=ask.generate_name,
            labels=ask.labels, requested_by=UserInfo(user.name, user.uid, list(user.groups)),
            max_hold_seconds=max_hold)), records.now())
        return Admitted(record, pod, tuple(containers), timeouts, tail, max_hold)

    async def start(self, admitted: Admitted) -> dict[str, Any]:
        """Store the record (at most K per pod) and start its run."""
        self._check_capacity()
        try:
            with _too_many_runs():
                created = await self._records.create_bounded(
                    admitted.record, max_per_pod=self._limits.max_records_per_pod)
        except Conflict as error:
            raise await self._run_conflict(admitted, error) from None
        meta = admitted.pod["metadata"]
        self._runner.start(Plan(
            namespace=meta["namespace"], record=created["metadata"]["name"], pod=meta["name"],
            pod_uid=meta["uid"], containers=admitted.containers,
            timeout_seconds=admitted.timeouts, tail_bytes=admitted.tail_bytes,
            pod_not_running=pod_not_running(admitted.pod),
            pod_ip=str(admitted.pod.get("status", {}).get("podIP") or ""),
            max_hold_seconds=admitted.max_hold_seconds,
            requester=str(admitted.record["spec"]["requestedBy"]["username"])))
        return created

    async def check(self, admitted: Admitted) -> dict[str, Any]:
        """Every check ``start`` makes, storing and starting nothing (a dry run): the server's
        capacity, the pod's bounds, the name and the record's size cap, each failing as in
        ``start``. Returns the record as it would be created."""
        self._check_capacity()
        try:
            with _too_many_runs():
                return await self._records.check_bounded(
                    admitted.record, max_per_pod=self._limits.max_records_per_pod)
        except Conflict as error:
            raise await self._run_conflict(admitted, error) from None

    async def _run_conflict(self, admitted: Admitted, error: Conflict) -> RunConflict:
        """The pod's bounds refusing a run because the same notifier is unfinished on it, as
        ``RunConflict`` naming that record (``error.name``), held or not (read again: a held
        run needs its release, not a wait)."""
        spec, meta = admitted.record["spec"], admitted.record["metadata"]
        held = False
        if error.name:
            try:
                other = await self._records.get(meta["namespace"], error.name)
                held = (other.get("status") or {}).get("phase") == records.HELD
            except NotFound:
                pass  # finished and gone meanwhile: asking again will do
        return RunConflict(meta["namespace"], spec["podName"], spec["notifier"], error.name,
                           held=held)

    def _check_capacity(self) -> None:
        if not self._runner.has_capacity():
            raise ServerAtCapacity(
                f"the server is running its maximum of {self._limits.max_concurrent_executions}"
                " notifiers at once; retry shortly", retry_after_seconds=RETRY_AFTER_SECONDS)


@contextlib.contextmanager
def _too_many_runs() -> Iterator[None]:
    """The pod's bounds refusing a run for the number of its unfinished records, as
    ``TooManyRuns`` (429); a conflict with one of them is ``Admission._run_conflict``'s."""
    try:
        yield
    except TooManyRequests as error:
        raise TooManyRuns(error.message,
                          retry_after_seconds=error.retry_after_seconds) from None
