"""The container-notifier extension server as local processes, registered with kube-apiserver.

The manifests come from apiservice/ (Namespace, storage CRDs, RBAC, ServiceAccount, APIService),
adapted for replicas that run on the host: no Deployment and no PodDisruptionBudget (there are
no pods to schedule or evict), and a Service of type ExternalName pointing at 127.0.0.1, so the
aggregator dials https://127.0.0.1:<notifier port>, where HAProxy passes the connection on to a
ready replica, and verifies the serving certificate against the caBundle for the name
container-notifier.container-notifier.svc (point_at_host; tests/support/host_service.py
applies the same rewrite to the chart's and the kustomize directories' manifests when the test
installs them by docs/install.md's commands).

The replicas run in bootstrap mode, as the Deployment does: they agree on one CA and serving
certificate in the Secret container-notifier/container-notifier-serving-cert, each writes the
pair to its own --cert-dir under the state directory, and they fill the APIService's caBundle
(registered without one) themselves (docs/certificates.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
import yaml

from localcluster import admin
from localcluster.layout import REPO_ROOT, Layout, Ports
from localcluster.pki import NOTIFIER_NAMESPACE, NOTIFIER_SERVICE
from localcluster.startup import StartFailed

GROUP_VERSION = "notifier.x-k8s.io/v1alpha1"
APISERVICE_NAME = "v1alpha1.notifier.x-k8s.io"
IN_CLUSTER_ONLY_KINDS = {"Deployment", "PodDisruptionBudget"}
"""apiservice/ kinds not applied locally: the replicas are host processes, not pods."""


def pod_name(replica: int) -> str:
    """Replica `replica`'s name (POD_NAME), as a Deployment's pod would be named."""
    return f"{NOTIFIER_SERVICE}-{replica}"


SHUTDOWN_DELAY = "3s"
"""HAProxy checks every second and takes a replica out after two failures: a replica that is
stopped drains for longer than that before it stops accepting connections."""


def server_argv(layout: Layout, ports: Ports, replica: int,
                server_args: Sequence[str] = ()) -> list[str]:
    """Server replica `replica` on its own port, with Kubernetes storage (no data directory)
    and a bootstrapped serving certificate in its own --cert-dir, then `server_args`; env(1)
    sets POD_NAME and POD_NAMESPACE as the downward API does and execs the server, so the
    recorded pid is the server's and a restart with the same argv is the same replica."""
    return [
        "/usr/bin/env", f"POD_NAME={pod_name(replica)}", f"POD_NAMESPACE={NOTIFIER_NAMESPACE}",
        # -u: unbuffered, so that its log holds everything it wrote when it exits or is killed.
        sys.executable, "-u", "-m", "apiserver",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.replica(replica)}",
        f"--cert-dir={layout.serving_cert_dir(pod_name(replica))}",
        f"--serving-cert-secret-namespace={NOTIFIER_NAMESPACE}",
        f"--storage-namespace={NOTIFIER_NAMESPACE}",
        f"--kubeconfig={layout.notifier_kubeconfig}",
        "--storage=kubernetes",
        f"--shutdown-delay-duration={SHUTDOWN_DELAY}",
        *server_args,
    ]


HOST_ADDRESS = "127.0.0.1"
"""Where the Service points when the replicas run on the host: HAProxy listens there."""


def host_service_spec(port: int) -> dict:
    """The spec of the Service NOTIFIER_SERVICE for replicas on the host: an ExternalName of
    HOST_ADDRESS on `port` (no ClusterIP, no selector), so the aggregator dials
    HOST_ADDRESS:`port` (HAProxy) and never a ClusterIP or a pod IP."""
    return {"type": "ExternalName", "externalName": HOST_ADDRESS,
            "ports": [{"name": "https", "port": port}]}


def point_at_host(objects: Iterable[dict | None], port: int) -> list[dict]:
    """`objects` (manifests of apiservice/ or of the chart, in any namespace) with the Service
    NOTIFIER_SERVICE's spec host_service_spec(`port`) and the APIService APISERVICE_NAME's
    spec.service.port `port`; everything else (metadata, the APIService's caBundle or its
    absence) as it was. Empty documents (None) are dropped; `objects` is not changed."""
    pointed = []
    for obj in objects:
        if not obj:
            continue
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
        if kind == "Service" and name == NOTIFIER_SERVICE:
            obj = {**obj, "spec": host_service_spec(port)}
        elif kind == "APIService" and name == APISERVICE_NAME:
            spec = obj["spec"]
            obj = {**obj, "spec": {**spec, "service": {**spec["service"], "port": port}}}
        pointed.append(obj)
    return pointed


def local_manifests(bins: Path, layout: Layout, ports: Ports) -> list[dict]:
    """apiservice/ rendered by kustomize, minus IN_CLUSTER_ONLY_KINDS, pointed at loopback
    (point_at_host, HAProxy's port); the APIService without caBundle, as in apiservice/ (the
    replicas fill it)."""
    rendered = subprocess.run([str(bins / "kubectl"), "kustomize", str(REPO_ROOT / "apiservice")],
                              check=True, capture_output=True, text=True).stdout
    objects = [o for o in yaml.safe_load_all(rendered)
               if o and o["kind"] not in IN_CLUSTER_ONLY_KINDS]
    return point_at_host(objects, ports.notifier)


def register(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    """Apply the local manifests; returns the names of the CustomResourceDefinitions applied
    (the storage CRDs), which must be Established before a replica starts."""
    objects = local_manifests(bins, layout, ports)
    manifests = "\n---\n".join(json.dumps(o) for o in objects)
    applied = subprocess.run([str(bins / "kubectl"), f"--kubeconfig={layout.kubeconfig}", "apply",
                              "--server-side", "--force-conflicts", "-f", "-"],
                             input=manifests, capture_output=True, text=True)
    if applied.returncode != 0:
        raise StartFailed(f"kubectl apply of the apiservice/ manifests failed "
                          f"({applied.returncode}):\n{applied.stdout}{applied.stderr}")

    return [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]


def crds_established(layout: Layout, ports: Ports, names: list[str]) -> bool:
    """Every CustomResourceDefinition of `names` has the condition Established=True."""
    try:
        with admin.client(layout, ports) as kube:
            found = [kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                     for name in names]
    except httpx.HTTPError:
        return False
    return all(response.status_code == 200 and any(
        c["type"] == "Established" and c["status"] == "True"
        for c in response.json().get("status", {}).get("conditions", []))
        for response in found)
