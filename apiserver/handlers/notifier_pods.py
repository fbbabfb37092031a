"""pods (notifier.x-k8s.io): get and list NotifierPods, read-only, as metrics.k8s.io serves
its pods (apiserver.notifier.notifier_pods builds them).

- ``GET .../namespaces/<ns>/pods/<name>``, ``GET .../namespaces/<ns>/pods`` and ``GET
  .../pods`` (every namespace), with label and field (``metadata.name``,
  ``metadata.namespace``) selectors, ``limit`` and ``continue``; answers in JSON, as a Table
  or as PartialObjectMetadata(List).
- The access middleware has authorized the request itself (``get``/``list`` on
  ``pods.notifier.x-k8s.io``). A NotifierPod shows a pod, so reading it also needs what reading
  the pod needs: ``get`` on that core pod for a get, ``list`` on the core pods of the namespace
  (of the cluster for every namespace) for a list, each one SubjectAccessReview, asked before
  anything is read (a user who may not read the pods learns not even whether one exists).
- Reads come from the server's pod cache, as ``resourceVersion=0`` reads (milliseconds behind
  kube-apiserver): only an unset ``resourceVersion`` or ``0`` is served, no
  ``resourceVersionMatch``, and a list's ``metadata.resourceVersion`` is empty (there is
  nothing to watch from). ``watch`` answers 405 MethodNotAllowed, as metrics-server does.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from apiserver import errors
from apiserver.api.resources import API_PATH, GROUP
from apiserver.api.tables import NOTIFIER_POD_TABLE
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, denial_message
from apiserver.authz.sar import Authorizer
from apiserver.handlers.caller import CurrentUser
from apiserver.handlers.negotiation import LIST, OBJECT, Renderer
from apiserver.handlers.options import ListOptions
from apiserver.notifier.notifier_pods import RESOURCE, NotifierPods
from apiserver.registry.selectors import parse_field_selector, parse_label_selector

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"
PLURAL = RESOURCE.plural
WATCH_REFUSAL = (f"watch is not served for {RESOURCE.qualified}: it is read from the server's "
                 "pod cache; list again, or watch the core pods")


def _cache_reads_only(request: Request) -> None:
    """400 unless the read may be served from the cache as it is."""
    query = request.query_params
    version = query.get("resourceVersion", "")
    if version not in ("", "0"):
        raise errors.bad_request(
            f'resourceVersion: unsupported value "{version[:64]}": {RESOURCE.qualified} '
            'are read from the server\'s pod cache; leave resourceVersion out, or use "0"')
    if query.get("resourceVersionMatch"):
        raise errors.bad_request(
            f"resourceVersionMatch is not supported for {RESOURCE.qualified} (read from the "
            "server's pod cache); leave it out")


async def _require_core(authorizer: Authorizer, user: UserInfo, verb: str, namespace: str,
                        name: str = "") -> None:
    """Forbidden unless `user` may `verb` the core pods (`name` if given) of `namespace`."""
    ask = RequestAttributes.for_resource(verb, group="", version="v1", resource="pods",
                                         namespace=namespace, name=name)
    decision = await authorizer.authorize(user, ask)
    if not decision.allowed:
        raise errors.forbidden(PLURAL, GROUP, name, (
            f"reading {RESOURCE.qualified} needs {verb} on the core pods too: "
            f"{denial_message(user.name, ask, decision.reason)}"))


def router(view: NotifierPods, authorizer: Authorizer) -> APIRouter:
    """The get and list routes of NotifierPods from `view`; `authorizer` checks the core pods'
    get and list."""
    routes = APIRouter()

    async def listing(request: Request, user: UserInfo, namespace: str | None) -> Response:
        options = ListOptions.from_request(request)
        if options.watch:
            raise errors.MethodNotAllowed(WATCH_REFUSAL)
        renderer = Renderer.for_request(RESOURCE, NOTIFIER_POD_TABLE, request, LIST)
        _cache_reads_only(request)
        labels = parse_label_selector(options.label_selector)
        fields = parse_field_selector(options.field_selector, RESOURCE.selectable_fields)
        await _require_core(authorizer, user, "list", namespace or "")
        page = await view.list_page(user, namespace, labels=labels, fields=fields,
                               limit=options.limit, continue_token=options.continue_token)
        return JSONResponse(renderer.list(page.items, "", page.continue_token))

    @routes.get(f"{API_PATH}/{PLURAL}", include_in_schema=False)
    async def list_all(request: Request, user: CurrentUser) -> Response:
        return await listing(request, user, None)

    @routes.get(f"{NAMESPACED}/{PLURAL}", include_in_schema=False)
    async def list_namespaced(request: Request, namespace: str, user: CurrentUser
                              ) -> Response:
        return await listing(request, user, namespace)

    @routes.get(f"{NAMESPACED}/{PLURAL}/{{name}}", include_in_schema=False)
    async def get(request: Request, namespace: str, name: str, user: CurrentUser
                  ) -> Response:
        renderer = Renderer.for_request(RESOURCE, NOTIFIER_POD_TABLE, request, OBJECT)
        _cache_reads_only(request)
        await _require_core(authorizer, user, "get", namespace, name)
        found = await view.get(user, namespace, name)
        if found is None:
            raise errors.not_found(PLURAL, GROUP, name)
        return JSONResponse(renderer.object(found))

    return routes
