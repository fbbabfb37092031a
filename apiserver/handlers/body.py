"""Reading request bodies: bounded in size before anything is decoded, and in the media types
each endpoint reads; decoded off the event loop.

Decoding and validating a body costs time linear in its size, which for a large YAML body is
up to seconds: that work runs in a worker thread (Starlette's ``run_in_threadpool``), so that
the event loop goes on serving other requests and the probes (``/readyz``) meanwhile. Every
body (create, notify, release, patch, DeleteOptions) is decoded and validated there.
"""

from __future__ import annotations

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from apiserver import errors
from apiserver.api.decoding import Body, parse_body
from apiserver.api.media import BODY_MEDIA_TYPES, JSON_MEDIA_TYPE

MAX_BODY_BYTES = 1024 * 1024
"""Of a create body (a PodNotifier or Notification is a few hundred bytes) and of a patch."""


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
    return await run_in_threadpool(parse_body, raw, kind or JSON_MEDIA_TYPE)
