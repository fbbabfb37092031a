"""The Helm chart and the kustomize directories installed into a local control plane started
without the extension, by the commands of docs/install.md, with the server running
in-cluster-like (tests/support/in_cluster.py: what is and is not exercised), in bootstrap mode
and in cert-manager mode (cert-manager simulated: tests/support/cert_manager.py).

Each test: install with Helm, notify a pod through the aggregator as a user bound to the
built-in `edit` role (the chart's aggregated roles), upgrade (the new Deployment's args are
served, the record and the caBundle are kept), uninstall (what docs/install.md says is deleted
is, what it says is kept is), remove everything, then install with kustomize, notify, and
uninstall with kustomize.

The installs create the Service and the APIService already pointed at the host-run servers
(tests/support/host_service.py), so kube-apiserver never dials the Service's ClusterIP.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from localcluster.layout import REPO_ROOT
from tests.support import cert_manager, host_service, in_cluster
from tests.support.doc_commands import console_commands
from tests.support.kube import Cluster, User
from tests.support.notify import API, declare, exec_notifier, notify
from tests.support.planes import extra_plane
from tests.support.storage import stored

pytestmark = pytest.mark.cluster

PAGE = "docs/install.md"
NAMESPACE = "container-notifier"
APISERVICE = f"/apis/apiregistration.k8s.io/v1/apiservices/{in_cluster.APISERVICE}"
STORAGE_CRDS = ("storedpodnotifiers", "storednotifications", "storednotificationruns",
                "storednotificationpodsets")
SERVING_SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/container-notifier-serving-cert"
DELETED_BY_UNINSTALL = (
    APISERVICE,
    f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/container-notifier",
    f"/api/v1/namespaces/{NAMESPACE}/services/container-notifier",
    f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/container-notifier",
    f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/container-notifier",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/container-notifier:server",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/container-notifier:aggregate-to-edit",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/container-notifier:storage",
    f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/container-notifier:leases",
)


@pytest.fixture
def plane() -> Iterator[Cluster]:
    """A plane of its own for each test: a failed test leaves nothing for the next."""
    with extra_plane("helm", server=False) as cluster:
        yield cluster


def run_docs(cluster: Cluster, heading: str,
             before: dict[int, Callable[[], Any]] | None = None) -> None:
    """Run the commands under `heading` of docs/install.md as written, from the repository
    root, with the plane's kubeconfig and wrappers of its helm and kubectl first on PATH
    (tests/support/host_service.py: `helm install`/`upgrade` and `kubectl apply -k` create the
    Service and APIService pointed at the plane's HAProxy port, where in_cluster.start runs the
    servers); before command i, call before[i] (what the cluster would do meanwhile: kubelet,
    cert-manager)."""
    wrappers = host_service.write_wrappers(cluster.bins, cluster.ports.notifier,
                                           cluster.layout.root / "host-service-bin")
    env = {**os.environ, "KUBECONFIG": str(cluster.layout.kubeconfig),
           "PATH": f"{wrappers}:{cluster.bins}:{os.environ['PATH']}"}
    for i, command in enumerate(console_commands(PAGE, heading)):
        if before and i in before:
            before[i]()
        done = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (f"{heading}: `{command}` exited {done.returncode}:\n"
                                      f"{done.stdout}\n{done.stderr}")


def status(cluster: Cluster, path: str) -> int:
    with cluster.admin() as kube:
        return kube.get(path).status_code


def edit_user(cluster: Cluster, namespace: str) -> User:
    """A user with the built-in `edit` role in `namespace`: notify is allowed only through
    the chart's container-notifier:aggregate-to-edit."""
    user = cluster.user(f"editor-{namespace}")
    cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "editor", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user.name}]})
    return user


def notify_succeeds(cluster: Cluster, user: User, namespace: str, pod: str) -> str:
    """Notify `pod` through the aggregator as `user`; returns the record's name."""
    with cluster.client_for(user) as client:
        response = notify(client, namespace, pod, "quiesce")
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["status"]["phase"] == "Succeeded", record
    assert record["spec"]["requestedBy"]["username"] == user.name
    return str(record["metadata"]["name"])


def records(cluster: Cluster, user: User, namespace: str) -> list[str]:
    with cluster.client_for(user) as client:
        response = client.get(f"{API}/namespaces/{namespace}/podnotifiers")
    assert response.status_code == 200, response.text
    return [r["metadata"]["name"] for r in response.json()["items"]]


def ca_bundle(cluster: Cluster) -> str:
    with cluster.admin() as kube:
        return str(kube.get(APISERVICE).json()["spec"].get("caBundle", ""))


