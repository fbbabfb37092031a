"""Generic REST handlers of a namespaced collection: get, list, watch, delete, deletecollection.

One ``Collection`` describes a resource (its registry type, how to reach its store, its Table
columns); ``collection_router`` serves it the way kube-apiserver serves a custom resource:

- ``GET /apis/<g>/<v>/<plural>`` and ``GET .../namespaces/<ns>/<plural>``: list or, with
  ``watch=true``, watch; ``labelSelector``, ``fieldSelector``, ``limit``/``continue``,
  ``resourceVersion``, ``timeoutSeconds``, ``sendInitialEvents``.
- ``GET .../namespaces/<ns>/<plural>/<name>``: get.
- ``DELETE .../namespaces/<ns>/<plural>/<name>``: delete; the body may be DeleteOptions with
  ``preconditions`` {uid, resourceVersion} and ``dryRun: ["All"]``. Like kube-apiserver for a
  custom resource without finalizers, the answer is 200 with a ``Status`` of ``Success`` whose
  details name the deleted object.
- ``DELETE .../namespaces/<ns>/<plural>``: deletecollection with label/field selectors; the
  answer is the list of deleted objects.

Output follows the Accept header: plain JSON, a ``meta.k8s.io/v1`` Table (``kubectl get``),
or ``PartialObjectMetadata(List)`` (the metadata client of the garbage collector and the
namespace controller). An Accept that allows none of these (e.g. protobuf only) gets 406.

Watches stream one JSON event per line and flush each. A resourceVersion that is too old (410)
or too new is reported, as kube-apiserver does once the request is valid, as a 200 response
carrying one ``ERROR`` event with the Status. A watch ends when ``timeoutSeconds`` pass (default:
a random 30 to 60 minutes, as kube-apiserver picks), when the client disconnects, when the
store closes, or when ``stop_watches(app)`` is called; each way releases the store's watcher.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from apiserver import errors
from apiserver.api import status
from apiserver.api.media import parse_accept
from apiserver.api.resources import API_PATH, VERSION
from apiserver.api.tables import (
    META_GROUP_VERSION,
    IncludeObject,
    TableConvertor,
    partial_object_metadata,
)
from apiserver.registry.errors import BadRequest, StoreError, check_preconditions
from apiserver.registry.resources import ResourceType
from apiserver.registry.store import ListResult, ObjectStore
from apiserver.registry.watch import WatchEvent

log = logging.getLogger(__name__)

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"

MIN_REQUEST_TIMEOUT_SECONDS = 1800
"""kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts a random
duration between this and twice this."""
MAX_DELETE_OPTIONS_BYTES = 64 * 1024
STOP_GRACE_SECONDS = 5.0
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

JSON_MEDIA_TYPE = "application/json"
SERVED_MEDIA_TYPES = (
    JSON_MEDIA_TYPE,
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
)
_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("0", "f", "F", "false", "FALSE", "False")


@dataclass(frozen=True)
class Collection:
    """A namespaced resource served by ``collection_router``."""

    resource: ResourceType
    """plural, kind, group and selectable fields (apiserver.registry.resources)."""
    store: Callable[[Request], ObjectStore]
    """The resource's store, e.g. ``lambda request: services(request).podnotifiers``."""
    table: TableConvertor
    """The columns of ``kubectl get`` (apiserver.api.tables)."""
    deletecollection: bool = True
    """Serve DELETE on the collection (the resource's discovery verbs must agree)."""

    @property
    def api_version(self) -> str:
        return f"{self.resource.group}/{VERSION}"

    @property
    def list_kind(self) -> str:
        return f"{self.resource.kind}List"

    def typed(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``obj`` (top level only) with this resource's apiVersion and kind."""
        rest = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind")}
        return {"apiVersion": self.api_version, "kind": self.resource.kind, **rest}


class Output(Enum):
    JSON = "json"
    TABLE = "Table"
    METADATA = "PartialObjectMetadata"


OBJECT = "PartialObjectMetadata"
LIST = "PartialObjectMetadataList"
"""The ``as=`` metadata kind an endpoint converts to: OBJECT for get and watch, LIST for list."""


def negotiate(accept: str | None, metadata_kind: str) -> Output:
    """The representation the Accept header asks for, best quality first; 406 if none.

    Ranges for protobuf, YAML, other Table versions or ``as=`` kinds that do not fit the
    endpoint (e.g. PartialObjectMetadataList on a get) are skipped, as kube-apiserver does.
    """
    if not accept or not accept.strip():
        return Output.JSON
    for media_range in parse_accept(accept):
        if media_range.quality <= 0 or media_range.type not in (
                JSON_MEDIA_TYPE, "application/*", "*/*"):
            continue
        params = media_range.params
        kind = params.get("as")
        if kind is None:
            return Output.JSON
        if params.get("g") != "meta.k8s.io" or params.get("v") != "v1":
            continue
        if kind == "Table":
            return Output.TABLE
        if kind == metadata_kind:
            return Output.METADATA
    raise errors.NotAcceptable(
        "406: Not Acceptable\n\nAvailable representations: " + ", ".join(SERVED_MEDIA_TYPES))


# Rendering


def _list_meta(resource_version: str, continue_token: str = "") -> dict[str, str]:
    meta = {}
    if resource_version:
        meta["resourceVersion"] = resource_version
    if continue_token:
        meta["continue"] = continue_token
    return meta


def _resource_version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


@dataclass(frozen=True)
class Renderer:
    """Objects and lists of one collection, in one negotiated representation."""

    collection: Collection
    output: Output
    include: IncludeObject = IncludeObject.METADATA

    @classmethod
    def for_request(cls, collection: Collection, request: Request, metadata_kind: str
                    ) -> Renderer:
        output = negotiate(request.headers.get("accept"), metadata_kind)
        include = IncludeObject.METADATA
        if output is Output.TABLE:
            include = IncludeObject.parse(request.query_params.get("includeObject"))
        return cls(collection, output, include)

    def object(self, obj: Mapping[str, Any], *, headers: bool = True) -> dict[str, Any]:
        if self.output is Output.TABLE:
            return self.collection.table.table(
                [self.collection.typed(obj)], resource_version=_resource_version(obj),
                include=self.include, headers=headers)
        if self.output is Output.METADATA:
            return partial_object_metadata(obj)
        return self.collection.typed(obj)

    def list(self, items: list[dict[str, Any]], resource_version: str,
             continue_token: str = "") -> dict[str, Any]:
        if self.output is Output.TABLE:
            return self.collection.table.table(
                [self.collection.typed(obj) for obj in items],
                resource_version=resource_version, continue_token=continue_token,
                include=self.include)
        meta = _list_meta(resource_version, continue_token)
        if self.output is Output.METADATA:
            return {"kind": "PartialObjectMetadataList", "apiVersion": META_GROUP_VERSION,
                    "metadata": meta, "items": [partial_object_metadata(o) for o in items]}
        return {"apiVersion": self.collection.api_version, "kind": self.collection.list_kind,
                "metadata": meta, "items": [self.collection.typed(obj) for obj in items]}

    def bookmark(self, resource_version: str, annotations: dict[str, str]) -> dict[str, Any]:
        """The object of a BOOKMARK event: only a resourceVersion (and annotations)."""
        meta: dict[str, Any] = {"resourceVersion": resource_version}
        if annotations:
            meta["annotations"] = annotations
        if self.output is Output.TABLE:
            return {"kind": "Table", "apiVersion": META_GROUP_VERSION, "metadata": meta,
                    "columnDefinitions": None, "rows": []}
        if self.output is Output.METADATA:
            return {"kind": "PartialObjectMetadata", "apiVersion": META_GROUP_VERSION,
                    "metadata": meta}
        return {"apiVersion": self.collection.api_version, "kind": self.collection.resource.kind,
                "metadata": meta}


# Query parameters


@dataclass(frozen=True)
class ListOptions:
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    watch: bool = False
    timeout_seconds: int = 0
    send_initial_events: bool = False

    @classmethod
    def from_request(cls, request: Request) -> ListOptions:
        query = request.query_params
        return cls(
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
            limit=_integer(query, "limit"),
            continue_token=query.get("continue", ""),
            resource_version=query.get("resourceVersion", ""),
            watch=_boolean(query, "watch"),
            timeout_seconds=_integer(query, "timeoutSeconds"),
            send_initial_events=_boolean(query, "sendInitialEvents"),
        )


def _integer(query: Mapping[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'invalid {name} "{text}": must be an integer') from None
    if value < 0:
        raise errors.bad_request(f"{name} must not be negative, got {value}")
    return value


def _boolean(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name, "")
    if text in _TRUE:
        return True
    if text in _FALSE or text == "":
        return False
    raise errors.bad_request(f'invalid {name} "{text}": must be true or false')


@dataclass(frozen=True)
class DeleteOptions:
    uid: str = ""
    resource_version: str = ""
    dry_run: bool = False

    @classmethod
    async def from_request(cls, request: Request) -> DeleteOptions:
        """DeleteOptions from the body (JSON) and the ``dryRun`` query parameter.

        Only preconditions and dryRun mean anything here: nothing has finalizers, dependents
        or a grace period, so propagationPolicy and gracePeriodSeconds are accepted and ignored.
        """
        body = await _read_body(request)
        dry_run = _dry_run(request.query_params.getlist("dryRun"))
        if not body.strip():
            return cls(dry_run=dry_run)
        content_type = request.headers.get("content-type", JSON_MEDIA_TYPE)
        if content_type.split(";")[0].strip().lower() not in (JSON_MEDIA_TYPE, ""):
            raise errors.unsupported_media_type([JSON_MEDIA_TYPE])
        try:
            options = json.loads(body)
        except ValueError as error:
            raise errors.bad_request(f"the body is not valid JSON DeleteOptions: {error}"
                                     ) from None
        if not isinstance(options, dict):
            raise errors.bad_request("the body must be a DeleteOptions object")
        if options.get("kind", "DeleteOptions") != "DeleteOptions":
            raise errors.bad_request(
                f'the body must be a DeleteOptions, not a {options.get("kind")!r}')
        preconditions = options.get("preconditions") or {}
        if not isinstance(preconditions, dict) or not all(
                isinstance(preconditions.get(key, ""), str | None)
                for key in ("uid", "resourceVersion")):
            raise errors.bad_request(
                "preconditions must be an object with string uid and resourceVersion")
        body_dry_run = options.get("dryRun") or []
        if not isinstance(body_dry_run, list):
            raise errors.bad_request("dryRun must be a list")
        return cls(uid=preconditions.get("uid") or "",
                   resource_version=preconditions.get("resourceVersion") or "",
                   dry_run=dry_run or _dry_run(body_dry_run))


def _dry_run(values: list[Any]) -> bool:
    for value in values:
        if value != "All":
            message = f'dryRun: Unsupported value: "{value}": supported values: "All"'
            raise errors.Invalid(message, causes=[
                errors.Cause("FieldValueNotSupported", message, "dryRun")])
    return bool(values)


async def _read_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_DELETE_OPTIONS_BYTES:
            raise errors.request_entity_too_large(
                f"DeleteOptions larger than {MAX_DELETE_OPTIONS_BYTES} bytes")
    return bytes(body)


# Handlers


async def get_object(collection: Collection, request: Request, namespace: str, name: str
                     ) -> Response:
    renderer = Renderer.for_request(collection, request, OBJECT)
    obj = await collection.store(request).get(namespace, name)
    return JSONResponse(renderer.object(obj))


async def list_or_watch(collection: Collection, request: Request, namespace: str | None
                        ) -> Response:
    options = ListOptions.from_request(request)
    if options.watch:
        return await watch(collection, request, namespace, options)
    renderer = Renderer.for_request(collection, request, LIST)
    result = await collection.store(request).list(
        namespace, label_selector=options.label_selector,
        field_selector=options.field_selector, limit=options.limit,
        continue_token=options.continue_token)
    return JSONResponse(renderer.list(result.items, result.resource_version,
                                      result.continue_token))


async def delete_object(collection: Collection, request: Request, namespace: str, name: str
                        ) -> Response:
    Renderer.for_request(collection, request, OBJECT)  # 406 before deleting, if unanswerable
    options = await DeleteOptions.from_request(request)
    store = collection.store(request)
    if options.dry_run:
        deleted = await store.get(namespace, name)
        check_preconditions(collection.resource, deleted, options.resource_version, options.uid)
    else:
        deleted = await store.delete(namespace, name, resource_version=options.resource_version,
                                     uid=options.uid)
    meta = deleted.get("metadata") or {}
    details = {"name": meta.get("name", name), "group": collection.resource.group,
               "kind": collection.resource.plural, "uid": meta.get("uid", "")}
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "details": details})


