"""Generic REST handlers of a namespaced collection: get, list, watch, delete, deletecollection.

One ``Collection`` describes a resource (its registry type, its store, its Table columns);
``collection_router`` serves it the way kube-apiserver serves a custom resource:

- ``GET /apis/<g>/<v>/<plural>`` and ``GET .../namespaces/<ns>/<plural>``: list or, with
  ``watch=true``, watch (apiserver.handlers.watch_response); the query is ListOptions
  (apiserver.handlers.options).
- ``GET .../namespaces/<ns>/<plural>/<name>``: get.
- A get or list without a resourceVersion (nor continue token) reads the latest state: it awaits
  the store's ``consistent_read`` first, so it sees every write acknowledged before it through
  any replica; ``resourceVersion=0`` reads this replica's cache as it is.
- ``DELETE .../namespaces/<ns>/<plural>/<name>``: delete; the body may be DeleteOptions with
  ``preconditions`` {uid, resourceVersion} and ``dryRun: ["All"]``. Like kube-apiserver for a
  custom resource without finalizers, the answer is 200 with a ``Status`` of ``Success`` whose
  details name the deleted object.
- ``DELETE .../namespaces/<ns>/<plural>``: deletecollection with label/field selectors; the
  answer is the list of deleted objects.
- ``PATCH .../namespaces/<ns>/<plural>/<name>``: labels and annotations, by merge, JSON,
  strategic merge patch or server-side apply (apiserver.handlers.patch).
- Methods a client may try that are not served here (``POST`` on the collection when objects
  are created elsewhere, ``PUT``): 405 saying what to do instead (``Collection.create_hint``,
  ``UPDATE_HINT``). These are refusals, not operations: they are plain routes, outside the
  OpenAPI document.

Every answer follows the Accept header (apiserver.handlers.negotiation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apiserver import errors
from apiserver.api.resources import API_PATH
from apiserver.api.tables import TableConvertor
from apiserver.handlers import watch_response
from apiserver.handlers.negotiation import LIST, OBJECT, Renderer, resource_version
from apiserver.handlers.options import DeleteOptions, ListOptions, consistent_get
from apiserver.handlers.patch import ApplyCreate, patch_object
from apiserver.handlers.watch_response import Watches
from apiserver.registry.errors import check_preconditions
from apiserver.registry.resources import ResourceType
from apiserver.registry.store import ObjectStore

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"
UPDATE_HINT = ("PUT (update) is not served: spec is immutable; change labels and annotations "
               "with PATCH (kubectl label, kubectl annotate, kubectl patch, kubectl apply)")


@dataclass(frozen=True)
class Collection:
    """A namespaced resource served by ``collection_router``."""

    resource: ResourceType
    """plural, kind, group and selectable fields (apiserver.registry.resources)."""
    store: ObjectStore
    """Where the resource's objects are."""
    table: TableConvertor
    """The columns of ``kubectl get`` (apiserver.api.tables)."""
    deletecollection: bool = True
    """Serve DELETE on the collection (the resource's discovery verbs must agree)."""
    apply_create: ApplyCreate | None = None
    """How a server-side apply creates a missing object; None: it cannot (405 with
    ``create_hint``)."""
    create_hint: str = ""
    """How objects of this resource are created, when not by a POST on this collection: a
    POST here (and an apply of a missing object) answers 405 saying so."""
    on_deleted: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    """Called with each object a DELETE really removed (never for a dry run)."""

    def renderer(self, request: Request, metadata_kind: str) -> Renderer:
        """How to answer ``request``: 406 if its Accept allows nothing served."""
        return Renderer.for_request(self.resource, self.table, request, metadata_kind)


async def get_object(collection: Collection, request: Request, namespace: str, name: str
                     ) -> Response:
    renderer = collection.renderer(request, OBJECT)
    if consistent_get(request):
        await collection.store.consistent_read(namespace, name)
    obj = await collection.store.get(namespace, name)
    return JSONResponse(renderer.object(obj))


async def list_or_watch(collection: Collection, request: Request, namespace: str | None,
                        watches: Watches) -> Response:
    options = ListOptions.from_request(request)
    if options.watch:
        renderer = collection.renderer(request, OBJECT)
        return await watch_response.watch(collection.store, renderer, namespace, options,
                                          watches)
    renderer = collection.renderer(request, LIST)
    if options.consistent:
        await collection.store.consistent_read(namespace)
    result = await collection.store.list(
        namespace, label_selector=options.label_selector,
        field_selector=options.field_selector, limit=options.limit,
        continue_token=options.continue_token)
    return JSONResponse(renderer.list(result.items, result.resource_version,
                                      result.continue_token))


