"""An installed Deployment of the server run "in-cluster-like" as host processes.

kwok runs the Deployment's pods as fakes: they are scheduled, Running and Ready, but nothing
runs in them. So for each Running pod a server process runs here, made from what the cluster
holds, as kubelet would start the container:
- the container's args as the installed Deployment has them, with `$(VAR)` expanded from the
  container's env (POD_NAME and POD_NAMESPACE from the downward API: the kwok pod's name and
  namespace);
- each volume a directory under the plane's state directory, at the place of its mountPath in
  the args (an emptyDir empty, a Secret volume holding the Secret's keys as files);
- the pod's ServiceAccount identity: a TokenRequest token in a kubeconfig (--kubeconfig), so the
  chart's RBAC is what the server is allowed;
- a loopback port instead of the container port (--bind-address=127.0.0.1, --secure-port).
HAProxy in front of them stands in for the Service's load balancing. The Service must already
be an ExternalName of 127.0.0.1 on HAProxy's port and the APIService name that port, as they
were created (tests/support/host_service.py rewrites the manifests before helm or kubectl
creates them, as hack/localcluster/notifier.py does for the local plane's own registration):
`start` checks that, it does not patch them, so the aggregator never dials the Service's
ClusterIP.

Not exercised this way: the image (not pulled or run), kubelet (probes, volume mounts,
securityContext, resource limits), pod networking and the Service's ClusterIP routing.
"""

from __future__ import annotations

import base64
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from localcluster import __main__ as localcluster
from localcluster import haproxy, notifier, processes
from tests.support.kube import Cluster, wait_until
from tests.support.plugin import service_account_token

APISERVICE = notifier.APISERVICE_NAME
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
_VARIABLE = re.compile(r"\$\((\w+)\)")


@dataclass
class HostedDeployment:
    """The server processes standing in for a Deployment's pods, and HAProxy."""

    cluster: Cluster
    namespace: str
    pods: list[str]
    """The kwok pods' names, one server process each (in `children` order, then HAProxy)."""
    argv: list[list[str]]
    children: list[processes.Child]

    def stop(self) -> None:
        """Stop HAProxy, then each server in turn (each drains for the Deployment's shutdown
        delay). Stopped at once instead, a read through the aggregator right after the servers
        were started again failed 503 `error trying to reach service: EOF` in one of three
        fresh-clone runs (the cause was not found), so they stay stopped in turn."""
        processes.stop([c.tracked for c in self.children])
        recorded = processes.load(self.cluster.layout.state_file)
        mine = {c.tracked.pid for c in self.children}
        processes.save(self.cluster.layout.state_file,
                       [p for p in recorded if p.pid not in mine])


def _get(cluster: Cluster, path: str, **params: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(path, params=params)
    assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"
    return response.json()


def service_account_kubeconfig(cluster: Cluster, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig of ServiceAccount `name` (a TokenRequest token), written to `path`."""
    token = service_account_token(cluster, namespace, name)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority": str(cluster.layout.pki / "ca.crt")}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "local", "user": name}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def _env(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
    """The container's env: literal values, and the downward API's name and namespace."""
    fields = {"metadata.name": pod["metadata"]["name"],
              "metadata.namespace": pod["metadata"]["namespace"]}
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif path := var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"):
            env[var["name"]] = fields[path]
    return env


def _volumes(cluster: Cluster, pod: dict[str, Any], container: dict[str, Any],
             root: Path) -> dict[str, Path]:
    """Each mountPath of the container and the host directory standing in for it."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    mounts = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "projected" in volume:  # the ServiceAccount token: --kubeconfig stands in for it
            continue
        directory = root / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        if "secret" in volume:
            secret = _get(cluster, f"/api/v1/namespaces/{pod['metadata']['namespace']}/secrets/"
                          f"{volume['secret']['secretName']}")
            for key, value in secret.get("data", {}).items():
                (directory / key).write_bytes(base64.b64decode(value))
        else:
            assert "emptyDir" in volume, f"volume {mount['name']}: only emptyDir and secret here"
        mounts[mount["mountPath"]] = directory
    return mounts


def server_argv(cluster: Cluster, pod: dict[str, Any], port: int, root: Path,
                kubeconfig: Path) -> list[str]:
    """The command line of the server of `pod` (its first container) on the host."""
    container = pod["spec"]["containers"][0]
    env = _env(container, pod)
    mounts = _volumes(cluster, pod, container, root)
    args = []
    for arg in container.get("args", []):
        arg = _VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), arg)
        for mount_path, directory in mounts.items():
            arg = arg.replace(mount_path, str(directory))
        if not arg.startswith("--secure-port="):
            args.append(arg)
    return ["/usr/bin/env", *(f"{k}={v}" for k, v in env.items()),
            sys.executable, "-u", "-m", "apiserver", *args, "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--kubeconfig={kubeconfig}"]