async def delete_collection(collection: Collection, request: Request, namespace: str
                            ) -> Response:
    renderer = Renderer.for_request(collection, request, LIST)
    options = ListOptions.from_request(request)
    delete_options = await DeleteOptions.from_request(request)
    store = collection.store(request)
    if delete_options.dry_run:
        result = await store.list(namespace, label_selector=options.label_selector,
                                  field_selector=options.field_selector)
        return JSONResponse(renderer.list(result.items, result.resource_version))
    deleted = await store.delete_collection(
        namespace, label_selector=options.label_selector,
        field_selector=options.field_selector)
    # Each deletion takes the next resourceVersion, in order: the last is the list's.
    return JSONResponse(renderer.list(deleted, _resource_version(deleted[-1]) if deleted else ""))


# Watch


def stop_watches(app: FastAPI) -> None:
    """End every open watch of ``app`` cleanly, e.g. as the server starts to shut down.

    uvicorn waits for open responses before it runs the lifespan shutdown (which closes the
    stores); a server that calls this first does not hold watches until the graceful timeout.
    """
    _stop_event(app).set()


def _stop_event(app: Any) -> asyncio.Event:
    event = getattr(app.state, "watch_stop", None)
    if event is None:
        event = asyncio.Event()
        app.state.watch_stop = event
    return event


