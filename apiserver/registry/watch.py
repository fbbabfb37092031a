"""Watches: per-watcher bounded event queues and the fan-out of committed changes."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from apiserver.registry.errors import Expired, StoreError
from apiserver.registry.objects import metadata
from apiserver.registry.resources import ResourceType
from apiserver.registry.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)

DEFAULT_MAX_QUEUED_EVENTS = 1000


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class Change:
    """One committed write, as the store publishes it.

    ``object`` is the object after the write; for a deletion, its last state stamped with the
    deletion's resourceVersion. ``previous`` is the state a modification replaced.
    """

    type: EventType
    object: dict[str, Any]
    previous: dict[str, Any] | None = None


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: dict[str, Any]


@dataclass(frozen=True)
class WatchFilter:
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = metadata(obj)
        return (
            (self.namespace is None or meta.get("namespace") == self.namespace)
            and self.labels.matches(meta.get("labels"))
            and self.fields.matches(obj)
        )

    def event_for(self, change: Change) -> WatchEvent | None:
        """What this watcher sees of a change, like the Kubernetes watch cache.

        A modification that makes an object match is ADDED; one that makes it stop matching is
        DELETED, with the previous state and the modification's resourceVersion.
        """
        matches = self.matches(change.object)
        if change.type is not EventType.MODIFIED or change.previous is None:
            return WatchEvent(change.type, change.object) if matches else None
        matched = self.matches(change.previous)
        if matches:
            return WatchEvent(EventType.MODIFIED if matched else EventType.ADDED, change.object)
        if not matched:
            return None
        gone = copy.deepcopy(change.previous)
        gone["metadata"]["resourceVersion"] = metadata(change.object)["resourceVersion"]
        return WatchEvent(EventType.DELETED, gone)


class Watch:
    """An async iterator of ``WatchEvent``: the initial events, then changes as they commit.

    At most ``max_queued`` undelivered changes are held. A watcher that falls further behind is
    closed: its queue is dropped and iteration raises ``Expired``, so the client lists again.
    Iteration ends when the watch or the store is closed. Event objects are shared between
    watchers: treat them as read-only.
    """

    def __init__(
        self,
        initial: Iterable[Change],
        selection: WatchFilter,
        *,
        max_queued: int = DEFAULT_MAX_QUEUED_EVENTS,
        on_close: Callable[[Watch], None] = lambda watch: None,
    ) -> None:
        self._filter = selection
        self._initial = deque(e for e in map(selection.event_for, initial) if e is not None)
        self._queued: deque[WatchEvent] = deque()
        self._max_queued = max_queued
        self._on_close = on_close
        self._wakeup = asyncio.Event()
        self._error: StoreError | None = None
        self._closed = False

    def offer(self, change: Change) -> None:
        """Queue a committed change if this watcher sees it (called by the store, in order)."""
        event = self._filter.event_for(change)
        if event is None or self._closed:
            return
        if len(self._queued) >= self._max_queued:
            self._end(
                Expired(
                    f"the watcher fell more than {self._max_queued} events behind and was "
                    "closed; list again and watch from the list's resourceVersion"
                )
            )
            return
        self._queued.append(event)
        self._wakeup.set()

    def close(self) -> None:
        """Stop watching; iteration ends after nothing more."""
        self._end(None)

    def _end(self, error: StoreError | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._error = error
        self._initial.clear()
        self._queued.clear()
        self._wakeup.set()
        self._on_close(self)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._initial:
                return self._initial.popleft()
            if self._queued:
                return self._queued.popleft()
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()


class WatchHub:
    """The open watches of one resource; the store publishes each committed change here."""

    def __init__(self) -> None:
        self._watches: set[Watch] = set()

    def add(self, watch: Watch) -> None:
        self._watches.add(watch)

    def remove(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def publish(self, change: Change) -> None:
        for watch in list(self._watches):
            watch.offer(change)

    def close_all(self) -> None:
        for watch in list(self._watches):
            watch.close()


def selection(resource: ResourceType, namespace: str | None, labels: str, fields: str
              ) -> WatchFilter:
    """Which objects a list, watch or deletecollection means; 400 for a bad selector."""
    return WatchFilter(namespace, parse_label_selector(labels),
                       parse_field_selector(fields, resource.selectable_fields))
