"""Releasing a held notifier: the request is stored on its record, not delivered in memory.

A release may reach any replica, and only the replica whose runner holds the command's exec
stream can close its stdin. So ``HoldReleases.request`` writes ``status.releaseRequestedTime``
and ``status.releaseRequestedBy`` on the record (a guaranteed update), and the owning run, which
re-reads its record while Held (``runner.HOLD_POLL_SECONDS``), sees it and releases: it closes
the command's stdin, stops it by PID, and ends the record Succeeded/Released with
``releasedTime`` and ``releasedBy``.

- A record not Held yet (Pending, Running): the request is stored and the run releases as soon
  as every container is ready and the record is Held (the command is stopped at once).
- A finished record: unchanged (a release is idempotent).
- A record that is not a held notifier's: ``NotHeldNotifier`` (409).

Nothing here authorizes: the caller (the release handler, a Notification's fan-out) decides who
may release.
"""

from __future__ import annotations

import copy
from typing import Any

from apiserver import errors
from apiserver.api.resources import GROUP
from apiserver.authn.user import UserInfo
from apiserver.notifier import records
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import ObjectStore


class NotHeldNotifier(errors.Conflict):
    """The record is not a held notifier's run: there is nothing to release."""

    def __init__(self, name: str, notifier: str) -> None:
        super().__init__(
            f'podnotifiers.{GROUP} "{name}" is a run of notifier "{notifier}", which is not '
            "held (its declaration has no hold): there is nothing to release; release only "
            "the records of held notifiers (status.maxHoldSeconds is set)",
            group=GROUP, resource=PODNOTIFIERS.plural, name=name)


class HoldReleases:
    """Release requests on the PodNotifier records of ``store``."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def preview(self, record: dict[str, Any], by: UserInfo) -> dict[str, Any]:
        """``record`` as a request by ``by`` would leave it, nothing stored (a dry run);
        ``NotHeldNotifier`` as ``request``."""
        self._check_held(record)
        if records.is_finished(record):
            return record
        return records.request_release(copy.deepcopy(record), records.now(), by.name)

    @staticmethod
    def _check_held(record: dict[str, Any]) -> None:
        if not records.is_held_notifier(record):
            raise NotHeldNotifier(str(record.get("metadata", {}).get("name", "")),
                                  str(record.get("spec", {}).get("notifier", "")))

    async def request(self, namespace: str, name: str, by: UserInfo) -> dict[str, Any]:
        """Ask for the release of the held record ``name``, as ``by``; the record as stored.

        Raises the registry's ``NotFound`` if there is no such record and ``NotHeldNotifier``
        if it is not a held notifier's. The first request counts: later ones, and requests on
        a finished record, change nothing."""
        await self._store.consistent_read(namespace, name)  # created through another replica
        record = await self._store.get(namespace, name)
        self._check_held(record)
        if records.is_finished(record) or records.release_requested(record) is not None:
            return record
        at = records.now()

        def ask(current: dict[str, Any]) -> dict[str, Any]:
            if records.is_finished(current):
                return current
            return records.request_release(current, at, by.name)

        return await self._store.guaranteed_update(namespace, name, ask)
