"""Watch responses: a store watch streamed as one JSON event per line, each sent at once.

A resourceVersion that is too old (410) or too new is reported, as kube-apiserver does once the
request is valid, as a 200 response carrying one ``ERROR`` event with the Status. A watch ends
when ``timeoutSeconds`` pass (default: a random 30 to 60 minutes, as kube-apiserver picks), when
the client disconnects, when the store closes, or when its ``Watches`` is stopped; each way
releases the store's watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from apiserver.api import status
from apiserver.api.media import JSON_MEDIA_TYPE
from apiserver.handlers.negotiation import Renderer
from apiserver.handlers.options import ListOptions
from apiserver.registry.errors import BadRequest, StoreError
from apiserver.registry.store import ListResult, ObjectStore
from apiserver.registry.watch import Watch

MIN_REQUEST_TIMEOUT_SECONDS = 1800
"""kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts a random
duration between this and twice this."""
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class Watches:
    """The open watch streams of a server, so that its shutdown can end them cleanly.

    uvicorn waits for open responses before it runs the lifespan shutdown (which closes the
    stores): a server that calls ``stop`` as its shutdown starts does not hold watches until
    the graceful timeout. Every collection router of the server shares one ``Watches``.
    """

    def __init__(self) -> None:
        self._open: dict[Watch, str] = {}
        """Each open watch and the resource (plural) it watches."""
        self._stopped = False

    def count(self, resource: str) -> int:
        """How many watch streams of `resource` (its plural) are open now."""
        return sum(1 for held in self._open.values() if held == resource)

    def stop(self) -> None:
        """End every open watch stream, and any opened from now on, after its current event."""
        self._stopped = True
        for watch in list(self._open):
            watch.close()

    @contextlib.contextmanager
    def holding(self, watch: Watch, timeout: float, resource: str = "") -> Iterator[None]:
        """Within: ``watch`` (a watch of `resource`, counted by ``count``) is closed by ``stop``
        or after ``timeout`` seconds. After: closed, whichever way the block ends."""
        self._open[watch] = resource
        if self._stopped:
            watch.close()
        deadline = asyncio.get_running_loop().call_later(timeout, watch.close)
        try:
            yield
        finally:
            deadline.cancel()
            watch.close()
            self._open.pop(watch, None)


class WatchResponse(StreamingResponse):
    """The lines of a store watch, streamed until the watch ends; its ``Watches`` holds it.

    Starlette's StreamingResponse sends each line as it comes (chunked: no Content-Length) and,
    under uvicorn's HTTP servers (ASGI spec 2.3), ends the stream when the client disconnects.
    """

    def __init__(self, lines: AsyncIterator[bytes], *, watch: Watch, watches: Watches,
                 timeout: float, resource: str) -> None:
        super().__init__(lines, media_type=JSON_MEDIA_TYPE)
        self._watch = watch
        self._resource = resource
        self._watches = watches
        self._timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self._watches.holding(self._watch, self._timeout, self._resource):
            await super().__call__(scope, receive, send)


async def watch(store: ObjectStore, renderer: Renderer, namespace: str | None,
                options: ListOptions, watches: Watches) -> StreamingResponse:
    """The response to a watch of ``store`` (``namespace`` None: all namespaces).

    A malformed request (selector, resourceVersion) raises its 400 before the stream starts.
    """
    initial: ListResult | None = None
    try:
        if options.send_initial_events:
            # Watch-list (sendInitialEvents=true): the current state, which is never older
            # than a given resourceVersion, as ADDED events from one snapshot, a bookmark that
            # marks their end (the client waits for it), then the changes after the snapshot.
            initial = await store.list(namespace, label_selector=options.label_selector,
                                       field_selector=options.field_selector)
            start = initial.resource_version
        else:
            start = options.resource_version
        store_watch = await store.watch(namespace, resource_version=start,
                                        label_selector=options.label_selector,
                                        field_selector=options.field_selector)
    except BadRequest:
        raise
    except StoreError as error:
        # The request is valid but cannot be served from this resourceVersion: like
        # kube-apiserver, answer 200 and report it as the stream's one ERROR event.
        return StreamingResponse(_error_only(error), media_type=JSON_MEDIA_TYPE)
    timeout = float(options.timeout_seconds) or MIN_REQUEST_TIMEOUT_SECONDS * (
        1 + random.random())
    return WatchResponse(_event_lines(renderer, store_watch, initial), watch=store_watch,
                         watches=watches, timeout=timeout, resource=store.resource.plural)


def _line(event_type: str, obj: Any) -> bytes:
    text = json.dumps({"type": event_type, "object": obj}, separators=(",", ":"),
                      ensure_ascii=False)
    return (text + "\n").encode()


async def _error_only(error: StoreError) -> AsyncIterator[bytes]:
    yield _line("ERROR", status.status_body(error))


async def _event_lines(renderer: Renderer, events: Watch, initial: ListResult | None
                       ) -> AsyncIterator[bytes]:
    headers = True  # only the first Table carries columnDefinitions, as in kube-apiserver

    def render(obj: Mapping[str, Any]) -> Any:
        nonlocal headers
        rendered = renderer.object(obj, headers=headers)
        headers = False
        return rendered

    if initial is not None:
        for obj in initial.items:
            yield _line("ADDED", render(obj))
        yield _line("BOOKMARK", renderer.bookmark(initial.resource_version,
                                                  {INITIAL_EVENTS_END: "true"}))
    try:
        async for event in events:
            yield _line(event.type.value, render(event.object))
    except StoreError as error:
        yield _line("ERROR", status.status_body(error))
