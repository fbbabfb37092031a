from __future__ import annotations

from apiserver.ttlcache import TTLCache


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
