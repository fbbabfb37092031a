"""Helpers for tests of object stores."""

from __future__ import annotations

import asyncio

from apiserver.registry.store import ObjectStore
from apiserver.registry.watch import Watch


async def names_by_pages(store: ObjectStore, limit: int) -> list[tuple[str, str]]:
    """(namespace, name) of every object of every namespace, read `limit` at a time through
    continue tokens."""
    seen, token = [], ""
    while True:
        page = await store.list(None, limit=limit, continue_token=token)
        seen += [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in page.items]
        token = page.continue_token
        if not token:
            return seen


async def watch_closed(watch: Watch) -> bool:
    """A closed watch ends at once; an open one has nothing to give and blocks."""
    try:
        await asyncio.wait_for(anext(watch), 0.05)
    except StopAsyncIteration:
        return True
    except TimeoutError:
        return False
    return False
