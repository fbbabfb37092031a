"""A small bounded cache whose entries expire, the cache of review answers built on it, and the
counters of the reviews it caches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
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


class ReviewCache(Generic[V]):
    """Review answers (TokenReviews, SubjectAccessReviews) by key, each kept for the TTL its
    review gives it; errors are never kept (fail closed: the next request asks again). A key
    is reviewed once at a time: requests that miss while its review is under way share that
    review's answer (or error), so a burst of them (a fan-out's parallel pods when the answer
    expires) costs kube-apiserver one review, not one each. Counts into `counters`: a shared
    answer is a cache hit."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cache: TTLCache[V] = TTLCache(clock=clock)
        self._under_way: dict[Hashable, asyncio.Task[tuple[V, float]]] = {}
        self.counters = ReviewCounters()

    async def get(self, key: Hashable, review: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The answer for `key`: cached, shared with the review under way, or from a new
        `review()`, which returns the answer and how long to keep it (seconds)."""
        cached = self._cache.get(key)
        if cached is not None:
            self.counters.cache_hits += 1
            return cached
        under_way = self._under_way.get(key)
        if under_way is None:
            self.counters.cache_misses += 1
            self.counters.reviews += 1
            under_way = self._under_way[key] = asyncio.ensure_future(review())
            under_way.add_done_callback(lambda done: self._reviewed(key, done))
        else:
            self.counters.cache_hits += 1
        answer, _ = await asyncio.shield(under_way)  # one asker cancelled cancels no review
        return answer

    def _reviewed(self, key: Hashable, done: asyncio.Task[tuple[V, float]]) -> None:
        if self._under_way.get(key) is done:
            del self._under_way[key]
        if done.cancelled():
            return
        error = done.exception()  # retrieved here, whether or not an asker is still waiting
        if error is not None:
            self.counters.errors += 1
            return
        answer, ttl = done.result()
        self._cache.put(key, answer, ttl)
