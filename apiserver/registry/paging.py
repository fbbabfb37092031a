"""Paged lists, once for every backend (as k8s.io/apiserver's generic store pages above
``storage.Interface``): what a list request asks (``PageRequest``), which snapshot it reads
(``snapshot_to_read``), the page and its continue token (``page``), and reading every page
(``all_objects``).

A backend only provides the objects of one snapshot in (namespace, name) order; a page holds
``limit`` of those its selection matches, and the continue token names the snapshot and the
last key, so the next page reads the same snapshot after it: writes between pages do not show.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from apiserver.registry.errors import BadRequest, Expired
from apiserver.registry.objects import metadata
from apiserver.registry.store import ListResult, Object, ObjectStore
from apiserver.registry.tokens import decode_continue, encode_continue

ALL_OBJECTS_PAGE = 500
"""The page size of ``all_objects`` (the server's own reads of everything)."""


@dataclass(frozen=True)
class PageRequest:
    """A list's ``limit`` and continue token, checked: ``BadRequest`` for a negative limit or a
    malformed token."""

    limit: int
    snapshot: int | None
    """The resourceVersion the continue token names (None: the current one)."""
    after: tuple[str, str] | None
    """The last (namespace, name) of the page before."""

    @classmethod
    def of(cls, limit: int, continue_token: str) -> PageRequest:
        if limit < 0:
            raise BadRequest(f"limit must not be negative, got {limit}")
        if not continue_token:
            return cls(limit, None, None)
        snapshot, after = decode_continue(continue_token)
        return cls(limit, snapshot, after)

    def snapshot_to_read(self, current: int, compacted: int) -> int:
        """The resourceVersion to list at: the token's, or ``current``. ``Expired`` if the
        token's is at or before ``compacted`` (the history no longer holds it), ``BadRequest``
        if it is newer than ``current``."""
        if self.snapshot is None:
            return current
        if self.snapshot < compacted:
            raise Expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.")
        if self.snapshot > current:
            raise BadRequest("the continue token names a resourceVersion this server has not had")
        return self.snapshot

    def page(self, matching: Iterable[Object], at: int) -> ListResult:
        """The page of ``matching`` (the selected objects of snapshot ``at`` after ``after``,
        in (namespace, name) order: read lazily, at most ``limit`` + 1 of them)."""
        items: list[Object] = []
        for obj in matching:
            if self.limit and len(items) == self.limit:
                last = metadata(items[-1])
                return ListResult(items, str(at), encode_continue(
                    at, (last["namespace"], last["name"])))
            items.append(obj)
        return ListResult(items, str(at))


async def all_objects(store: ObjectStore, namespace: str | None = None, *,
                      label_selector: str = "", field_selector: str = ""
                      ) -> AsyncIterator[Object]:
    """Every matching object of ``store`` (every namespace if None), read page by page
    (``ALL_OBJECTS_PAGE``) from one snapshot."""
    token = ""
    while True:
        page = await store.list(namespace, label_selector=label_selector,
                                field_selector=field_selector, limit=ALL_OBJECTS_PAGE,
                                continue_token=token)
        for obj in page.items:
            yield obj
        token = page.continue_token
        if not token:
            return
