"""podnotifiers: get, list, watch, delete and deletecollection of PodNotifier records.

PodNotifiers are created only through ``pods/<name>/notify`` (apiserver.handlers.notify), so
that RBAC on that subresource decides who may notify which pod; this collection has no create.
"""

from __future__ import annotations

from fastapi import Request

from apiserver.api.tables import PODNOTIFIER_TABLE
from apiserver.handlers.collection import Collection, collection_router
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import ObjectStore
from apiserver.services import services


def podnotifier_store(request: Request) -> ObjectStore:
    return services(request).podnotifiers


COLLECTION = Collection(resource=PODNOTIFIERS, store=podnotifier_store, table=PODNOTIFIER_TABLE)

router = collection_router(COLLECTION)
