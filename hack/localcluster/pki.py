"""Certificates, keys and kubeconfigs of the local control plane, made with `certs/`."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs.authority import KeyPair, issue, load_or_create_ca
from localcluster.addresses import KUBERNETES_SERVICE_IP
from localcluster.layout import Layout, Ports

APISERVER_SANS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
FRONT_PROXY_CLIENT_NAME = "front-proxy-client"
NOTIFIER_NAMESPACE = "container-notifier"
NOTIFIER_SERVICE = "container-notifier"
NOTIFIER_USER = f"system:serviceaccount:{NOTIFIER_NAMESPACE}:{NOTIFIER_SERVICE}"
"""The extension server's identity: a client certificate named like its ServiceAccount, so the
RBAC in apiservice/ applies unchanged to the locally run server."""
NOTIFIER_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{NOTIFIER_NAMESPACE}")


def pair_paths(stem: Path) -> tuple[Path, Path]:
    """The certificate and key paths of a file stem (which may itself contain dots)."""
    return stem.with_name(stem.name + ".crt"), stem.with_name(stem.name + ".key")


def _leaf(stem: Path, make: Callable[[], KeyPair]) -> tuple[Path, Path]:
    cert, key = pair_paths(stem)
    if not (cert.exists() and key.exists()):
        make().write(cert, key)
    return cert, key


def write_kubeconfig(path: Path, server: str, ca_file: Path, cert: Path, key: Path,
                     user: str) -> None:
    """A kubeconfig that authenticates with a client certificate, referenced by absolute path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server,
                                                   "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert),
                                          "client-key": str(key)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def ensure(layout: Layout, ports: Ports) -> None:
    """Create every certificate, key and kubeconfig that is missing; keep those that exist."""
    pki = layout.pki
    pki.mkdir(parents=True, exist_ok=True)
    ca = load_or_create_ca(pki, "ca", "container-notifier-local-ca")
    front_proxy_ca = load_or_create_ca(pki, "front-proxy-ca", "container-notifier-front-proxy-ca")

    _leaf(pki / "apiserver", lambda: issue(
        ca, "kube-apiserver", dns_names=APISERVER_SANS,
        ip_addresses=("127.0.0.1", KUBERNETES_SERVICE_IP), server=True))
    _leaf(pki / "apiserver-kubelet-client", lambda: issue(
        ca, "kube-apiserver-kubelet-client", organizations=("system:masters",), client=True))
    _leaf(pki / "front-proxy-client", lambda: issue(
        front_proxy_ca, FRONT_PROXY_CLIENT_NAME, client=True))
    _leaf(pki / "kwok-serving", lambda: issue(
        ca, "kwok", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True))

    # A serving pair for a server started in files mode (--tls-cert-file): the plane's replicas
    # bootstrap theirs; tests/cluster/test_startup_errors.py starts one with these files.
    notifier_ca = load_or_create_ca(pki, "notifier-ca", "container-notifier-serving-ca")
    _leaf(pki / "notifier-serving", lambda: issue(
        notifier_ca, NOTIFIER_SERVICE,
        dns_names=(f"{NOTIFIER_SERVICE}.{NOTIFIER_NAMESPACE}.svc", "localhost"),
        ip_addresses=("127.0.0.1",), server=True))

    sa_key = pki / "sa.key"
    if not sa_key.exists():
        signing_key = ec.generate_private_key(ec.SECP256R1())
        sa_key.touch(mode=0o600)
        sa_key.write_bytes(signing_key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
        (pki / "sa.pub").write_bytes(signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    server = f"https://127.0.0.1:{ports.apiserver}"
    for user, groups, kubeconfig in (
        ("admin", ("system:masters",), layout.kubeconfig),
        ("system:kube-controller-manager", (), layout.root / "controller-manager.kubeconfig"),
        ("system:kube-scheduler", (), layout.root / "scheduler.kubeconfig"),
        (NOTIFIER_USER, NOTIFIER_GROUPS, layout.notifier_kubeconfig),
    ):
        cert, key = _leaf(pki / user.replace(":", "-"),
                          partial(issue, ca, user, organizations=groups, client=True))
        if not kubeconfig.exists():
            write_kubeconfig(kubeconfig, server, pki / "ca.crt", cert, key, user)


def user_kubeconfig(layout: Layout, ports: Ports, user: str, groups: tuple[str, ...] = ()) -> Path:
    """A kubeconfig for a user authenticated by a client certificate (CN user, O groups)."""
    ca = KeyPair.load(layout.pki / "ca.crt", layout.pki / "ca.key")
    safe = user.replace(":", "-").replace("/", "-")
    suffix = ("+" + "+".join(g.replace(":", "-") for g in groups)) if groups else ""
    stem = layout.users / f"{safe}{suffix}"
    cert, key = _leaf(stem, lambda: issue(ca, user, organizations=groups, client=True))
    kubeconfig = stem.with_name(stem.name + ".kubeconfig")
    write_kubeconfig(kubeconfig, f"https://127.0.0.1:{ports.apiserver}", layout.pki / "ca.crt",
                     cert, key, user)
    return kubeconfig
