"""Session fixtures: the local control plane, reused when healthy (every component runs and
answers, and the APIService is Available), else started and stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from localcluster import __main__ as localcluster
from localcluster.layout import Layout, Ports
from tests.support.extension import serving_ca_bundle
from tests.support.kube import Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    layout, ports = Layout.default(), Ports()
    reuse = localcluster.healthy(layout, ports)
    if not reuse:
        started = time.monotonic()
        localcluster.up(layout, ports, localcluster.NODE_COUNT)
        print(f"\ncluster: started for this session in {time.monotonic() - started:.1f} s")
    session = Cluster(layout, ports, localcluster.build_binaries())
    serving_ca_bundle(session)  # known for the tests that stop kube-apiserver
    yield session
    if not reuse:
        localcluster.down(layout)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = cluster.create_namespace()
    yield name
    cluster.delete_namespace(name)
