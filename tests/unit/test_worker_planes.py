"""Each pytest-xdist worker's session plane (tests/support/planes.py): the first keeps the plane
of a run without workers, the others their own state directory and ports, none shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster.layout import PORT_VARIABLES, Layout, Ports
from tests.support.planes import WORKER_PORT_SHIFT, shifted_ports, worker_plane_environment


@pytest.fixture(autouse=True)
def default_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, _ in PORT_VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("CN_CLUSTER_DIR", raising=False)


def test_the_first_worker_keeps_the_default_plane() -> None:
    assert worker_plane_environment("gw0") == {}


def test_a_later_worker_moves_every_port_and_the_state_directory() -> None:
    moved = worker_plane_environment("gw2")
    assert moved["CN_CLUSTER_DIR"] == str(Layout.default().root.with_name(".cluster-gw2"))
    assert {variable: int(moved[variable]) for variable, _ in PORT_VARIABLES.values()} == {
        variable: default + 2 * WORKER_PORT_SHIFT for variable, default in PORT_VARIABLES.values()}


def test_ports_are_read_when_made_so_a_worker_that_moves_them_gets_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CN_CLUSTER_DIR", "/nonexistent/.cluster")
    for variable, value in worker_plane_environment("gw1").items():
        monkeypatch.setenv(variable, value)
    assert Ports().apiserver == PORT_VARIABLES["apiserver"][1] + WORKER_PORT_SHIFT
    assert Layout.default().root == Path("/nonexistent/.cluster-gw1")


def test_no_two_workers_nor_their_extra_planes_share_a_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    for worker in ("gw0", "gw1", "gw2"):
        with monkeypatch.context() as worker_process:
            for variable, value in worker_plane_environment(worker).items():
                worker_process.setenv(variable, value)
            for ports in (Ports(), shifted_ports()):
                used += ports.by_variable(replicas=2).values()
    assert len(used) == len(set(used)) == 3 * 2 * (len(PORT_VARIABLES) + 2)
