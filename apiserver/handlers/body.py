"""Reading request bodies: bounded in size before anything is decoded, and in the media types
each endpoint reads; large ones decoded off the event loop.

Decoding and validating a body costs time linear in its size, which for a large YAML body is
up to seconds: a body over ``INLINE_BYTES`` is decoded and validated in a worker thread
(Starlette's ``run_in_threadpool``), so that the event loop goes on serving other requests and
the probes (``/readyz``) meanwhile (``by_size``). A smaller one, which is every body a client
sends in practice (a notify, a Notification: a few hundred bytes), takes well under a
millisecond on the loop, less than the hop to a thread and back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from apiserver import errors
from apiserver.api.decoding import Body, parse_body
from apiserver.api.media import BODY_MEDIA_TYPES, JSON_MEDIA_TYPE

MAX_BODY_BYTES = 1024 * 1024
"""Of a create body (a PodNotifier or Notification is a few hundred bytes) and of a patch."""
INLINE_BYTES = 16 * 1024
"""Work on a body up to this size runs on the event loop; on a larger one, in a worker
thread."""

P = ParamSpec("P")
T = TypeVar("T")


async def by_size(size: int | None, work: Callable[P, T], *args: P.args,
                  **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)`` on a body of `size` bytes: on the event loop up to
    INLINE_BYTES, else (or if the size is not known: None) in a worker thread."""
    if size is not None and size <= INLINE_BYTES:
        return work(*args, **kwargs)
    return await run_in_threadpool(work, *args, **kwargs)


def media_type(request: Request) -> str:
    """The Content-Type without parameters, lower-cased ("" when there is none)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_limited(request: Request, max_bytes: int, what: str) -> bytes:
    """The raw body; 413 (naming `what` and the limit) as soon as it passes `max_bytes`, read
    no further."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise errors.request_entity_too_large(
                f"{what} is larger than {max_bytes} bytes")
    return bytes(body)


async def read_object(request: Request) -> Body:
    """A create body (JSON or YAML) as a JSON object: 415 for another media type, 413 past
    MAX_BODY_BYTES, 400 for anything apiserver.api.json_input refuses (not UTF-8, too deep,
    lone surrogates, ...).

    No Content-Type means JSON, as in kube-apiserver (`kubectl create --raw` sends none)."""
    kind = media_type(request)
    if kind and kind not in BODY_MEDIA_TYPES:
        raise errors.unsupported_media_type(BODY_MEDIA_TYPES)
    raw = await read_limited(request, MAX_BODY_BYTES, "the request body")
    return await by_size(len(raw), parse_body, raw, kind or JSON_MEDIA_TYPE)