def assert_pointed_at_host(cluster: Cluster, namespace: str, service: str, port: int) -> None:
    """Service `service` is an ExternalName of 127.0.0.1 on `port` (HAProxy's) and the
    APIService names it on `port`: the objects were created so (tests/support/host_service.py),
    or the aggregator has been dialling the Service's ClusterIP."""
    live = _get(cluster, f"/api/v1/namespaces/{namespace}/services/{service}")["spec"]
    assert _contains(live, notifier.host_service_spec(port)) and "selector" not in live, (
        f"Service {namespace}/{service} is not pointed at 127.0.0.1:{port} (install through "
        f"tests/support/host_service.py's wrappers): {live}")
    wanted = {"name": service, "namespace": namespace, "port": port}
    named = _get(cluster, f"{APISERVICES}/{APISERVICE}")["spec"]["service"]
    assert named == wanted, f"APIService {APISERVICE} names {named}, not {wanted}"


def _contains(live: Any, wanted: Any) -> bool:
    """`live` has every field of `wanted` (lists item by item), and maybe more (defaults)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            key in live and _contains(live[key], value) for key, value in wanted.items())
    if isinstance(wanted, list):
        return (isinstance(live, list) and len(live) == len(wanted)
                and all(_contains(a, b) for a, b in zip(live, wanted, strict=True)))
    return bool(live == wanted)


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False,
                         timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def start(cluster: Cluster, namespace: str = "container-notifier",
          deployment: str = "container-notifier", service: str = "container-notifier",
          timeout: float = 120.0) -> HostedDeployment:
    """Check that the Service and APIService point at HAProxy's port (assert_pointed_at_host),
    run a server process for each Running pod of `deployment` (by its selector), HAProxy in
    front, and wait until the APIService is Available. The processes are recorded in the
    plane's processes.json, so `localcluster down` stops them if the test does not."""
    layout, ports = cluster.layout, cluster.ports
    assert_pointed_at_host(cluster, namespace, service, ports.notifier)
    spec = _get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
    selector = ",".join(f"{k}={v}" for k, v in spec["spec"]["selector"]["matchLabels"].items())
    replicas = spec["spec"]["replicas"]
    pods = cluster.wait_running_pods(namespace, selector, replicas, timeout=timeout)
    pods = sorted(pods, key=lambda p: p["metadata"]["name"])[:replicas]
    account = pods[0]["spec"]["serviceAccountName"]
    hosted_root = layout.root / "hosted"
    kubeconfig = service_account_kubeconfig(cluster, namespace, account,
                                            hosted_root / f"{account}.kubeconfig")
    argv = [server_argv(cluster, pod, ports.replica(i),
                        hosted_root / pod["metadata"]["name"], kubeconfig)
            for i, pod in enumerate(pods)]
    hosted = HostedDeployment(cluster, namespace, [p["metadata"]["name"] for p in pods], argv, [])
    try:
        for name, command in zip(hosted.pods, argv, strict=True):
            hosted.children.append(processes.start(f"hosted-{name}", command, layout.logs))
        haproxy.write_config(layout, ports, len(pods))
        hosted.children.append(processes.start("hosted-haproxy", haproxy.argv(layout),
                                               layout.logs))
        processes.save(layout.state_file, processes.load(layout.state_file)
                       + [c.tracked for c in hosted.children])
        for i, child in enumerate(hosted.children[:-1]):
            _wait_ready(layout.logs, child, ports.replica(i), timeout)
        wait_until(lambda: localcluster.apiservice_available(layout, ports),
                   f"APIService {APISERVICE} Available", timeout)
    except BaseException:
        hosted.stop()
        raise
    return hosted


def _wait_ready(logs: Path, child: processes.Child, port: int, timeout: float) -> None:
    """Wait until the server on `port` answers /readyz; fail with its log if it exits."""
    wait_until(lambda: _ready(port) or child.exit_status() is not None,
               f"{child.tracked.name} /readyz", timeout)
    assert child.exit_status() is None, (
        f"{child.tracked.name} exited:\n"
        f"{processes.log_tail(processes.log_path(logs, child.tracked.name))}")
