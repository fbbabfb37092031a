"""Acting on the local control plane's components while tests run."""

from __future__ import annotations

import httpx

from localcluster import __main__ as localcluster
from localcluster import plane
from tests.support.extension import cluster_pair, direct
from tests.support.kube import Cluster, wait_until
from tests.support.notify import body, declare, exec_notifier, notify_path


def kube_apiserver_ready(cluster: Cluster) -> bool:
    try:
        with cluster.admin(timeout=2) as kube:
            return kube.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def restart_kube_apiserver(cluster: Cluster) -> None:
    """Stop kube-apiserver (SIGTERM, then SIGKILL after the grace period), start it again with
    the same command line, and wait until it and what depends on it work again.

    The controller-manager and the scheduler are restarted too: their informers take 15-50 s
    (client-go backoff) to catch up with the new kube-apiserver, which would stall the next
    tests' namespaces and pods."""
    plane.restart(cluster.layout, "kube-apiserver")
    wait_until(lambda: kube_apiserver_ready(cluster), "kube-apiserver /readyz", 60)
    plane.restart(cluster.layout, "kube-controller-manager")
    plane.restart(cluster.layout, "kube-scheduler")
    wait_until(lambda: localcluster.apiservice_available(cluster.layout, cluster.ports),
               "the APIService to be Available again", 60)
    wait_replicas_see_new_pods(cluster)


def wait_replicas_see_new_pods(cluster: Cluster, timeout: float = 60.0) -> None:
    """Wait until every server replica runs a notifier on a pod created now.

    After kube-apiserver restarts, a replica's pod informers relist some seconds after the
    APIService is Available again (the new watch cache has expired their resourceVersions);
    until then a new pod is missing from the replica's pod index and a notify on it fails.
    Each replica is asked on its own port, as admin through the front proxy."""
    namespace = cluster.create_namespace("fresh-pods")
    try:
        pod = cluster.create_pod(namespace, "probe", annotations=declare(
            app=[exec_notifier("probe", "true")]))["metadata"]["name"]
        headers = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]
        proxy = cluster_pair(cluster, "front-proxy-client")
        for replica in range(cluster.replicas):
            def runs(replica: int = replica) -> bool:
                with direct(cluster, proxy, replica=replica) as server:
                    response = server.post(notify_path(namespace, pod), headers=headers,
                                           params={"waitSeconds": "10"},
                                           json=body("probe"))
                return (response.status_code == 201
                        and response.json()["status"]["phase"] == "Succeeded")

            wait_until(runs, f"server replica {replica} to run a notifier on a new pod",
                       timeout, interval=1.0)
    finally:
        cluster.delete_namespace(namespace)
