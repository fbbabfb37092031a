"""notifications: create (a fan-out over a label selector), get, list, watch, delete, patch.

Creating one needs `create notifications` (checked by the access middleware) and `create
pods/notify` in the namespace (checked here): a Notification notifies pods on its creator's
behalf. The pod set is resolved once, before the object is stored
(apiserver/fanout/selection.py; see docs/notifications.md for exactly which pods are in scope);
a Notification that would notify nothing (an empty PreExistingPods scope, or no pod in scope
declaring the notifier) is refused with 422 then, so a refused request stores nothing. Deleting
a running Notification stops new starts and rolls back the pods whose notifier succeeded. A
server-side apply of a missing Notification creates it through the same path, after checking
`create notifications` too (the middleware checked `patch`). The release action (`POST
.../notifications/{name}/release`, authorized by the access middleware as `create
notifications/release`, and here as `create pods/notify` on every pod of the window, as
releasing one held record needs on its pod: `release_access`) ends a quiesce window: any replica
stores the request in the Notification's run, where the fan-out leader reads it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from apiserver import errors
from apiserver.api import status
from apiserver.api.decoding import Body, invalid
from apiserver.api.resources import API_PATH
from apiserver.api.tables import NOTIFICATION_TABLE
from apiserver.api.types import Notification
from apiserver.api.warning_headers import add_warnings
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Authorizer
from apiserver.fanout import scope
from apiserver.fanout import spec as notification_spec
from apiserver.fanout.manager import FanoutManager
from apiserver.fanout.selection import pods_in_scope, scope_errors
from apiserver.fanout.status import waiting_for_pods
from apiserver.handlers.body import by_size, read_object
from apiserver.handlers.caller import CurrentUser, current_user
from apiserver.handlers.collection import Collection, collection_router
from apiserver.handlers.notify import dry_run
from apiserver.handlers.options import field_validation
from apiserver.handlers.release_access import require_release
from apiserver.handlers.watch_response import Watches
from apiserver.kube import KubeClient
from apiserver.notifier import records
from apiserver.notifier.notifier_pods import notify_attributes
from apiserver.registry.resources import NOTIFICATIONS
from apiserver.registry.store import ObjectStore

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}/notifications"


def _no_recorded_run(name: str) -> errors.Conflict:
    return errors.Conflict(
        f'Notification "{name}" has no recorded run (it is being created, or its server '
        "stopped before recording its pods); retry in a few seconds",
        group=NOTIFICATIONS.group, resource=NOTIFICATIONS.plural, name=name)


def router(store: ObjectStore, fanout: FanoutManager, kube: KubeClient, authorizer: Authorizer,
           watches: Watches, *, max_parallelism: int, max_timeout_seconds: int,
           max_hold_seconds: int) -> APIRouter:
    """The notifications routes: create (and the create of a server-side apply), delete and
    the release action here, the rest (get, list, watch, patch) from the generic
    collection."""
    routes = APIRouter()

    async def create_notification(http: Request, namespace: str, body: Body,
                                  user: UserInfo, managed_fields: list[dict[str, Any]]
                                  ) -> JSONResponse:
        """The one create path, for a POST and for a server-side apply of a missing object."""
        ask = await by_size(
            body.size, notification_spec.validate, body, namespace, max_parallelism=max_parallelism,
            max_timeout_seconds=max_timeout_seconds, max_hold_seconds=max_hold_seconds,
            field_validation=field_validation(http))
        notify_pods = notify_attributes(namespace)
        decision = await authorizer.authorize(user, notify_pods)
        if not decision.allowed:
            raise status.forbidden_request(user.name, notify_pods, decision.reason)
        selector = notification_spec.selector_string(ask.spec["selector"])
        pods = await pods_in_scope(kube, namespace, selector)
        problems = scope_errors(ask.spec, namespace, selector, pods)
        if problems:
            raise invalid(Notification, body, problems)
        metadata = dict(ask.metadata)
        if managed_fields:
            metadata["managedFields"] = managed_fields
        obj: dict[str, Any] = {
            "apiVersion": records.API_VERSION,
            "kind": notification_spec.KIND,
            "metadata": metadata,
            "spec": {**ask.spec, "requestedBy": {"username": user.name, "uid": user.uid,
                                                 "groups": list(user.groups),
                                                 "extra": dict(user.extra)}},
            "status": {"phase": records.PENDING, "counts": scope.counts(
                [scope.ScopedPod(pod.name, pod.uid, scope.PENDING) for pod in pods],
                released=ask.spec.get("release") is not None)},
        }
        if not pods:  # AllPods (scope_errors refuses any other empty scope)
            obj["status"]["conditions"] = [waiting_for_pods(namespace, selector, records.now())]
        if dry_run(http):
            return add_warnings(JSONResponse(await store.check_create(obj), status_code=201),
                                ask.warnings)
        created = await store.create(obj)
        await fanout.begin(created, [(pod.name, pod.uid) for pod in pods])
        return add_warnings(JSONResponse(created, status_code=201), ask.warnings)

    async def apply_create(http: Request, namespace: str, config: dict[str, Any],
                           managed_fields: list[dict[str, Any]]) -> Response:
        """A server-side apply of a missing Notification: also needs ``create notifications``
        (the access middleware authorized ``patch``), as kube-apiserver requires."""
        user = await current_user(http)
        name = str((config.get("metadata") or {}).get("name") or "")
        create = RequestAttributes.for_resource(
            "create", group=NOTIFICATIONS.group, version="v1alpha1", resource=NOTIFICATIONS.plural,
            namespace=namespace, name=name)
        decision = await authorizer.authorize(user, create)
        if not decision.allowed:
            raise status.forbidden_request(user.name, create, decision.reason)
        return await create_notification(http, namespace, Body(config), user, managed_fields)

    async def stop_fanout(deleted: dict[str, Any]) -> None:
        """A deleted Notification starts no more pods and rolls back (docs/notifications.md)."""
        await fanout.deleted(deleted["metadata"]["uid"])

    collection = Collection(resource=NOTIFICATIONS, store=store, table=NOTIFICATION_TABLE,
                            apply_create=apply_create,
                            on_deleted=stop_fanout)

    @routes.post(NAMESPACED, status_code=201)
    async def create(namespace: str, http: Request, user: CurrentUser) -> JSONResponse:
        return await create_notification(http, namespace, await read_object(http), user, [])

    @routes.post(f"{NAMESPACED}/{{name}}/release")
    async def release(namespace: str, name: str, http: Request, user: CurrentUser
                      ) -> JSONResponse:
        """End the quiesce window: 200 with the Notification (its status.window
        .releaseRequestedTime set), once the caller may create pods/notify on every pod of
        the window (``release_access``); a finished one is answered as it is; with dryRun
        nothing is stored."""
        dry = dry_run(http)
        obj = await store.get(namespace, name)
        if not (obj.get("spec") or {}).get("release"):
            raise errors.Conflict(
                f'Notification "{name}" has no spec.release, so it has no quiesce window to '
                "release; only a Notification created with spec.release can be released",
                group=NOTIFICATIONS.group, resource=NOTIFICATIONS.plural, name=name)
        pods = await fanout.scope_pods(obj)
        await require_release(authorizer, user, namespace, pods or [],
                              resource=NOTIFICATIONS.plural, name=name, what="a quiesce window")
        if (obj.get("status") or {}).get("phase") in records.FINISHED_PHASES:
            return JSONResponse(obj)
        if pods is None:
            raise _no_recorded_run(name)
        at = records.now()
        if dry:
            state = dict(obj.get("status") or {})
            state["window"] = {"releaseRequestedTime": at, **(state.get("window") or {})}
            return JSONResponse({**obj, "status": state})
        if not await fanout.request_release(obj, at):
            raise _no_recorded_run(name)
        uid = obj["metadata"]["uid"]

        def requested(current: dict[str, Any]) -> dict[str, Any]:
            if current["metadata"].get("uid") != uid:
                raise errors.not_found(NOTIFICATIONS.plural, NOTIFICATIONS.group, name)
            state = dict(current.get("status") or {})
            state["window"] = {"releaseRequestedTime": at, **(state.get("window") or {})}
            return {**current, "status": state}

        return JSONResponse(await store.guaranteed_update(namespace, name, requested))

    routes.include_router(collection_router(collection, watches))
    return routes
