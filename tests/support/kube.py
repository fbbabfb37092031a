"""Helpers for tests against the local control plane: users, RBAC, namespaces, workloads."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from localcluster import admin, haproxy, health, pki, plane, processes
from localcluster.layout import Layout, Ports


@dataclass(frozen=True)
class User:
    """A user authenticated by a client certificate issued by the cluster CA."""

    name: str
    groups: tuple[str, ...]
    kubeconfig: Path

    def ssl_context(self) -> ssl.SSLContext:
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        creds = config["users"][0]["user"]
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(creds["client-certificate"], creds["client-key"])
        return ctx


@dataclass
class Cluster:
    """A running local control plane and ways to act on it."""

    layout: Layout
    ports: Ports
    bins: Path

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def admin(self, timeout: float = 30.0) -> httpx.Client:
        return admin.client(self.layout, self.ports, timeout=timeout)

    def admin_ssl_context(self) -> ssl.SSLContext:
        return admin.ssl_context(self.layout)

    def user(self, name: str, groups: tuple[str, ...] = ()) -> User:
        return User(name, groups, pki.user_kubeconfig(self.layout, self.ports, name, groups))

    def client_for(self, user: User, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.server, verify=user.ssl_context(), timeout=timeout)

    def kubectl(self, *args: str, user: User | None = None, check: bool = True,
                input: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
        kubeconfig = user.kubeconfig if user else self.layout.kubeconfig
        result = subprocess.run(
            [str(self.bins / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            capture_output=True, text=True, input=input, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def apply(self, *objects: dict) -> None:
        self.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def create_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        with self.admin() as kube:
            response = kube.post("/api/v1/namespaces", json={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            assert response.status_code == 201, response.text
        wait_until(lambda: self._has_default_sa(name), f"default ServiceAccount in {name}")
        return name

    def _has_default_sa(self, namespace: str) -> bool:
        with self.admin() as kube:
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
            return kube.get(path).status_code == 200

    def delete_namespace(self, name: str) -> None:
        with self.admin() as kube:
            kube.delete(f"/api/v1/namespaces/{name}")

    def grant(self, namespace: str, user: User, rules: list[dict], name: str | None = None) -> None:
        """A Role with `rules` and a RoleBinding of it to `user` in `namespace`."""
        name = name or f"{user.name}-{uuid.uuid4().hex[:6]}".replace(":", "-")
        self.apply(
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": name, "namespace": namespace}, "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": name, "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": user.name}]},
        )

    def deploy(self, namespace: str, name: str, replicas: int = 1,
               containers: tuple[str, ...] = ("app",),
               annotations: dict[str, str] | None = None, timeout: float = 60.0
               ) -> list[dict]:
        """A Deployment whose pods land on kwok nodes; returns its Running pods, once there
        are exactly `replicas` (a Deployment scaled down keeps its extra pods a moment)."""
        labels = {"app": name}
        self.apply({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations or {}},
                    "spec": {"containers": [{"name": c, "image": "fake.example/app:1"}
                                            for c in containers]},
                },
            },
        })
        return self.wait_running_pods(namespace, f"app={name}", replicas, timeout=timeout,
                                      exact=True)

    @property
    def replicas(self) -> int:
        """How many server replicas the plane runs (recorded in processes.json)."""
        return len(plane.replicas(self.layout))

    def replica_port(self, replica: int) -> int:
        """Server replica `replica`'s own port (HAProxy listens on ports.notifier)."""
        return self.ports.replica(replica)

    def replica_ready(self, replica: int) -> bool:
        """Whether server replica `replica` answers 200 on its own /readyz."""
        (probe,) = [p for p in health.probes(self.layout, self.ports, self.replicas)
                    if p.component == plane.replica(self.layout, replica).name]
        return probe.answers()

    def kill_replica(self, replica: int) -> None:
        """SIGKILL server replica `replica` (a crash); it stays down until restarted."""
        plane.kill_replica(self.layout, replica)

    def restart_replica(self, replica: int) -> None:
        """Start server replica `replica` again (stopping it first if it runs: SIGTERM) with
        the same command line, and wait until it is ready, HAProxy routes to it and the
        aggregator reaches the service."""
        plane.restart_replica(self.layout, replica)
        self._wait_routed(replica)
        wait_until(self.served, "the restarted server behind the aggregator", 60)

    def replace_replica(self, replica: int, argv: list[str]) -> None:
        """Stop server replica `replica` (SIGTERM) and start it with `argv` (another version of
        the server), and wait until it is ready, routed and reached as `restart_replica`
        does."""
        plane.replace_replica(self.layout, replica, argv)
        self._wait_routed(replica)
        wait_until(self.served, "the replaced server behind the aggregator", 60)

    def restart_notifier(self, sig: signal.Signals) -> None:
        """Send `sig` to every server replica (SIGKILL: a crash of the whole service), wait
        until they are gone, start them all again with the same command lines, and wait until
        each is ready, HAProxy routes to it and the aggregator reaches the service."""
        for replica in plane.replicas(self.layout):
            if processes.is_alive(replica):
                os.kill(replica.pid, sig)
        for replica in plane.replicas(self.layout):
            wait_until(lambda r=replica: not processes.is_alive(r), f"{replica.name} to stop", 30)
        plane.restart_replicas(self.layout)
        for replica in range(self.replicas):
            self._wait_routed(replica)
        wait_until(self.served, "the restarted server behind the aggregator", 60)

    def _wait_routed(self, replica: int) -> None:
        wait_until(lambda: self.replica_ready(replica), f"server replica {replica} /readyz", 60)
        wait_until(lambda: haproxy.routes_to(self.layout, replica),
                   f"HAProxy to route to server replica {replica}", 30)

    def served(self) -> bool:
        """Whether the aggregator reaches the extension server (its discovery answers)."""
        try:
            with self.admin(timeout=5) as kube:
                return kube.get("/apis/notifier.x-k8s.io/v1alpha1").status_code == 200
        except httpx.HTTPError:
            return False

    def create_pod(self, namespace: str, name: str, containers: tuple[str, ...] = ("app",),
                   annotations: dict[str, str] | None = None,
                   labels: dict[str, str] | None = None) -> dict:
        """A bare pod (no controller) on a kwok node; returns it once Running."""
        with self.admin() as kube:
            response = kube.post(f"/api/v1/namespaces/{namespace}/pods", json={
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"bare": name, **(labels or {})},
                             "annotations": annotations or {}},
                "spec": {"containers": [{"name": c, "image": "fake.example/app:1"}
                                        for c in containers]},
            })
            assert response.status_code == 201, response.text
        return self.wait_running_pods(namespace, f"bare={name}", 1)[0]

    def wait_running_pods(self, namespace: str, selector: str, count: int,
                          timeout: float = 60.0, exact: bool = False) -> list[dict]:
        """The Running pods that `selector` selects, once there are `count` (or more, unless
        `exact`), none of them being deleted."""
        pods: list[dict] = []

        def enough() -> bool:
            nonlocal pods
            with self.admin() as kube:
                items = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                                 params={"labelSelector": selector}).json()["items"]
            pods = [p for p in items if p.get("status", {}).get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
            return len(pods) == count if exact else len(pods) >= count

        wait_until(enough, f"{count} Running pods {selector} in {namespace}", timeout)
        return pods


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0,
               interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