async def watch(collection: Collection, request: Request, namespace: str | None,
                options: ListOptions) -> Response:
    renderer = Renderer.for_request(collection, request, OBJECT)
    store = collection.store(request)
    initial: ListResult | None = None
    try:
        if options.send_initial_events:
            # Watch-list (sendInitialEvents=true): the current state, which is never older
            # than a given resourceVersion, as ADDED events from one snapshot, a bookmark that
            # marks their end (the client waits for it), then the changes after the snapshot.
            initial = await store.list(namespace, label_selector=options.label_selector,
                                       field_selector=options.field_selector)
            start = initial.resource_version
        else:
            start = options.resource_version
        store_watch = await store.watch(namespace, resource_version=start,
                                        label_selector=options.label_selector,
                                        field_selector=options.field_selector)
    except BadRequest:
        raise  # a malformed request (selector, resourceVersion): 400 before the stream
    except StoreError as error:
        # The request is valid but cannot be served from this resourceVersion: like
        # kube-apiserver, answer 200 and report it as the stream's one ERROR event.
        return WatchResponse(_error_only(error), close=lambda: None,
                             timeout=1.0, stop=_stop_event(request.app))
    timeout = float(options.timeout_seconds) or MIN_REQUEST_TIMEOUT_SECONDS * (
        1 + random.random())
    events = _event_lines(renderer, store_watch, initial)
    return WatchResponse(events, close=store_watch.close, timeout=timeout,
                         stop=_stop_event(request.app))


