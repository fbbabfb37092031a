"""A small bounded cache whose entries expire, and the counters of the reviews it caches."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    """Maps keys to values until each entry's TTL passes; evicts the oldest entry when full."""

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._max_entries = max_entries
        self._clock = clock

    def get(self, key: Hashable) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: Hashable, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries.pop(key, None)
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (self._clock() + ttl, value)


@dataclass
class ReviewCounters:
    """Totals since start: reviews sent, cache hits and misses, reviews that got no answer."""

    reviews: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    errors: int = 0