def wait_gone(cluster: Cluster, path: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while status(cluster, path) != 404:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def installed(cluster: Cluster, heading: str, simulate: Callable[[], Any] | None,
              hosted: list[in_cluster.HostedDeployment]) -> None:
    """Run the install commands under `heading`; the servers start before the APIService wait
    (what kubelet would do), cert-manager's work (`simulate`, None in bootstrap mode) before the
    Certificate wait."""
    def start_servers() -> None:
        hosted.append(in_cluster.start(cluster))

    if simulate is None:  # helm install / apply, wait for the APIService, ...
        run_docs(cluster, heading, {1: start_servers})
    else:  # helm install / apply, wait for the Certificate, wait for the APIService
        run_docs(cluster, heading, {1: simulate, 2: start_servers})


def a_notified_pod(cluster: Cluster, prefix: str) -> tuple[User, str, str]:
    """A namespace with a pod declaring `quiesce`, and an `edit` user of it."""
    namespace = cluster.create_namespace(prefix)
    user = edit_user(cluster, namespace)
    pod = cluster.deploy(namespace, "db", containers=("db",), annotations=declare(
        db=[exec_notifier("quiesce", "echo quiesced")]))[0]["metadata"]["name"]
    return user, namespace, pod


def crd_path(plural: str) -> str:
    return ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
            f"{plural}.storage.notifier.x-k8s.io")


def assert_all_removed(cluster: Cluster) -> None:
    """The server's namespace and every storage CRD (with the records) are gone."""
    assert wait_gone(cluster, f"/api/v1/namespaces/{NAMESPACE}", 120.0)
    for plural in STORAGE_CRDS:
        assert wait_gone(cluster, crd_path(plural)), f"{plural} was not deleted"


def helm_install_upgrade_uninstall(cluster: Cluster, mode: str,
                                   simulate: Callable[[], Any] | None) -> None:
    """The Helm sections of docs/install.md in `mode`."""
    hosted: list[in_cluster.HostedDeployment] = []
    try:
        installed(cluster, f"Helm, {mode} certificates", simulate, hosted)
        bundle = ca_bundle(cluster)
        assert bundle, "the APIService is Available, so it must have a caBundle"
        user, namespace, pod = a_notified_pod(cluster, "helm")
        first = notify_succeeds(cluster, user, namespace, pod)

        def restart_servers() -> None:  # the rollout's new pods start with the new args
            hosted.pop().stop()
            hosted.append(in_cluster.start(cluster))

        run_docs(cluster, "Upgrade with Helm", {2: restart_servers})
        assert all("--log-level=debug" in argv for argv in hosted[-1].argv), hosted[-1].argv
        assert ca_bundle(cluster) == bundle, "helm upgrade changed the APIService's caBundle"
        assert first in records(cluster, user, namespace), "the record did not survive"
        second = notify_succeeds(cluster, user, namespace, pod)

        run_docs(cluster, "Uninstall with Helm")
        hosted.pop().stop()
        for path in DELETED_BY_UNINSTALL:
            assert wait_gone(cluster, path), f"{path} is still there after helm uninstall"
        for plural in STORAGE_CRDS:
            assert status(cluster, crd_path(plural)) == 200, f"helm uninstall deleted {plural}"
        with cluster.admin() as kube:
            kept = stored(kube, "storedpodnotifiers", namespace)
        assert {first, second} <= {o["object"]["metadata"]["name"] for o in kept}, kept
        assert status(cluster, SERVING_SECRET) == 200, "the serving Secret was not kept"

        run_docs(cluster, "Remove everything")
        assert_all_removed(cluster)
        cluster.delete_namespace(namespace)
    finally:
        for servers in hosted:
            servers.stop()


def kustomize_install_uninstall(cluster: Cluster, mode: str,
                                simulate: Callable[[], Any] | None) -> None:
    """The kustomize sections of docs/install.md in `mode`."""
    hosted: list[in_cluster.HostedDeployment] = []
    try:
        installed(cluster, f"kustomize, {mode} certificates", simulate, hosted)
        user, namespace, pod = a_notified_pod(cluster, "kust")
        notify_succeeds(cluster, user, namespace, pod)
        run_docs(cluster, "Uninstall with kustomize")
        hosted.pop().stop()
        assert wait_gone(cluster, APISERVICE)
        assert_all_removed(cluster)
        cluster.delete_namespace(namespace)
    finally:
        for servers in hosted:
            servers.stop()


def test_bootstrap_certificates(plane: Cluster) -> None:
    """The server makes its certificates (Secret, caBundle) with the chart's RBAC; the Secret
    it made is kept by helm uninstall."""
    helm_install_upgrade_uninstall(plane, "bootstrap", None)
    kustomize_install_uninstall(plane, "bootstrap", None)


def test_cert_manager_certificates(plane: Cluster) -> None:
    """cert-manager simulated: its CRDs, the chart's Certificates issued from their specs (the
    CA first), the CA injected into the APIService from its annotation."""
    cert_manager.install_crds(plane)

    def issue_and_inject() -> None:
        issued = cert_manager.issue_certificates(plane, NAMESPACE)
        assert sorted(issued) == ["container-notifier-ca", "container-notifier-serving-cert"]
        assert cert_manager.inject_ca(plane) == [in_cluster.APISERVICE]

    helm_install_upgrade_uninstall(plane, "cert-manager", issue_and_inject)
    kustomize_install_uninstall(plane, "cert-manager", issue_and_inject)
