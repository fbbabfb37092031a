"""The server refuses to start against the real control plane with one line on stderr (exit 1,
no traceback) when the storage CRDs are not installed or its identities may not read what it
needs: the storage CRDs (the main --kubeconfig) and the trust ConfigMap
(--authentication-kubeconfig). The server process is started by hand next to the session's
replicas; it exits before it listens."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.layout import REPO_ROOT, Layout
from tests.cluster.test_lifecycle import SecondPlane
from tests.support.kube import Cluster

pytestmark = pytest.mark.cluster

NOBODY = "startup-nobody"
"""A user the cluster authenticates (a client certificate) and RBAC grants nothing."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(cluster: Cluster, *flags: str, files: bool = True) -> str:
    """The one line a server with `flags` prints when it refuses to start; with `files`, it
    serves the plane's notifier serving pair (files mode), else it bootstraps one."""
    pki = cluster.layout.pki
    tls = [f"--tls-cert-file={pki / 'notifier-serving.crt'}",
           f"--tls-private-key-file={pki / 'notifier-serving.key'}"] if files else []
    process = subprocess.run(
        [sys.executable, "-m", "apiserver", "--bind-address=127.0.0.1",
         f"--secure-port={free_port()}", *tls, "--storage=kubernetes",
         *flags], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert process.returncode == 1, process.stderr
    assert "Traceback" not in process.stderr
    lines = process.stderr.splitlines()
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith("container-notifier-apiserver: error: ")
    return lines[0]


def test_an_identity_that_may_not_read_the_storage_crds(cluster: Cluster) -> None:
    line = start(cluster, f"--kubeconfig={cluster.user(NOBODY).kubeconfig}")
    assert ("--storage=kubernetes: storedpodnotifiers.storage.notifier.x-k8s.io cannot be read "
            "(403 Forbidden)") in line
    assert line.endswith("apply apiservice/storage-crds.yaml and the server's RBAC in "
                         "apiservice/rbac-server.yaml (kubectl apply -k apiservice/ installs "
                         "both) and start again")


def test_an_authentication_identity_that_may_not_read_the_trust_configmap(
        cluster: Cluster) -> None:
    """The main identity (the replicas') reads the CRDs; the ConfigMap is read with the
    --authentication-kubeconfig identity, which RBAC refuses."""
    line = start(cluster, f"--kubeconfig={cluster.layout.notifier_kubeconfig}",
                 f"--authentication-kubeconfig={cluster.user(NOBODY).kubeconfig}")
    assert ("error: cannot read configmap kube-system/extension-apiserver-authentication (403 "
            'Forbidden: configmaps "extension-apiserver-authentication" is forbidden: User '
            f'"{NOBODY}" cannot list resource "configmaps" in API group "" in the namespace '
            '"kube-system"): bind the server\'s identity (--authentication-kubeconfig') in line
    assert "--role=extension-apiserver-authentication-reader" in line


def test_without_the_storage_crds(cluster: Cluster, tmp_path: Path) -> None:
    """A second one-node plane (not to disturb the session's) with a storage CRD deleted."""
    plane = SecondPlane(tmp_path / "plane")
    try:
        plane.run("up", "--nodes", "1", "--replicas", "1")
        plane.kubectl(cluster, "delete", "customresourcedefinition",
                      "storedpodnotifiers.storage.notifier.x-k8s.io")
        line = start(cluster, f"--kubeconfig={Layout(plane.state).notifier_kubeconfig}")
    finally:
        plane.run("down")
    assert line == (
        "container-notifier-apiserver: error: --storage=kubernetes: "
        "storedpodnotifiers.storage.notifier.x-k8s.io is not installed: apply "
        "apiservice/storage-crds.yaml and the server's RBAC in apiservice/rbac-server.yaml "
        "(kubectl apply -k apiservice/ installs both) and start again")


def test_bootstrap_mode_with_an_identity_that_may_not_read_the_secret(
        cluster: Cluster, tmp_path) -> None:
    line = start(cluster, f"--kubeconfig={cluster.user(NOBODY).kubeconfig}",
                 f"--cert-dir={tmp_path}", files=False)
    assert ("cannot bootstrap the serving certificate in secret "
            "container-notifier/container-notifier-serving-cert (403 Forbidden") in line
    assert line.endswith("grant the server's identity get, update on secrets named "
                         "container-notifier-serving-cert and create on secrets in namespace "
                         "container-notifier (Role container-notifier:serving-cert in "
                         "apiservice/rbac-server.yaml), or give --tls-cert-file and "
                         "--tls-private-key-file")
    assert list(tmp_path.iterdir()) == []
