"""The local extension server on another storage backend for the length of a test."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from localcluster import __main__ as localcluster
from localcluster import processes
from tests.support.kube import Cluster, wait_until

SERVER = "notifier-apiserver"


def _set_argv(cluster: Cluster, argv: list[str]) -> None:
    tracked = processes.load(cluster.layout.state_file)
    processes.save(cluster.layout.state_file,
                   [dataclasses.replace(p, argv=argv) if p.name == SERVER else p
                    for p in tracked])


@contextlib.contextmanager
def server_with_flags(cluster: Cluster, *flags: str) -> Iterator[None]:
    """Restart the local extension server with `flags` added to its command line; restart it
    as it was afterwards. Yields once the aggregator reaches it."""
    (server,) = [p for p in processes.load(cluster.layout.state_file) if p.name == SERVER]
    original = list(server.argv)
    _set_argv(cluster, [*original, *flags])
    try:
        localcluster.restart(cluster.layout, SERVER)
        wait_until(cluster.served, f"the server with {' '.join(flags)} behind the aggregator",
                   60)
        yield
    finally:
        _set_argv(cluster, original)
        localcluster.restart(cluster.layout, SERVER)
        wait_until(cluster.served, "the server as it was behind the aggregator", 60)
