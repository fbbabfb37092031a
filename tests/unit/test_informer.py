"""The informer against a scripted fake kube-apiserver (httpx.MockTransport), one test per
failure it must survive, with an injected clock and sleep so that backoff can be measured."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from apiserver.kube import METADATA_ONLY, METADATA_ONLY_WATCH, Connection, KubeClient
from apiserver.kube.informer import (
    CONTROLLER,
    NAMESPACE,
    STANDARD_INDEXES,
    UID,
    Backoff,
    Handlers,
    Informer,
    strip_managed_fields,
)

PATH = "/api/v1/pods"


def obj(name: str, uid: str = "", rv: str = "1", namespace: str = "ns",
        owner: str = "", **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid or f"u-{name}",
                            "resourceVersion": rv}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": owner,
                                    "controller": True}]
    return {"metadata": meta, **fields}


def listing(items: list[dict[str, Any]] | None, rv: str, cont: str = "") -> httpx.Response:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return httpx.Response(200, json={"kind": "List", "metadata": meta, "items": items})


def event(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": body}


def bookmark(rv: str) -> dict[str, Any]:
    return event("BOOKMARK", {"metadata": {"resourceVersion": rv}})


def error_event(code: int, reason: str = "Expired") -> dict[str, Any]:
    return event("ERROR", {"kind": "Status", "code": code, "reason": reason, "message": "m"})


def events(*items: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, content="".join(json.dumps(e) + "\n" for e in items).encode())


def dropped_after(*items: dict[str, Any]) -> httpx.Response:
    """A watch stream that sends `items`, then loses its connection."""

    async def body() -> AsyncIterator[bytes]:
        for item in items:
            yield (json.dumps(item) + "\n").encode()
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    return httpx.Response(200, content=body())


def status(code: int, reason: str = "") -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "reason": reason,
                                      "message": f"answered {code}"})


Step = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class FakeAPI:
    """Answers requests with `steps` in order (`default` once they run out: a callable
    answering every later request; without one, later requests hang until cancelled)."""

    def __init__(self, steps: list[Step],
                 default: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.steps = list(steps)
        self.default = default
        self.requests: list[httpx.Request] = []
        self.hanging = 0

    def idle(self) -> bool:
        """Every step answered and the next request waiting (for ever)."""
        return self.hanging > 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.steps:
            if self.default is None:
                self.hanging += 1
                await asyncio.Event().wait()
                raise AssertionError("unreachable")
            return self.default(request)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(request)
        return step

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))

    def calls(self) -> list[tuple[str, dict[str, str]]]:
        """("list" or "watch", query parameters) of each request."""
        return [("watch" if r.url.params.get("watch") == "true" else "list", dict(r.url.params))
                for r in self.requests]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def handlers(self) -> Handlers:
        return Handlers(
            on_add=lambda o: self.seen.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.seen.append(
                ("update", new["metadata"]["name"], old["metadata"]["resourceVersion"],
                 new["metadata"]["resourceVersion"])),
            on_delete=lambda o: self.seen.append(("delete", o["metadata"]["name"])))


def informer(api: FakeAPI, time: FakeTime | None = None, **kwargs: Any) -> Informer:
    time = time or FakeTime()
    kwargs.setdefault("rand", lambda: 0.5)
    return Informer(api.client(), PATH, name="test", clock=time.clock, sleep=time.sleep,
                    **kwargs)


async def run_until(inf: Informer, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                if task.done():
                    task.result()
                    raise AssertionError("the informer ended")
                await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# listing, watching, the cache


async def test_lists_page_by_page_then_watches_from_the_list_resource_version() -> None:
    api = FakeAPI([listing([obj("a")], "5", cont="page2"), listing([obj("b")], "7"),
                   events(event("ADDED", obj("c", rv="8")),
                          event("MODIFIED", obj("a", rv="9")))])
    inf = informer(api, page_size=2)
    rec = Recorder()
    inf.add_handlers(rec.handlers())
    await run_until(inf, api.idle)

    calls = api.calls()
    assert calls[0] == ("list", {"limit": "2"})
    assert calls[1] == ("list", {"limit": "2", "continue": "page2"})
    kind, watch = calls[2]
    assert kind == "watch"
    assert (watch["resourceVersion"], watch["allowWatchBookmarks"]) == ("7", "true")
    assert 300 <= int(watch["timeoutSeconds"]) < 600
    assert calls[3][1]["resourceVersion"] == "9"  # resumed after the stream ended
    assert inf.has_synced()
    assert sorted(o["metadata"]["name"] for o in inf.list()) == ["a", "b", "c"]
    assert inf.get("ns", "a")["metadata"]["resourceVersion"] == "9"
    assert inf.get("ns", "zzz") is None
    assert rec.seen == [("add", "a"), ("add", "b"), ("add", "c"), ("update", "a", "1", "9")]


async def test_an_empty_list_with_null_items_syncs() -> None:
    api = FakeAPI([listing(None, "3")])
    inf = informer(api)
    await run_until(inf, inf.has_synced)
    assert inf.list() == []
    assert inf.resource_version == "3"


async def test_not_synced_until_the_first_list_is_in() -> None:
    api = FakeAPI([])  # the list hangs
    inf = informer(api)
    await run_until(inf, api.idle)
    assert not inf.has_synced() and not inf.synced.is_set()


async def test_metadata_only_asks_for_partial_object_metadata() -> None:
    api = FakeAPI([listing([obj("a")], "5"), events()])
    inf = informer(api, metadata_only=True)
    await run_until(inf, api.idle)
    accepts = [r.headers["accept"] for r in api.requests]
    assert accepts == [METADATA_ONLY, METADATA_ONLY_WATCH, METADATA_ONLY_WATCH]


async def test_params_narrow_both_list_and_watch() -> None:
    api = FakeAPI([listing([], "5"), events()])
    inf = informer(api, params={"fieldSelector": "metadata.name=x"})
    await run_until(inf, api.idle)
    assert all(p["fieldSelector"] == "metadata.name=x" for _, p in api.calls())


async def test_transform_trims_what_is_cached_and_handed_to_handlers() -> None:
    def trim(o: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": o["metadata"], "keep": o.get("keep")}

    api = FakeAPI([listing([obj("a", keep=1, drop="x" * 1000)], "5"),
                   events(event("ADDED", obj("b", keep=2, drop="y")))])
    inf = informer(api, transform=trim)
    added: list[dict[str, Any]] = []
    inf.add_handlers(Handlers(on_add=added.append))
    await run_until(inf, lambda: inf.get("ns", "b") is not None)
    assert all("drop" not in o for o in inf.list() + added)
    assert inf.get("ns", "a")["keep"] == 1


def test_strip_managed_fields_drops_them_alone_and_leaves_the_object_given_unchanged() -> None:
    given = {"kind": "X", "metadata": {"name": "a", "resourceVersion": "5",
                                       "managedFields": [{"manager": "m"}]}, "spec": {"k": 1}}
    stripped = strip_managed_fields(given)
    assert stripped == {"kind": "X", "metadata": {"name": "a", "resourceVersion": "5"},
                        "spec": {"k": 1}}
    assert given["metadata"]["managedFields"] == [{"manager": "m"}]
    plain = {"metadata": {"name": "b"}}
    assert strip_managed_fields(plain) is plain


async def test_indexes_follow_adds_updates_and_deletes() -> None:
    api = FakeAPI([listing([obj("a", owner="rs1"), obj("b", owner="rs1", namespace="other")],
                           "5"),
                   events(event("MODIFIED", obj("a", rv="6", owner="rs2")),
                          event("DELETED", obj("b", rv="7", owner="rs1", namespace="other")))])
    inf = informer(api, indexes=STANDARD_INDEXES)
    await run_until(inf, lambda: inf.get("other", "b") is None and inf.has_synced())

    def names(index: str, value: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in inf.by_index(index, value))

    assert names(CONTROLLER, "rs1") == []
    assert names(CONTROLLER, "rs2") == ["a"]
    assert names(NAMESPACE, "ns") == ["a"]
    assert names(NAMESPACE, "other") == []
    assert names(UID, "u-a") == ["a"]
    with pytest.raises(KeyError, match="no index named 'nope'"):
        inf.by_index("nope", "x")


async def test_a_failing_handler_does_not_stop_the_others_or_the_informer() -> None:
    api = FakeAPI([listing([obj("a")], "5"), events(event("ADDED", obj("b", rv="6")))])
    inf = informer(api)

    def boom(o: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    rec = Recorder()
    inf.add_handlers(Handlers(on_add=boom))
    inf.add_handlers(rec.handlers())
    await run_until(inf, lambda: inf.get("ns", "b") is not None)
    assert rec.seen == [("add", "a"), ("add", "b")]


async def test_late_handlers_get_the_cached_objects_as_adds() -> None:
    api = FakeAPI([listing([obj("a"), obj("b")], "5")])
    inf = informer(api)
    await run_until(inf, inf.has_synced)
    rec = Recorder()
    inf.add_handlers(rec.handlers())
    assert sorted(rec.seen) == [("add", "a"), ("add", "b")]


# each failure


async def test_410_answer_to_the_watch_lists_again() -> None:
    api = FakeAPI([listing([obj("a")], "5"), status(410, "Expired"),
                   listing([obj("a", rv="20")], "21")])
    time = FakeTime()
    inf = informer(api, time)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]
    assert api.calls()[3][1]["resourceVersion"] == "21"
    assert len(time.sleeps) == 1 and time.sleeps[0] <= 0.8


async def test_error_410_event_lists_again() -> None:
    api = FakeAPI([listing([obj("a")], "5"),
                   events(event("MODIFIED", obj("a", rv="6")), error_event(410)),
                   listing([obj("a", rv="30")], "31")])
    inf = informer(api)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]
    assert inf.get("ns", "a")["metadata"]["resourceVersion"] == "30"
    assert api.calls()[3][1]["resourceVersion"] == "31"


async def test_other_error_event_backs_off_and_lists_again() -> None:
    api = FakeAPI([listing([obj("a")], "5"), events(error_event(500, "InternalError")),
                   listing([obj("a")], "8")])
    time = FakeTime()
    inf = informer(api, time)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]
    assert len(time.sleeps) == 1


async def test_dropped_connection_mid_stream_resumes_the_watch_without_listing() -> None:
    api = FakeAPI([listing([obj("a")], "5"),
                   dropped_after(event("ADDED", obj("b", rv="6"))),
                   events(event("ADDED", obj("c", rv="7")))])
    time = FakeTime()
    inf = informer(api, time)
    await run_until(inf, api.idle)
    assert inf.get("ns", "c") is not None
    calls = api.calls()
    assert [kind for kind, _ in calls] == ["list", "watch", "watch", "watch"]
    assert calls[2][1]["resourceVersion"] == "6"
    assert len(time.sleeps) == 2  # after the drop, and after the next watch ended at once
    assert inf.get("ns", "b") is not None


async def test_503_and_refused_connections_are_retried_with_growing_delays() -> None:
    api = FakeAPI([status(503), httpx.ConnectError("refused"), status(503),
                   listing([obj("a")], "5"), status(503),
                   events(event("ADDED", obj("b", rv="6")))])
    time = FakeTime()
    inf = informer(api, time, backoff=Backoff(initial=1, maximum=30, jitter=0.5,
                                              random=lambda: 0.0))
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == [
        "list", "list", "list", "list", "watch", "watch", "watch"]
    assert api.calls()[5][1]["resourceVersion"] == "5"  # the 503 watch resumed, no list
    assert time.sleeps == [1, 2, 4, 8, 16]  # the last: that watch ended at once


async def test_a_410_after_a_long_watch_lists_again_at_once() -> None:
    """After kube-apiserver restarts, the resumed watch's resourceVersion is gone: the cache
    relists with no backoff, or it would stay stale."""
    time = FakeTime()

    def long_watch_then_410(request: httpx.Request) -> httpx.Response:
        time.now += 60
        return status(410, "Expired")

    api = FakeAPI([listing([obj("a")], "5"), long_watch_then_410,
                   listing([obj("a", rv="20")], "21")])
    inf = informer(api, time)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]
    assert time.sleeps == []


async def test_an_unavailable_kube_apiserver_is_retried_at_once_when_it_answers_again() -> None:
    """The backoff after a 503 (here an hour, never ending by itself) ends as soon as the
    same client's other request (a Lease renewal) is answered."""
    api = FakeAPI([listing([obj("a")], "5"), status(503), listing([], "9"),
                   events(event("ADDED", obj("b", rv="6")))])
    kube = api.client()
    slept: list[float] = []

    async def forever(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.Event().wait()

    inf = Informer(kube, PATH, name="test", sleep=forever,
                   backoff=Backoff(initial=3600, maximum=3600, random=lambda: 0.0))
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(5):
            while not slept:
                await asyncio.sleep(0.001)
            await kube.get("/api/v1/namespaces/other/configmaps")  # answered: it is back
            while inf.get("ns", "b") is None:
                await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert slept[0] == 3600  # then the watch resumed at once, not an hour later
    kind, params = api.calls()[3]
    assert (kind, params["resourceVersion"]) == ("watch", "5")


async def test_after_an_outage_403_and_429_while_kube_apiserver_starts_end_early_too() -> None:
    """A kube-apiserver just started answers 403 (authorizer not synced) and 429 (storage
    initializing): until the informer has listed again, each backoff ends at the next answer
    to another request, not after its delay."""
    api = FakeAPI([listing([obj("a")], "5"), status(503), listing([], "1"), status(410),
                   listing([], "1"), status(403, "Forbidden"), listing([], "1"),
                   status(429, "TooManyRequests"), listing([], "1"),
                   listing([obj("b", rv="30")], "31"), events()])
    kube = api.client()
    slept: list[float] = []

    async def forever(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.Event().wait()

    inf = Informer(kube, PATH, name="test", sleep=forever,
                   backoff=Backoff(initial=3600, maximum=3600, random=lambda: 0.0))
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(5):
            for backoffs in range(1, 5):  # after the 503, the 410, the 403 and the 429
                while len(slept) < backoffs:
                    await asyncio.sleep(0.001)
                await kube.get("/api/v1/namespaces/other/configmaps")  # another answer
            while inf.get("ns", "b") is None:
                await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert inf.get("ns", "a") is None  # relisted


async def test_a_403_without_an_outage_backs_off_its_whole_delay() -> None:
    api = FakeAPI([status(403, "Forbidden"), listing([], "1")])
    kube = api.client()
    time = FakeTime()
    inf = Informer(kube, PATH, name="test", clock=time.clock, sleep=time.sleep,
                   backoff=Backoff(initial=7, maximum=7, random=lambda: 0.0))
    await run_until(inf, api.idle)
    assert time.sleeps == [7]


async def test_other_error_answers_back_off_and_list_again() -> None:
    api = FakeAPI([listing([obj("a")], "5"), status(403, "Forbidden"), listing([], "6")])
    time = FakeTime()
    inf = informer(api, time)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]
    assert len(time.sleeps) == 1


async def test_a_malformed_event_lists_again() -> None:
    api = FakeAPI([listing([obj("a")], "5"), events({"type": "SURPRISE", "object": {}}),
                   listing([], "6")])
    inf = informer(api)
    await run_until(inf, api.idle)
    assert [kind for kind, _ in api.calls()] == ["list", "watch", "list", "watch"]


async def test_bookmarks_advance_the_resource_version_and_touch_nothing() -> None:
    api = FakeAPI([listing([obj("a")], "5"), events(bookmark("12")), events(bookmark("15"))])
    inf = informer(api)
    rec = Recorder()
    inf.add_handlers(rec.handlers())
    await run_until(inf, api.idle)
    resumed = [params["resourceVersion"] for kind, params in api.calls() if kind == "watch"]
    assert resumed == ["5", "12", "15"]
    assert inf.resource_version == "15"
    assert rec.seen == [("add", "a")]
    assert [o["metadata"]["name"] for o in inf.list()] == ["a"]


async def test_a_relist_reports_what_was_deleted_meanwhile() -> None:
    api = FakeAPI([listing([obj("a"), obj("b"), obj("c", uid="old")], "5"), status(410),
                   listing([obj("b", rv="9"), obj("c", uid="new", rv="9"), obj("d")], "10")])
    inf = informer(api, indexes={UID: STANDARD_INDEXES[UID]})
    rec = Recorder()
    inf.add_handlers(rec.handlers())
    listed: list[int] = []
    inf.add_handlers(Handlers(on_listed=lambda: listed.append(len(inf.list()))))
    await run_until(inf, api.idle)
    assert rec.seen[3:] == [("delete", "a"), ("delete", "c"), ("update", "b", "1", "9"),
                            ("add", "c"), ("add", "d")]
    assert listed == [3, 3]  # after each list, with the list's contents in the cache
    assert sorted(o["metadata"]["name"] for o in inf.list()) == ["b", "c", "d"]
    assert inf.by_index(UID, "old") == []
    assert [o["metadata"]["uid"] for o in inf.by_index(UID, "new")] == ["new"]


async def test_deleted_events_and_replaced_uids() -> None:
    api = FakeAPI([listing([obj("a"), obj("b", uid="b1")], "5"),
                   events(event("DELETED", obj("a", rv="6")),
                          event("ADDED", obj("b", uid="b2", rv="7")),
                          event("DELETED", obj("b", uid="b1", rv="8")))])
    inf = informer(api)
    rec = Recorder()
    inf.add_handlers(rec.handlers())
    await run_until(inf, api.idle)
    assert rec.seen[2:] == [("delete", "a"), ("delete", "b"), ("add", "b"), ("delete", "b")]
    # the late DELETED of the old UID leaves the new object cached
    assert inf.get("ns", "b")["metadata"]["uid"] == "b2"
    assert inf.get("ns", "a") is None


# backoff


def test_backoff_is_exponential_capped_and_jittered() -> None:
    draws = iter([0.0, 1.0, 0.5] * 10)
    backoff = Backoff(initial=1, maximum=10, factor=2, jitter=0.5, random=lambda: next(draws))
    delays = [backoff.delay() for _ in range(8)]
    assert delays == [1.0, 1.0, 3.0, 8.0, 5.0, 7.5, 10.0, 5.0]
    assert all(d <= 10 for d in delays)
    backoff.reset()
    assert backoff.delay() == 0.75  # the initial delay again, with the next draw's jitter


def test_backoff_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=5, maximum=1)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=1.5)


