"""build_app's Leases: the whole server in-process (InProcessServer) heartbeats its replica
Lease, leads the fan-out through the leader Lease (the leader gauge says so) and, at
shutdown, releases both."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.conftest import PKI, InProcessServer

REPLICA_LEASE = "container-notifier-replica-unit-test"
LEADER_LEASE = "container-notifier-fanout"


def test_the_server_heartbeats_leads_and_releases_its_leases(tmp_path: Path, pki: PKI) -> None:
    server = InProcessServer(tmp_path, pki)
    closed = False
    try:
        leases = server.kube.leases
        assert leases[REPLICA_LEASE]["spec"]["holderIdentity"] == "unit-test"  # ready: written

        async def leading() -> None:
            async with asyncio.timeout(10):
                while leases.get(LEADER_LEASE, {}).get("spec", {}).get(
                        "holderIdentity") != "unit-test":
                    await asyncio.sleep(0.05)

        server.run(leading())
        metrics = server.request("GET", "/metrics")
        assert metrics.status == 200
        gauge = {sample.name: sample.value
                 for family in text_string_to_metric_families(metrics.body.decode())
                 for sample in family.samples}
        assert gauge["container_notifier_leader"] == 1
        server.close()
        closed = True
        assert REPLICA_LEASE not in leases
        assert leases[LEADER_LEASE]["spec"]["holderIdentity"] == ""
    finally:
        if not closed:
            server.close()
