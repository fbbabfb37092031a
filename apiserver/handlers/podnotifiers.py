"""podnotifiers: get, list, watch, patch, delete and deletecollection of PodNotifier records.

PodNotifiers are created only through ``pods/<name>/notify`` (apiserver.handlers.notify), so
that RBAC on that subresource decides who may notify which pod; this collection has no create:
a POST here, or a server-side apply of a missing record, answers 405 saying so (``CREATE_HINT``).
"""

from __future__ import annotations

from fastapi import APIRouter

from apiserver.api.tables import PODNOTIFIER_TABLE
from apiserver.handlers.collection import Collection, collection_router
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.store import ObjectStore

CREATE_HINT = ("PodNotifier records are created by running a notifier: POST "
               "/apis/notifier.x-k8s.io/v1alpha1/namespaces/NAMESPACE/pods/POD/notify with a "
               "PodNotifier body (kubectl create --raw ... -f -, or kubectl notify POD NOTIFIER)")


def router(store: ObjectStore, watches: Watches) -> APIRouter:
    """The podnotifiers routes over ``store``; their watch streams are held by ``watches``."""
    return collection_router(
        Collection(resource=PODNOTIFIERS, store=store, table=PODNOTIFIER_TABLE,
                   create_hint=CREATE_HINT), watches)
