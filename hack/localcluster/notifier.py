"""The container-notifier extension server as a local process, registered with kube-apiserver.

The manifests come from apiservice/ (RBAC, Namespace, ServiceAccount, APIService), adapted for a
server that runs on the host: no Deployment, and a Service of type ExternalName pointing at
127.0.0.1, so the aggregator dials https://127.0.0.1:<notifier port> and verifies the serving
certificate against the caBundle for the name container-notifier.container-notifier.svc.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import yaml

from localcluster.layout import REPO_ROOT, Layout, Ports
from localcluster.pki import NOTIFIER_NAMESPACE, NOTIFIER_SERVICE
from localcluster.startup import StartFailed

GROUP_VERSION = "notifier.x-k8s.io/v1alpha1"
APISERVICE_NAME = "v1alpha1.notifier.x-k8s.io"
LOCAL_ONLY_KINDS = {"Deployment", "PersistentVolumeClaim"}


def server_argv(layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        # -u: unbuffered, so that its log holds everything it wrote when it exits or is killed.
        sys.executable, "-u", "-m", "apiserver",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.notifier}",
        f"--tls-cert-file={pki / 'notifier-serving.crt'}",
        f"--tls-private-key-file={pki / 'notifier-serving.key'}",
        f"--kubeconfig={layout.notifier_kubeconfig}",
        f"--data-dir={layout.notifier_data}",
    ]


def local_manifests(bins: Path, layout: Layout, ports: Ports) -> list[dict]:
    """apiservice/ rendered by kustomize, minus the in-cluster Deployment, pointed at loopback."""
    rendered = subprocess.run([str(bins / "kubectl"), "kustomize", str(REPO_ROOT / "apiservice")],
                              check=True, capture_output=True, text=True).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] not in LOCAL_ONLY_KINDS]
    ca_bundle = base64.b64encode((layout.pki / "notifier-ca.crt").read_bytes()).decode()
    for obj in objects:
        if obj["kind"] == "Service" and obj["metadata"]["name"] == NOTIFIER_SERVICE:
            obj["spec"] = {"type": "ExternalName", "externalName": "127.0.0.1",
                           "ports": [{"name": "https", "port": ports.notifier}]}
        if obj["kind"] == "APIService":
            obj["spec"]["service"] = {"name": NOTIFIER_SERVICE, "namespace": NOTIFIER_NAMESPACE,
                                      "port": ports.notifier}
            obj["spec"]["caBundle"] = ca_bundle
    return objects


def register(bins: Path, layout: Layout, ports: Ports) -> None:
    manifests = "\n---\n".join(json.dumps(o) for o in local_manifests(bins, layout, ports))
    applied = subprocess.run([str(bins / "kubectl"), f"--kubeconfig={layout.kubeconfig}", "apply",
                              "--server-side", "--force-conflicts", "-f", "-"],
                             input=manifests, capture_output=True, text=True)
    if applied.returncode != 0:
        raise StartFailed(f"kubectl apply of the apiservice/ manifests failed "
                          f"({applied.returncode}):\n{applied.stdout}{applied.stderr}")

