"""podnotifiers: get, list, watch, delete and deletecollection of PodNotifier records.

PodNotifiers are created only through ``pods/<name>/notify`` (apiserver.handlers.notify), so
that RBAC on that subresource decides who may notify which pod; this collection has no create.
"""

from __future__ import annotations

from fastapi import APIRouter

from apiserver.api.tables import PODNOTIFIER_TABLE
from apiserver.handlers.collection import Collection, collection_router
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import ObjectStore


def router(store: ObjectStore, watches: Watches) -> APIRouter:
    """The podnotifiers routes over ``store``; their watch streams are held by ``watches``."""
    return collection_router(
        Collection(resource=PODNOTIFIERS, store=store, table=PODNOTIFIER_TABLE), watches)
