"""Acting on the local control plane's components while tests run."""

from __future__ import annotations

import httpx

from localcluster import __main__ as localcluster
from localcluster import plane
from tests.support.kube import Cluster, wait_until


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
