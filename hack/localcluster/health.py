"""What "the local control plane is healthy" means: every process of components.plane(replicas)
is recorded, runs, and answers its health endpoint (each server replica its /readyz, HAProxy a
/readyz passed on to a replica), no other replica is recorded, and the APIService is Available.

`up` waits on the same probes, so "started" and "healthy" are one definition.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from localcluster import admin, components, processes
from localcluster.layout import Layout, Ports
from localcluster.notifier import APISERVICE_NAME

PROBE_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class Probe:
    """A component's health endpoint: a GET that answers 200 when the component serves."""

    component: str
    url: str
    ca: Path | None
    """Verify the serving certificate against this CA; None: not verified, for a component
    that serves a self-signed certificate made at start, and for the server replicas (and
    HAProxy before them), whose CA they bootstrap and rotate themselves: the APIService's
    Available condition checks that the aggregator trusts what they serve."""
    client: Path | None = None
    """pki/ directory whose admin certificate to present (kube-apiserver's /readyz needs a user)."""

    def answers(self) -> bool:
        try:
            verify: ssl.SSLContext | bool = False
            if self.ca is not None:
                verify = ssl.create_default_context(cafile=str(self.ca))
                if self.client is not None:
                    verify.load_cert_chain(self.client / "admin.crt", self.client / "admin.key")
            response = httpx.get(self.url, timeout=PROBE_TIMEOUT_SECONDS, verify=verify)
        except (httpx.HTTPError, OSError):
            return False
        return response.status_code == 200


def probes(layout: Layout, ports: Ports, replicas: int) -> tuple[Probe, ...]:
    """One probe per process, in components.plane(replicas) order."""
    pki = layout.pki
    replica_probes = tuple(
        Probe(components.replica(i), f"https://127.0.0.1:{ports.replica(i)}/readyz", None)
        for i in range(replicas))
    return (
        Probe(components.ETCD, f"http://127.0.0.1:{ports.etcd}/health", None),
        Probe(components.KUBE_APISERVER, f"https://127.0.0.1:{ports.apiserver}/readyz",
              pki / "ca.crt", client=pki),
        Probe(components.CONTROLLER_MANAGER,
              f"https://127.0.0.1:{ports.controller_manager}/healthz", None),
        Probe(components.SCHEDULER, f"https://127.0.0.1:{ports.scheduler}/healthz", None),
        Probe(components.KWOK, f"https://127.0.0.1:{ports.kwok}/healthz", pki / "ca.crt"),
        *replica_probes,
        Probe(components.HAPROXY, f"https://127.0.0.1:{ports.notifier}/readyz", None),
    )


def apiservice_condition(apiservice: dict) -> str | None:
    """None if the APIService is Available, else why not (its Available condition)."""
    for condition in apiservice.get("status", {}).get("conditions", []):
        if condition["type"] == "Available":
            if condition["status"] == "True":
                return None
            return (f"not Available ({condition.get('reason', 'no reason')}: "
                    f"{condition.get('message', '')})")
    return "not Available (no Available condition yet)"


def apiservice_problem(layout: Layout, ports: Ports) -> str | None:
    """None if APISERVICE_NAME is Available, else what is wrong with it."""
    try:
        with admin.client(layout, ports, timeout=PROBE_TIMEOUT_SECONDS) as kube:
            response = kube.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}")
    except (httpx.HTTPError, OSError) as error:
        return f"cannot be read from kube-apiserver ({error!r})"
    if response.status_code == 404:
        return "not found (not registered)"
    if response.status_code != 200:
        return f"cannot be read: HTTP {response.status_code} {response.text[:200]}"
    return apiservice_condition(response.json())


def problems(recorded: Sequence[processes.Tracked], expected: Sequence[Probe],
             is_alive: Callable[[processes.Tracked], bool],
             answers: Callable[[Probe], bool],
             apiservice: Callable[[], str | None]) -> list[str]:
    """Everything that keeps the plane from being healthy; empty when it is healthy.

    `recorded` are the processes in processes.json, `expected` the probe of each component.
    """
    if not recorded:
        return ["no cluster: processes.json records no process"]
    by_name = {p.name: p for p in recorded}
    expected_names = {probe.component for probe in expected}
    found = [f"{p.name}: recorded, but not a process of this plane (a plane started with "
             "another CN_REPLICAS or --replicas)" for p in recorded if p.name not in expected_names]
    failing = set()
    for probe in expected:
        problem = _component_problem(by_name.get(probe.component), probe, is_alive, answers)
        if problem is not None:
            found.append(f"{probe.component}: {problem}")
            failing.add(probe.component)
    if components.KUBE_APISERVER not in failing and (problem := apiservice()) is not None:
        found.append(f"APIService {APISERVICE_NAME}: {problem}")
    return found


def _component_problem(proc: processes.Tracked | None, probe: Probe,
                       is_alive: Callable[[processes.Tracked], bool],
                       answers: Callable[[Probe], bool]) -> str | None:
    if proc is None:
        return "not recorded in processes.json (never started)"
    if not is_alive(proc):
        return f"pid {proc.pid} is not running"
    if not answers(probe):
        return f"pid {proc.pid} runs but GET {probe.url} does not answer 200"
    return None


def check(layout: Layout, ports: Ports, replicas: int) -> list[str]:
    """problems() of the plane recorded in layout, probed for real."""
    return problems(processes.load(layout.state_file), probes(layout, ports, replicas),
                    processes.is_alive, Probe.answers, lambda: apiservice_problem(layout, ports))
