"""The watch, cache, store and leader series on the real servers (two replicas, Kubernetes
storage): what a Prometheus scraping every replica would see."""

from __future__ import annotations

import pytest

from tests.support.extension import scrape, scrape_replica
from tests.support.kube import Cluster, wait_until
from tests.support.notify import API

pytestmark = pytest.mark.cluster

STORAGE_CACHES = ("storage-podnotifiers", "storage-notifications", "storage-notificationruns",
                  "storage-notificationpodsets")


def test_caches_store_leader_and_watches_are_served(cluster: Cluster, namespace: str) -> None:
    for replica in range(cluster.replicas):
        scraped = scrape_replica(cluster, replica)
        synced = {key: value for key, value in scraped.items()
                  if key.startswith("container_notifier_cache_synced{")}
        assert synced == {f'container_notifier_cache_synced{{cache="{cache}"}}': 1.0
                          for cache in ("pod-cache", "owner-templates",
                                        *STORAGE_CACHES)}, replica
    watches = 'container_notifier_watches{resource="podnotifiers"}'
    listed = ('container_notifier_store_operation_duration_seconds_count'
              '{operation="list",resource="podnotifiers"}')
    before = scrape(cluster)
    assert before["container_notifier_leader"] == 1
    with cluster.admin() as kube:
        assert kube.get(f"{API}/namespaces/{namespace}/podnotifiers").status_code == 200
        with kube.stream("GET", f"{API}/namespaces/{namespace}/podnotifiers",
                         params={"watch": "true", "timeoutSeconds": "30"}) as stream:
            assert stream.status_code == 200
            wait_until(lambda: scrape(cluster)[watches] >= 1, "the watch to be gauged", 10)
    after = scrape(cluster)
    assert after[listed] >= before.get(listed, 0) + 1
