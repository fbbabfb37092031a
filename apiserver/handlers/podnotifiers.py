"""podnotifiers: get, list, watch, patch, delete and deletecollection of PodNotifier records,
and the ``release`` subresource of a held notifier's record.

PodNotifiers are created only through ``pods/<name>/notify`` (apiserver.handlers.notify), so
that RBAC on that subresource decides who may notify which pod; this collection has no create:
a POST here, or a server-side apply of a missing record, answers 405 saying so (``CREATE_HINT``).

``POST .../podnotifiers/<name>/release`` (body empty or any JSON object; ``dryRun=All`` answers
the record as the request would leave it, storing nothing) asks for the release of
a held notifier (``apiserver.notifier.holds``) and answers 200 with the record as stored. The
access middleware has allowed ``create podnotifiers/release``; releasing also needs what
starting the run needed, ``create pods/notify`` on the record's pod, checked here as for a
Notification's window (``release_access``; 403 naming what is missing).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from apiserver import errors
from apiserver.api.decoding import parse_body
from apiserver.api.media import BODY_MEDIA_TYPES, JSON_MEDIA_TYPE
from apiserver.api.routes import PODNOTIFIER_RELEASE_PATH
from apiserver.api.tables import PODNOTIFIER_TABLE
from apiserver.authz.sar import Authorizer
from apiserver.handlers.body import MAX_BODY_BYTES, by_size, media_type, read_limited
from apiserver.handlers.caller import CurrentUser
from apiserver.handlers.collection import Collection, collection_router
from apiserver.handlers.notify import dry_run
from apiserver.handlers.release_access import require_release
from apiserver.handlers.watch_response import Watches
from apiserver.notifier.holds import HoldReleases
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


def release_router(store: ObjectStore, releases: HoldReleases, authorizer: Authorizer
                   ) -> APIRouter:
    """The ``podnotifiers/release`` route: `releases` stores the request once `authorizer`
    allowed the caller ``create pods/notify`` on the record's pod."""
    routes = APIRouter()

    @routes.post(PODNOTIFIER_RELEASE_PATH, status_code=200)
    async def release(namespace: str, name: str, http: Request, user: CurrentUser
                      ) -> JSONResponse:
        dry = dry_run(http)
        await _read_optional_object(http)
        record = await store.get(namespace, name)
        await require_release(authorizer, user, namespace,
                              [str(record.get("spec", {}).get("podName", ""))],
                              resource=PODNOTIFIERS.plural, name=name, what="a held notifier")
        if dry:
            return JSONResponse(releases.preview(record, user))
        return JSONResponse(await releases.request(namespace, name, user))

    return routes


async def _read_optional_object(http: Request) -> None:
    """A release's body: empty, or any JSON (or YAML) object, which is read and not used
    (``kubectl create --raw ... -f`` sends one); refused as a create body would be."""
    kind = media_type(http)
    if kind and kind not in BODY_MEDIA_TYPES:
        raise errors.unsupported_media_type(BODY_MEDIA_TYPES)
    raw = await read_limited(http, MAX_BODY_BYTES, "the request body")
    if raw.strip():
        await by_size(len(raw), parse_body, raw, kind or JSON_MEDIA_TYPE)
