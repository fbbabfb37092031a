"""Acting on the local control plane's components while tests run."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Recovery:
    """Seconds from kube-apiserver answering /readyz again after an outage until: the
    APIService was Available again; a notify through the aggregator on a pod that existed
    before was first answered 201; and one on a pod created after the outage (Running
    `new_pod_running_seconds` after kube-apiserver was back: the scheduler's and kwok's part)."""

    apiservice_available_seconds: float
    first_notify_seconds: float
    new_pod_running_seconds: float
    new_pod_notify_seconds: float


OUTAGE_SECONDS = 20.0
"""How long kube-apiserver stays stopped in `restart_kube_apiserver_and_time_recovery`: as
long as a control-plane upgrade's restart, and long enough for the clients' backoffs to grow."""


def restart_kube_apiserver_and_time_recovery(
        cluster: Cluster, client: httpx.Client, namespace: str, pod: str,
        annotations: dict[str, str], outage_seconds: float = OUTAGE_SECONDS,
        timeout: float = 120.0) -> Recovery:
    """Stop kube-apiserver only (the server replicas keep running) and start it again after
    `outage_seconds`; from the moment it answers /readyz, notify (`client`: a user's client of
    the aggregator) the notifier "ping" on `pod` and on a pod created then (with
    `annotations`) every 0.2 s until both are answered 201, and time each first success and
    the APIService being Available. The new pod is a Deployment's (a bare pod's declaration is
    trusted only for callers who may create pods). The controller-manager and the scheduler
    are restarted with kube-apiserver (see `restart_kube_apiserver`), so that the new pod runs
    soon. Follow it with `settle_after_kube_apiserver_restart`."""
    plane.stop_component(cluster.layout, "kube-apiserver")
    time.sleep(outage_seconds)
    plane.restart(cluster.layout, "kube-apiserver")
    wait_until(lambda: kube_apiserver_ready(cluster), "kube-apiserver /readyz", 60,
               interval=0.1)
    back = time.monotonic()
    plane.restart(cluster.layout, "kube-controller-manager")
    plane.restart(cluster.layout, "kube-scheduler")
    firsts: dict[str, float] = {}

    def note(what: str, succeeded: Callable[[], bool]) -> None:
        if what not in firsts:
            try:
                if succeeded():
                    firsts[what] = time.monotonic() - back
            except httpx.HTTPError:
                pass

    def notified(name: str) -> bool:
        answer = client.post(notify_path(namespace, name), params={"waitSeconds": "10"},
                             json=body("ping"))
        return answer.status_code == 201

    new_pod = ""

    def recovered() -> bool:
        note("available", lambda: localcluster.apiservice_available(cluster.layout,
                                                                   cluster.ports))
        note("notify", lambda: notified(pod))
        if new_pod:
            note("new_pod_notify", lambda: notified(new_pod))
        return len(firsts) == (4 if new_pod else 2)

    wait_until(recovered, "a notify through the aggregator answered 201 and the APIService "
               "Available after kube-apiserver restarted", timeout, interval=0.2)
    (created,) = cluster.deploy(namespace, f"after-outage-{uuid.uuid4().hex[:6]}",
                                annotations=annotations)
    new_pod = created["metadata"]["name"]
    firsts["new_pod_running"] = time.monotonic() - back
    wait_until(recovered, "a notify through the aggregator on a pod created after "
               "kube-apiserver restarted answered 201", timeout, interval=0.2)
    return Recovery(apiservice_available_seconds=firsts["available"],
                    first_notify_seconds=firsts["notify"],
                    new_pod_running_seconds=firsts["new_pod_running"],
                    new_pod_notify_seconds=firsts["new_pod_notify"])


def settle_after_kube_apiserver_restart(cluster: Cluster) -> None:
    """What the next tests need after `restart_kube_apiserver_and_time_recovery`: the
    APIService Available and every replica running a notifier on a new pod."""
    wait_until(lambda: localcluster.apiservice_available(cluster.layout, cluster.ports),
               "the APIService to be Available again", 60)
    wait_replicas_see_new_pods(cluster)


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
