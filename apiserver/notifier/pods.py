"""Which pods exist, and when one is deleted: a view of the replica's one pod informer.

It reads each pod's UID from the informer the pod cache runs (``notifier.podcache``: one
cluster-wide pod watch per replica serves both), so that runs learn at once when their pod is
deleted (one watch for the whole server instead of one per run) and garbage collection can tell
which records belong to pods that no longer exist.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from apiserver.kube.informer import Handlers, Informer


class PodDirectory:
    """The pod index on `informer`, an informer of all pods that its owner runs (the pod
    cache's); `synced` is set once its first list is in."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.informer.add_handlers(Handlers(on_delete=self._deleted))
        self._waiters: dict[tuple[str, str, str], set[asyncio.Event]] = {}
        self.deletions = 0
        """How many pod deletions the index has seen (including those a relist found); records
        can only become orphans when it grows (or when the server starts)."""

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list has been read."""
        return self.informer.synced

    def gone(self, namespace: str, name: str, uid: str) -> bool:
        """True if the index is synced and that pod (that UID) no longer exists."""
        if not self.synced.is_set():
            return False
        pod = self.informer.get(namespace, name)
        return pod is None or pod["metadata"].get("uid") != uid

    @contextlib.contextmanager
    def deletion(self, namespace: str, name: str, uid: str) -> Iterator[asyncio.Event]:
        """An event set when the pod with that UID is deleted (or already is)."""
        event = asyncio.Event()
        key = (namespace, name, uid)
        self._waiters.setdefault(key, set()).add(event)
        if self.gone(namespace, name, uid):
            event.set()
        try:
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    def _deleted(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.deletions += 1
        for event in self._waiters.get((meta.get("namespace", ""), meta["name"],
                                        meta.get("uid", "")), ()):
            event.set()
