"""The extension server as replicas behind HAProxy: each serves on its own port as its own
replica, HAProxy spreads connections over the ready ones, takes a killed one out within its
check interval, keeps the service answering meanwhile, and puts it back once restarted."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from localcluster import __main__ as localcluster
from localcluster import haproxy, health, plane, processes
from tests.support.extension import API, direct, logged_requests
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster

TAKEN_OUT_SECONDS = 5.0
"""HAProxy checks every second and takes a replica out after two failed checks (each failing at
once: connection refused); the rest is slack for two busy cores."""


def _anonymous_path() -> str:
    """A path no one else requests: whoever logs it served this test's request."""
    return f"{API}/namespaces/replicas-{uuid.uuid4().hex[:8]}/podnotifiers"


def test_each_replica_serves_on_its_own_port_under_its_own_name(cluster: Cluster) -> None:
    recorded = plane.replicas(cluster.layout)
    assert len(recorded) == cluster.replicas >= 1
    for replica, proc in enumerate(recorded):
        assert f"POD_NAME=container-notifier-{replica}" in proc.argv
        assert f"--secure-port={cluster.replica_port(replica)}" in proc.argv
        assert "--storage=kubernetes" in proc.argv
        path = _anonymous_path()
        with direct(cluster, replica=replica) as server:
            assert server.get("/readyz").status_code == 200
            assert server.get(path).status_code == 403  # anonymous
        # The access log line is written once the response has been sent.
        wait_until(lambda p=path, r=replica: len(logged_requests(cluster, p, r)) == 1,
                   f"replica {replica} to log the request", 5)
        assert logged_requests(cluster, path) == logged_requests(cluster, path, replica)
        assert haproxy.routes_to(cluster.layout, replica)


def test_haproxy_spreads_connections_over_the_replicas(cluster: Cluster) -> None:
    if cluster.replicas < 2:
        pytest.skip("one replica (CN_REPLICAS=1): nothing to spread over")
    path = _anonymous_path()
    for _ in range(4 * cluster.replicas):
        with direct(cluster) as server:  # a new connection each time
            assert server.get(path).status_code == 403
    wait_until(lambda: len(logged_requests(cluster, path)) == 4 * cluster.replicas,
               "every request to be logged", 5)
    served = [len(logged_requests(cluster, path, r)) for r in range(cluster.replicas)]
    assert all(count >= 1 for count in served), f"requests per replica: {served}"


def _discovery_answers(cluster: Cluster) -> int:
    """The status of the group's discovery through the aggregator, on a new connection; 0 when
    the request failed."""
    try:
        with cluster.admin(timeout=5) as kube:
            return kube.get(API).status_code
    except httpx.HTTPError:
        return 0


def test_a_killed_replica_is_taken_out_and_the_service_keeps_answering(
        cluster: Cluster) -> None:
    """Only a request on a connection the aggregator had open to the killed replica may fail
    (it cannot be retried elsewhere); new connections go to a live one from the start
    (`option redispatch`), and every connection does once HAProxy has taken the replica out."""
    if cluster.replicas < 2:
        pytest.skip("one replica (CN_REPLICAS=1): killing it stops the service")
    victim = cluster.replicas - 1
    killed = plane.replica(cluster.layout, victim)
    meanwhile, afterwards = [], []
    try:
        cluster.kill_replica(victim)
        started = time.monotonic()
        while haproxy.routes_to(cluster.layout, victim):
            meanwhile.append(_discovery_answers(cluster))
            assert time.monotonic() - started < TAKEN_OUT_SECONDS, (
                f"HAProxy still routes to replica {victim} after {TAKEN_OUT_SECONDS} s")
        taken_out = time.monotonic() - started
        afterwards = [_discovery_answers(cluster) for _ in range(20)]
        assert (f"{killed.name}: pid {killed.pid} is not running"
                in health.check(cluster.layout, cluster.ports, cluster.replicas))
    finally:
        cluster.restart_replica(victim)

    assert not processes.is_alive(killed)
    assert 200 in meanwhile, f"answers in the {taken_out:.1f} s before HAProxy took the " \
        f"replica out: {meanwhile}"
    assert set(afterwards) == {200}, f"answers after it was taken out: {afterwards}"
    wait_until(lambda: localcluster.healthy(cluster.layout, cluster.ports, cluster.replicas),
               "the plane to be healthy again", 30)
    assert haproxy.routes_to(cluster.layout, victim)
