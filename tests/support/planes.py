"""A second local control plane beside the session's, for tests that must own a whole plane
(install it differently, restart it with other flags) without disturbing the shared one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from localcluster import __main__ as localcluster
from localcluster.layout import REPO_ROOT, Layout, Ports
from tests.support.kube import Cluster

PORT_SHIFT = 37
"""How far every port of an extra plane is moved from the session plane's (so several
checkouts that move their session plane by multiples of 100 never collide)."""


def shifted_ports(shift: int = PORT_SHIFT) -> Ports:
    """The session plane's ports, each moved by `shift`."""
    base = Ports()
    return Ports(**{f.name: getattr(base, f.name) + shift for f in dataclasses.fields(Ports)})


WORKER_PORT_SHIFT = 100
"""How far each pytest-xdist worker's session plane is moved from the first worker's (a
multiple of 100, as another checkout's session plane, so an extra plane's PORT_SHIFT never
meets one)."""


def worker_plane_environment(worker: str) -> dict[str, str]:
    """What gives pytest-xdist worker `worker` (``gw0``, ``gw1``, ...) a session plane of its own:
    ``gw0`` keeps the plane a run without workers uses (nothing to change); ``gwN`` keeps its
    state beside it in ``<state>-gwN/`` with every port moved by N * WORKER_PORT_SHIFT."""
    index = int(worker.removeprefix("gw"))
    if index == 0:
        return {}
    session = Layout.default().root
    return {"CN_CLUSTER_DIR": str(session.with_name(f"{session.name}-{worker}")),
            **{variable: str(port) for variable, port
               in shifted_ports(index * WORKER_PORT_SHIFT).by_variable().items()}}


@contextmanager
def extra_plane(name: str, nodes: int = 2, **up: Any) -> Iterator[Cluster]:
    """Start a plane in `.cluster-<name>/` on shifted ports (`up` passes on to
    `localcluster.up`), yield it, and stop it and remove its directory."""
    layout = Layout(REPO_ROOT / f".cluster-{name}")
    ports = shifted_ports()
    localcluster.down(layout, quiet=True)
    try:
        localcluster.up(layout, ports, nodes, **up)
        yield Cluster(layout, ports, localcluster.build_binaries())
    finally:
        localcluster.down(layout, quiet=True)