def _line(event_type: str, obj: Any) -> bytes:
    text = json.dumps({"type": event_type, "object": obj}, separators=(",", ":"),
                      ensure_ascii=False)
    return (text + "\n").encode()


async def _error_only(error: StoreError) -> AsyncIterator[bytes]:
    yield _line("ERROR", status.status_body(error))


async def _event_lines(renderer: Renderer, events: AsyncIterator[WatchEvent],
                       initial: ListResult | None) -> AsyncIterator[bytes]:
    headers = True  # only the first Table carries columnDefinitions, as in kube-apiserver

    def render(obj: Mapping[str, Any]) -> Any:
        nonlocal headers
        rendered = renderer.object(obj, headers=headers)
        headers = False
        return rendered

    if initial is not None:
        for obj in initial.items:
            yield _line("ADDED", render(obj))
        yield _line("BOOKMARK", renderer.bookmark(initial.resource_version,
                                                  {INITIAL_EVENTS_END: "true"}))
    try:
        async for event in events:
            yield _line(event.type.value, render(event.object))
    except StoreError as error:
        yield _line("ERROR", status.status_body(error))


class WatchResponse(Response):
    """A chunked stream of watch events, one JSON line each, sent as soon as it happens.

    It ends after ``timeout`` seconds, when ``lines`` ends (the watch or store closed), when
    ``stop`` is set, or when the client disconnects; ``close`` (the store watcher's) is called
    whichever way it ends.
    """

    media_type = JSON_MEDIA_TYPE

    def __init__(self, lines: AsyncIterator[bytes], *, close: Callable[[], None],
                 timeout: float, stop: asyncio.Event) -> None:
        # Not Response.__init__: it would set Content-Length: 0 for the empty body.
        self.status_code = 200
        self.background = None
        self.init_headers(None)
        self._lines = lines
        self._close = close
        self._timeout = timeout
        self._stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self._stream(send))
        disconnected = asyncio.ensure_future(_disconnected(receive))
        stopping = asyncio.ensure_future(self._stop.wait())
        tasks = (streaming, disconnected, stopping)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if not streaming.done() and not disconnected.done():
                # Server stopping: end the watch, let the stream finish its response.
                self._close()
                await asyncio.wait((streaming, disconnected), timeout=STOP_GRACE_SECONDS,
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            aclose = getattr(self._lines, "aclose", None)
            if aclose is not None:
                await aclose()
        if streaming.done() and not streaming.cancelled():
            error = streaming.exception()
            if error is not None and not isinstance(error, OSError):
                raise error

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        try:
            async with asyncio.timeout(self._timeout):
                async for line in self._lines:
                    await send({"type": "http.response.body", "body": line, "more_body": True})
        except TimeoutError:
            pass
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# Router


def collection_router(collection: Collection) -> APIRouter:
    """Routes for get, list, watch, delete and (unless disabled) deletecollection."""
    plural = collection.resource.plural
    router = APIRouter()

    async def list_all(request: Request) -> Response:
        return await list_or_watch(collection, request, None)

    async def list_namespaced(request: Request, namespace: str) -> Response:
        return await list_or_watch(collection, request, namespace)

    async def get(request: Request, namespace: str, name: str) -> Response:
        return await get_object(collection, request, namespace, name)

    async def delete(request: Request, namespace: str, name: str) -> Response:
        return await delete_object(collection, request, namespace, name)

    async def delete_all(request: Request, namespace: str) -> Response:
        return await delete_collection(collection, request, namespace)

    routes: list[tuple[str, str, Callable[..., Any], str]] = [
        ("GET", f"{API_PATH}/{plural}", list_all, "list"),
        ("GET", f"{NAMESPACED}/{plural}", list_namespaced, "list"),
        ("GET", f"{NAMESPACED}/{plural}/{{name}}", get, "get"),
        ("DELETE", f"{NAMESPACED}/{plural}/{{name}}", delete, "delete"),
    ]
    if collection.deletecollection:
        routes.append(("DELETE", f"{NAMESPACED}/{plural}", delete_all, "deletecollection"))
    for method, path, endpoint, verb in routes:
        router.add_api_route(path, endpoint, methods=[method], name=f"{verb} {plural}",
                             include_in_schema=False)
    return router