async def delete_object(collection: Collection, request: Request, namespace: str, name: str
                        ) -> Response:
    """Delete one object (or, with dryRun, check that it could be); a Status of Success."""
    collection.renderer(request, OBJECT)  # 406 before deleting, if unanswerable
    options = await DeleteOptions.from_request(request)
    store = collection.store
    if options.dry_run:
        deleted = await store.get(namespace, name)
        check_preconditions(collection.resource, deleted, options.resource_version, options.uid)
    else:
        deleted = await store.delete(namespace, name, resource_version=options.resource_version,
                                     uid=options.uid)
        if collection.on_deleted is not None:
            await collection.on_deleted(deleted)
    meta = deleted.get("metadata") or {}
    details = {"name": meta.get("name", name), "group": collection.resource.group,
               "kind": collection.resource.plural, "uid": meta.get("uid", "")}
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "details": details})


async def delete_collection(collection: Collection, request: Request, namespace: str
                            ) -> Response:
    renderer = collection.renderer(request, LIST)
    options = ListOptions.from_request(request)
    delete_options = await DeleteOptions.from_request(request)
    store = collection.store
    if delete_options.dry_run:
        result = await store.list(namespace, label_selector=options.label_selector,
                                  field_selector=options.field_selector)
        return JSONResponse(renderer.list(result.items, result.resource_version))
    deleted = await store.delete_collection(
        namespace, label_selector=options.label_selector,
        field_selector=options.field_selector)
    if collection.on_deleted is not None:
        for obj in deleted:
            await collection.on_deleted(obj)
    # Each deletion takes the next resourceVersion, in order: the last is the list's.
    return JSONResponse(renderer.list(deleted, resource_version(deleted[-1]) if deleted else ""))


async def patch(collection: Collection, request: Request, namespace: str, name: str
                ) -> Response:
    return await patch_object(collection.resource, collection.store,
                              collection.renderer(request, OBJECT), request, namespace, name,
                              apply_create=collection.apply_create,
                              create_hint=collection.create_hint)


def refusal(message: str) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint that answers 405 MethodNotAllowed with ``message`` (what to do instead)."""

    async def refuse(request: Request) -> Response:
        raise errors.MethodNotAllowed(message)

    return refuse


def collection_router(collection: Collection, watches: Watches) -> APIRouter:
    """Routes for get, list, watch, delete, patch and (unless disabled) deletecollection, and
    the 405 refusals that say what to do instead.

    ``watches`` holds the router's watch streams: the server stops it as it shuts down.
    """
    plural = collection.resource.plural
    router = APIRouter()

    async def list_all(request: Request) -> Response:
        return await list_or_watch(collection, request, None, watches)

    async def list_namespaced(request: Request, namespace: str) -> Response:
        return await list_or_watch(collection, request, namespace, watches)

    async def get(request: Request, namespace: str, name: str) -> Response:
        return await get_object(collection, request, namespace, name)

    async def delete(request: Request, namespace: str, name: str) -> Response:
        return await delete_object(collection, request, namespace, name)

    async def delete_all(request: Request, namespace: str) -> Response:
        return await delete_collection(collection, request, namespace)

    async def patch_one(request: Request, namespace: str, name: str) -> Response:
        return await patch(collection, request, namespace, name)

    routes: list[tuple[str, str, Callable[..., Any], str]] = [
        ("GET", f"{API_PATH}/{plural}", list_all, "list"),
        ("GET", f"{NAMESPACED}/{plural}", list_namespaced, "list"),
        ("GET", f"{NAMESPACED}/{plural}/{{name}}", get, "get"),
        ("DELETE", f"{NAMESPACED}/{plural}/{{name}}", delete, "delete"),
        ("PATCH", f"{NAMESPACED}/{plural}/{{name}}", patch_one, "patch"),
    ]
    if collection.deletecollection:
        routes.append(("DELETE", f"{NAMESPACED}/{plural}", delete_all, "deletecollection"))
    for method, path, endpoint, verb in routes:
        router.add_api_route(path, endpoint, methods=[method], name=f"{verb} {plural}",
                             include_in_schema=False)
    refusals = [("PUT", f"{NAMESPACED}/{plural}/{{name}}", UPDATE_HINT)]
    if collection.create_hint:
        refusals.append(("POST", f"{NAMESPACED}/{plural}",
                         f"{plural}.{collection.resource.group} cannot be created here: "
                         f"{collection.create_hint}"))
    for method, path, message in refusals:
        router.routes.append(Route(path, refusal(message), methods=[method]))
    return router
