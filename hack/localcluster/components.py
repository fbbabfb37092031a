"""Command lines of etcd, kube-apiserver, controller-manager, scheduler and kwok, and the names
of every process of a plane."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from localcluster.addresses import NODE_IP, POD_CIDR, SERVICE_CLUSTER_IP_RANGE
from localcluster.layout import HACK_DIR, Layout, Ports
from localcluster.pki import FRONT_PROXY_CLIENT_NAME

ETCD = "etcd"
KUBE_APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
NOTIFIER = "notifier-apiserver"
"""The container-notifier extension server: replica i is the process `notifier-apiserver-<i>`
(its command line is in notifier.py)."""
HAPROXY = "haproxy"
"""The load balancer in front of the replicas (haproxy.py)."""
CONTROL_PLANE = (ETCD, KUBE_APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK)


def replica(index: int) -> str:
    """The process name of server replica `index` (0, 1, ...)."""
    return f"{NOTIFIER}-{index}"


def plane(replicas: int) -> tuple[str, ...]:
    """Every process of a running plane of `replicas` server replicas, in start order; their
    names in processes.json and logs/."""
    return (*CONTROL_PLANE, *(replica(i) for i in range(replicas)), HAPROXY)


def etcd(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    url = f"http://127.0.0.1:{ports.etcd}"
    return [
        str(bins / "etcd"), f"--data-dir={layout.etcd_data}", f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}", "--listen-peer-urls=http://localhost:0",
        "--unsafe-no-fsync", "--log-level=warn",
    ]


def kube_apiserver(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        str(bins / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        "--authorization-mode=Node,RBAC",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        f"--cert-dir={layout.root / 'apiserver-certs'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT_NAME}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--enable-aggregator-routing=false",
    ]


def _delegated(kubeconfig: Path) -> list[str]:
    return [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1"]


def controller_manager(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        str(bins / "kube-controller-manager"),
        *_delegated(layout.root / "controller-manager.kubeconfig"),
        f"--secure-port={ports.controller_manager}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
    ]


def scheduler(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(bins / "kube-scheduler"),
        *_delegated(layout.root / "scheduler.kubeconfig"),
        f"--secure-port={ports.scheduler}",
    ]


def write_kwok_config(bins: Path, layout: Layout) -> None:
    """kwok's --config: options, the node and pod lifecycle stages, and a ClusterExec rule that
    runs every exec'd command on the host, in the scratch work directory."""
    docs: list[dict] = [{
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        # kwok applies no defaults to options given in a file: set every one it needs.
        "options": {
            "enableDebuggingHandlers": True,
            "enableProfilingHandler": False,
            "enableContentionProfiling": False,
            "nodeLeaseDurationSeconds": 40,
            "nodeLeaseParallelism": 4,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 2,
            "enablePodsOnNodeSyncListPager": True,
        },
    }]
    for stage in sorted((bins / "kwok-stages").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(stage.read_text()) if d)
    layout.exec_workdir.mkdir(parents=True, exist_ok=True)
    docs.append({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "run-on-host"},
        "spec": {"execs": [{"local": {"workDir": str(layout.exec_workdir)}}]},
    })
    layout.kwok_config.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def kwok(bins: Path, layout: Layout, ports: Ports) -> list[str]:
    """kwok inside its own PID namespace, under the signal-recording init (hack/pidns_init.py)."""
    pki = layout.pki
    return [
        "/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL",
        sys.executable, str(HACK_DIR / "pidns_init.py"), str(layout.pid1_signal_log),
        str(bins / "kwok"),
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=true",
        f"--node-ip={NODE_IP}",
        f"--node-port={ports.kwok}",
        f"--server-address=127.0.0.1:{ports.kwok}",
        f"--tls-cert-file={pki / 'kwok-serving.crt'}",
        f"--tls-private-key-file={pki / 'kwok-serving.key'}",
        f"--cidr={POD_CIDR}",
    ]