async def test_delays_stay_capped_and_vary_while_kube_apiserver_is_down() -> None:
    import random

    api = FakeAPI([], default=lambda request: status(503))
    time = FakeTime()
    inf = informer(api, time, backoff=Backoff(initial=0.8, maximum=30,
                                              random=random.Random(7).random))
    await run_until(inf, lambda: time.now > 600)
    assert max(time.sleeps) <= 30
    assert min(time.sleeps[6:]) >= 15  # at the cap, jittered within [15, 30]
    assert len({round(s, 6) for s in time.sleeps[6:]}) == len(time.sleeps[6:])


async def test_backoff_resets_after_a_healthy_watch() -> None:
    time = FakeTime()

    def long_watch(request: httpx.Request) -> httpx.Response:
        time.now += 120  # the watch stayed open two minutes before the connection dropped
        return dropped_after(event("ADDED", obj("b", rv="6")))

    api = FakeAPI([status(503), status(503), status(503), listing([], "5"), long_watch,
                   status(503)])
    inf = informer(api, time, backoff=Backoff(initial=1, maximum=30, random=lambda: 0.0))
    await run_until(inf, api.idle)
    assert time.sleeps == [1, 2, 4, 1, 2]


@pytest.mark.parametrize("answer", [
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else status(410), id="every-watch-410"),
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else events(error_event(410)), id="every-watch-error-410"),
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else events(), id="every-watch-ends-at-once"),
    pytest.param(lambda r: status(503), id="always-503"),
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else status(503), id="every-watch-503"),
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else events(bookmark("6")), id="every-watch-one-bookmark-then-ends"),
    pytest.param(lambda r: listing([], "5") if r.url.params.get("watch") != "true"
                 else events(error_event(500, "InternalError")), id="every-watch-error-500"),
])
async def test_no_hot_loop(answer: Callable[[httpx.Request], httpx.Response]) -> None:
    """Over ten fake minutes of a kube-apiserver giving the same bad answer, the informer
    makes a bounded number of requests (the bug it replaces made 1000 in half a second)."""
    api = FakeAPI([], default=answer)
    time = FakeTime()
    inf = informer(api, time)
    await run_until(inf, lambda: time.now >= 600 or len(api.requests) > 1000)
    assert time.now >= 600
    print(f"{len(api.requests)} requests in 600 fake seconds")
    assert len(api.requests) <= 2 * (600 / 15 + 8)
