"""Issue 20, item 3: large bodies do not stop the event loop while they are decoded.

The whole server in-process (``InProcessServer``: build_app, every real component, SQLite), with
a coroutine ticking on its event loop every few milliseconds while three bodies of the largest
size accepted (1 MiB each: 3 MiB being decoded at once) are decoded and validated; ``/readyz``
is asked all the while. The longest gap between two ticks is how long the loop was blocked,
which is what a probe or another request waits: measured on the loop itself rather than through
a socket, so that it does not depend on the network stack's timing.

The old code decoded on the loop: each body blocked it for its whole decode (seconds), the
longest gap a third of the time the three took. Now the loop waits only for a worker thread's
single steps in C (the JSON decoder's pass over a body: tens of milliseconds), which on an idle
machine is well below 100 ms; on a loaded 2-core machine every step takes several times as long,
so the bound asserted is relative (a fifth of the time the bodies took), with the absolute values
printed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Annotated

import pytest

from apiserver.handlers.body import INLINE_BYTES, MAX_BODY_BYTES, by_size
from tests.unit.conftest import Answer, InProcessServer

API = "/apis/notifier.x-k8s.io/v1alpha1"
NS = f"{API}/namespaces/default"
AUTH = {"authorization": f"Bearer {InProcessServer.TOKEN}"}
TICK_SECONDS = 0.005


def notification_yaml(item: str) -> bytes:
    """A Notification whose spec.containers is a YAML flow list as long as a body may be, of
    ``item`` and a last item that is no name (so that it is refused, 422, after all of it was
    read)."""
    head = ("apiVersion: notifier.x-k8s.io/v1alpha1\nkind: Notification\nmetadata: {name: big}\n"
            "spec:\n  selector: {matchLabels: {app: db}}\n  notifier: quiesce\n  containers: [")
    count = (MAX_BODY_BYTES - len(head) - 6) // (len(item) + 2)
    return (head + f"{item}, " * count + "7]\n").encode()


def pod_notifier_json() -> bytes:
    """A PodNotifier of 60,000 labels to validate (db-0 declares no notifier: 404)."""
    labels = {f"k{index}": "v" for index in range(60_000)}
    return json.dumps({"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
                       "metadata": {"labels": labels}, "spec": {"notifier": "quiesce"}}).encode()


LARGE = [
    ("POST", f"{NS}/notifications", "application/yaml", notification_yaml("1"), 422),
    ("POST", f"{NS}/notifications", "application/yaml", notification_yaml("db"), 422),
    ("POST", f"{NS}/pods/db-0/notify", "application/json", pod_notifier_json(), 404),
]


async def measured(server: InProcessServer) -> tuple[list[Answer], float, float, float]:
    """(the answers to LARGE sent at once, how long they took, the longest the loop went
    without ticking, the longest a /readyz took meanwhile)."""
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    probes: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = loop.time()
        while not done.is_set():
            await asyncio.sleep(TICK_SECONDS)
            now = loop.time()
            gaps.append(now - last - TICK_SECONDS)
            last = now

    async def probe() -> None:
        while not done.is_set():
            started = time.monotonic()
            ready = await server.call("GET", b"/readyz", {}, b"")
            probes.append(time.monotonic() - started)
            assert ready.status == 200, ready
            await asyncio.sleep(0.02)

    async def send(method: str, path: str, media_type: str, body: bytes, _: int) -> Answer:
        return await server.call(method, path.encode(), {**AUTH, "content-type": media_type},
                                 body)

    watchers = [asyncio.create_task(tick()), asyncio.create_task(probe())]
    await asyncio.sleep(0.05)
    started = time.monotonic()
    try:
        answers = await asyncio.gather(*(send(*request) for request in LARGE))
    finally:
        took = time.monotonic() - started
        done.set()
        await asyncio.gather(*watchers)
    return list(answers), took, max(gaps), max(probes)


def test_large_bodies_are_decoded_without_blocking_the_loop(in_process_server: InProcessServer
                                                            ) -> None:
    answers, took, blocked, probed = in_process_server.run(measured(in_process_server), 300)
    print(f"3 MiB decoded in {took:.2f} s; the loop blocked at most {blocked:.3f} s, a /readyz "
          f"took at most {probed:.3f} s")
    assert [answer.status for answer in answers] == [code for *_, code in LARGE], answers
    assert blocked < took / 5 and probed < took / 5, (took, blocked, probed)


async def test_a_small_body_is_worked_on_the_loop_and_a_large_one_in_a_worker_thread() -> None:
    """A thread hop costs more than decoding a body of a few hundred bytes: every notify's
    body is one of those."""
    loop_thread = threading.get_ident()
    assert await by_size(INLINE_BYTES, threading.get_ident) == loop_thread
    assert await by_size(INLINE_BYTES + 1, threading.get_ident) != loop_thread
    assert await by_size(None, threading.get_ident) != loop_thread  # a size not known


# Each step a worker thread takes without releasing the GIL is bounded too: the loop waits for
# it. These were seconds for a 1 MiB body.


def test_a_list_of_wrong_items_stops_at_the_first_one() -> None:
    """pydantic made (and ``Invalid`` read) one error per wrong item, which ``Invalid`` then
    worded as one problem anyway."""
    from pydantic import TypeAdapter, ValidationError

    from apiserver.api.model import Invalid
    from apiserver.api.types import ContainerNames

    with pytest.raises(ValidationError) as raised:
        TypeAdapter(Annotated[list[str], Invalid("must be names")]).validate_python([1] * 1000)
    assert raised.value.error_count() == 1
    with pytest.raises(ValidationError) as raised:
        TypeAdapter(ContainerNames).validate_python(["a", *([1] * 1000)])
    assert raised.value.error_count() == 1


def test_a_value_is_encoded_only_as_far_as_a_message_shows_it() -> None:
    from apiserver.api.field_errors import show

    unencodable = object()  # json.dumps of the whole would raise TypeError
    assert show([1] * 200 + [unencodable]) == "[" + "1, " * 38 + "1,..."
    assert show({"a": "\x1b" * 200, "b": unencodable}).startswith('{"a": "\\u001b')
