"""Fixtures of the cluster run: the Kubernetes storage backend on the real control plane for
the storage-level suites that tests/unit runs against SQLite and the fake API.

A module of tests/cluster that re-runs such a suite star-imports it and sets
``BACKEND_SUITE = True``: of its tests only those that use ``backend`` are collected here (the
others need no control plane and run in tests/unit)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.backends import Backend, kubernetes_backend
from tests.support.kube import Cluster


@pytest.fixture
async def backend(cluster: Cluster) -> AsyncIterator[Backend]:
    async with kubernetes_backend(cluster) as opened:
        try:
            yield opened
        finally:
            opened.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        module = getattr(item, "module", None)
        suite = getattr(module, "BACKEND_SUITE", False)
        uses_backend = "backend" in getattr(item, "fixturenames", ())
        (dropped if suite and not uses_backend else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
