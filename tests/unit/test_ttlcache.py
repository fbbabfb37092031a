from __future__ import annotations

import asyncio

from apiserver.ttlcache import ReviewCache, TTLCache


def test_entries_expire_after_their_ttl():
    now = [0.0]
    cache: TTLCache[str] = TTLCache(clock=lambda: now[0])
    cache.put("a", "1", ttl=10)
    cache.put("b", "2", ttl=0)  # zero TTL: not cached
    now[0] = 9.9
    assert (cache.get("a"), cache.get("b")) == ("1", None)
    now[0] = 10
    assert cache.get("a") is None


def test_oldest_entry_evicted_when_full():
    cache: TTLCache[int] = TTLCache(max_entries=2)
    for key in ("a", "b", "c"):
        cache.put(key, 1, ttl=60)
    assert [cache.get(key) for key in ("a", "b", "c")] == [None, 1, 1]


class Reviews:
    """A review that waits until `answer` is set, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.answer: asyncio.Future[tuple[str, float]] | None = None

    async def review(self) -> tuple[str, float]:
        self.calls += 1
        self.answer = asyncio.get_running_loop().create_future()
        return await self.answer


async def until_asked(reviews: Reviews) -> asyncio.Future[tuple[str, float]]:
    while reviews.answer is None:
        await asyncio.sleep(0)
    return reviews.answer


async def test_concurrent_misses_of_one_key_share_one_review() -> None:
    cache: ReviewCache[str] = ReviewCache()
    reviews = Reviews()
    askers = [asyncio.create_task(cache.get("k", reviews.review)) for _ in range(50)]
    (await until_asked(reviews)).set_result(("allowed", 10))
    assert await asyncio.gather(*askers) == ["allowed"] * 50
    assert await cache.get("k", reviews.review) == "allowed"  # cached now
    assert reviews.calls == 1
    counters = cache.counters
    assert (counters.reviews, counters.cache_misses, counters.cache_hits) == (1, 1, 50)


async def test_an_error_reaches_every_asker_and_is_not_kept() -> None:
    cache: ReviewCache[str] = ReviewCache()
    reviews = Reviews()
    askers = [asyncio.create_task(cache.get("k", reviews.review)) for _ in range(3)]
    (await until_asked(reviews)).set_exception(OSError("kube-apiserver away"))
    results = await asyncio.gather(*askers, return_exceptions=True)
    assert [type(r) for r in results] == [OSError] * 3
    assert cache.counters.errors == 1
    reviews.answer = None
    again = asyncio.create_task(cache.get("k", reviews.review))  # fail closed: asked again
    (await until_asked(reviews)).set_result(("denied", 10))
    assert await again == "denied"
    assert reviews.calls == 2


async def test_a_cancelled_asker_cancels_no_review_and_keys_are_apart() -> None:
    cache: ReviewCache[str] = ReviewCache()
    reviews, other = Reviews(), Reviews()
    first = asyncio.create_task(cache.get("k", reviews.review))
    second = asyncio.create_task(cache.get("k", reviews.review))
    elsewhere = asyncio.create_task(cache.get("j", other.review))
    answer = await until_asked(reviews)
    first.cancel()
    await asyncio.sleep(0)
    answer.set_result(("allowed", 10))
    assert await second == "allowed"
    (await until_asked(other)).set_result(("denied", 0))  # a TTL of 0 is not kept
    assert await elsewhere == "denied"
    assert (reviews.calls, other.calls) == (1, 1)
