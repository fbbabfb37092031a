"""Session fixtures: the egress guard, which fails the run if the test process, a process it
started or a process of a local plane connects to an address off this machine
(tests/support/egress.py), and the local control plane, reused when healthy (every component
runs and answers, and the APIService is Available), else started and stopped."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import __main__ as localcluster
from localcluster.layout import REPO_ROOT, Layout, Ports
from tests.support.egress import EgressGuard, recorded_processes
from tests.support.extension import serving_ca_bundle
from tests.support.kube import Cluster
from tests.support.planes import worker_plane_environment

EGRESS_SAMPLE_SECONDS = 0.1


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs two workers) each worker starts, uses and stops a
    session plane of its own (tests/support/planes.py): its state directory and ports, set in
    this process's environment before any fixture or test reads them, so the commands a test
    runs (kubectl, `make demo`, `python -m localcluster`) reach the same plane."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        os.environ.update(worker_plane_environment(worker))


def plane_state_files() -> list[Path]:
    """The session plane's processes.json and those of the extra planes (tests/support/planes.py
    keeps each in `.cluster-<name>/` at the repository root)."""
    return [Layout.default().state_file, *REPO_ROOT.glob(".cluster-*/processes.json")]


@pytest.fixture(scope="session", autouse=True)
def egress_guard() -> Iterator[EgressGuard]:
    """Samples every plane process, this process and their descendants every 0.1 s for the
    whole run; the run fails if any of them held a connection off this machine."""
    planes = recorded_processes(plane_state_files)
    test_process = os.getpid()
    guard = EgressGuard(lambda: {**planes(), test_process: "pytest"},
                        interval=EGRESS_SAMPLE_SECONDS)
    guard.start()
    yield guard
    guard.stop()
    guard.sample()
    found = guard.take()
    assert not found, "connections off this machine:\n" + "\n".join(map(str, found))


@pytest.fixture(autouse=True)
def no_egress(egress_guard: EgressGuard) -> Iterator[None]:
    """Fails the test during which a watched process held a connection off this machine,
    naming the process and the remote address."""
    yield
    egress_guard.sample()
    if found := egress_guard.take():
        pytest.fail("connections off this machine during this test:\n"
                    + "\n".join(map(str, found)), pytrace=False)


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
