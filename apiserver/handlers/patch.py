"""PATCH .../namespaces/<ns>/<plural>/<name>: labels and annotations, as kubectl changes them.

The Content-Type picks the patch (apiserver.api.patch): JSON merge patch, JSON patch, strategic
merge patch (applied as a merge patch) or server-side apply (apiserver.api.managed_fields).
The patch is applied to the stored object inside the store's atomic update, so it never loses
a concurrent write; a ``metadata.resourceVersion`` (or ``uid``) the patched object carries is a
precondition (409). Only labels and annotations may change (422 naming each other field).
Query: ``dryRun=All`` (answer what would be stored, store nothing), ``fieldManager`` (required
for apply), ``force`` (apply only: take conflicting fields over), ``fieldValidation`` (accepted;
unknown fields are immutable ones here, so they are always refused).

An apply to a missing object creates it through the resource's own create path when it has one
(``ApplyCreate``), else answers 405 saying how such objects are created.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from apiserver import errors
from apiserver.api import managed_fields
from apiserver.api.field_errors import show
from apiserver.api.patch import (
    PatchType,
    apply_patch,
    check_mutable,
    decode,
    merge_patch,
    patch_options_invalid,
    patch_type,
)
from apiserver.api.resources import VERSION
from apiserver.handlers.body import MAX_BODY_BYTES, read_limited
from apiserver.handlers.negotiation import Renderer
from apiserver.registry.errors import check_preconditions
from apiserver.registry.resources import ResourceType
from apiserver.registry.store import Object, ObjectStore
from apiserver.timestamps import timestamp

"""Bound on a patch body (before YAML or JSON parsing); objects here are a few KiB."""
_FIELD_VALIDATION = ("", "Strict", "Warn", "Ignore")
_TRUE, _FALSE = ("true", "1"), ("false", "0", "")
_KEPT_WHEN_CLEARED = ("creationTimestamp", "generation")
"""Server-set members a patch may clear without meaning it (``creationTimestamp: null`` in
YAML written by ``kubectl create --dry-run=client -o yaml``): kept, as kube-apiserver keeps them
on update. A different value is still immutable (422)."""

ApplyCreate = Callable[[Request, str, dict[str, Any], list[dict[str, Any]]], Awaitable[Response]]
"""Creates the object an apply names when it does not exist: (request, namespace, applied
configuration, its managedFields) → the create's answer (201)."""


@dataclass(frozen=True)
class PatchOptions:
    """The query of a PATCH, checked as kube-apiserver's ValidatePatchOptions checks it."""

    dry_run: bool
    field_manager: str
    force: bool

    @classmethod
    def from_request(cls, request: Request, kind: PatchType) -> PatchOptions:
        query = request.query_params
        dry_run = query.getlist("dryRun")
        for value in dry_run:
            if value != "All":
                raise patch_options_invalid(
                    "dryRun", "FieldValueNotSupported",
                    f'Unsupported value: "{value}": supported values: "All"')
        force_text = query.get("force")
        if force_text is not None and kind is not PatchType.APPLY:
            raise patch_options_invalid(
                "force", "FieldValueForbidden",
                "Forbidden: may not be specified for non-apply patch")
        if (force_text or "").lower() not in _TRUE + _FALSE:
            raise errors.bad_request(f'invalid force "{force_text}": must be true or false')
        validation = query.get("fieldValidation", "")
        if validation not in _FIELD_VALIDATION:
            raise patch_options_invalid(
                "fieldValidation", "FieldValueNotSupported", f'Unsupported value: "{validation}": '
                'supported values: "Ignore", "Strict", "Warn"')
        manager = query.get("fieldManager", "")
        managed_fields.check_manager(manager, apply=kind is PatchType.APPLY)
        if not manager:
            # kube-apiserver's default manager for an Update: the user agent's product name.
            manager = request.headers.get("user-agent", "").split("/")[0][
                :managed_fields.MAX_MANAGER_LENGTH]
        return cls(bool(dry_run), manager, (force_text or "").lower() in _TRUE)


@dataclass(frozen=True)
class Patch:
    """One decoded PATCH request, applicable to the stored object (``apply_to``)."""

    resource: ResourceType
    kind: PatchType
    document: Any
    options: PatchOptions
    time: str

    @property
    def api_version(self) -> str:
        return f"{self.resource.group}/{VERSION}"

    def apply_to(self, current: Object) -> Object:
        """The object ``current`` becomes: preconditions (409), immutability (422), conflicts
        of an apply (409) checked; managedFields recorded. Pure: safe inside the store's
        atomic update."""
        typed = {"apiVersion": self.api_version, "kind": self.resource.kind,
                 **{key: value for key, value in current.items()
                    if key not in ("apiVersion", "kind")}}
        meta = typed.get("metadata") or {}
        managed = list(meta.get("managedFields") or [])
        if self.kind is PatchType.APPLY:
            patched = self._applied(typed, managed)
        else:
            patched = apply_patch(self.kind, typed, self.document)
        new_meta = patched.get("metadata") if isinstance(patched, dict) else None
        if isinstance(new_meta, dict):
            version, uid = new_meta.get("resourceVersion"), new_meta.get("uid")
            check_preconditions(self.resource, current,
                                version if isinstance(version, str) else "",
                                uid if isinstance(uid, str) else "")
            for key in ("resourceVersion", "uid"):
                if key in meta:
                    new_meta[key] = meta[key]
            for key in _KEPT_WHEN_CLEARED:
                if new_meta.get(key) is None and key in meta:
                    new_meta[key] = meta[key]
        check_mutable(self.resource.kind, self.resource.group, typed, patched)
        if self.kind is not PatchType.APPLY:
            new_meta = patched["metadata"]
            new_meta.pop("managedFields", None)
            if managed_fields.fields_of(meta) != managed_fields.fields_of(new_meta):
                managed = managed_fields.record_update(
                    managed, self.options.field_manager, self.api_version, self.time, meta,
                    new_meta)
            if managed:
                new_meta["managedFields"] = managed
        return {key: value for key, value in patched.items()
                if key not in ("apiVersion", "kind") or key in current}

    def _applied(self, typed: Object, managed: list[dict[str, Any]]) -> Object:
        meta = typed.get("metadata") or {}
        config = _without_nulls(self.document)
        config_meta = config.get("metadata") or {}
        applied = managed_fields.apply(
            meta, managed, config_meta, manager=self.options.field_manager,
            api_version=self.api_version, time=self.time, force=self.options.force,
            resource=self.resource.plural, group=self.resource.group,
            name=str(meta.get("name", "")))
        rest = {key: value for key, value in config.items() if key != "metadata"}
        patched = merge_patch(typed, rest)
        others = {key: value for key, value in config_meta.items()
                  if key not in (*managed_fields.MAPS, "managedFields")
                  and not (key == "namespace" and value == "")}
        new_meta = merge_patch({key: value for key, value in meta.items()
                                if key not in managed_fields.MAPS}, others)
        new_meta.update(applied.metadata)
        new_meta.pop("managedFields", None)
        if applied.managed_fields:
            new_meta["managedFields"] = applied.managed_fields
        patched["metadata"] = new_meta
        return patched

    def created_managed_fields(self) -> list[dict[str, Any]]:
        """The managedFields of the object an apply creates."""
        return managed_fields.apply(
            {}, [], _without_nulls(self.document).get("metadata") or {},
            manager=self.options.field_manager, api_version=self.api_version, time=self.time,
            force=False,
            resource=self.resource.plural, group=self.resource.group, name="").managed_fields


def _without_nulls(value: Any) -> Any:
    """An apply configuration without its null members: in an apply, null means "not given"
    (merging it would delete the member)."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def check_apply_config(resource: ResourceType, config: dict[str, Any], namespace: str,
                       name: str) -> None:
    """400 unless the applied configuration is of this kind and names this object."""
    api_version = f"{resource.group}/{VERSION}"
    if config.get("apiVersion") != api_version or config.get("kind") != resource.kind:
        raise errors.bad_request(
            f'the apply configuration must be a {resource.kind} with apiVersion '
            f'"{api_version}"; got kind {config.get("kind")!r} and apiVersion '
            f'{config.get("apiVersion")!r}')
    meta = config.get("metadata") or {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    if meta.get("name", name) != name:
        raise errors.bad_request(
            f"the name of the object ({show(meta.get('name'))}) does not match the name on the "
            f"URL ({name})")
    if meta.get("namespace", namespace) not in (namespace, ""):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the "
            f"request ({show(meta.get('namespace'))} is not {namespace})")
    if meta.get("managedFields") is not None:
        raise errors.bad_request("metadata.managedFields must be nil in an apply configuration")


async def patch_object(resource: ResourceType, store: ObjectStore, renderer: Renderer,
                       request: Request, namespace: str, name: str, *,
                       apply_create: ApplyCreate | None, create_hint: str) -> Response:
    """Answer one PATCH (``renderer`` already negotiated, so a 406 comes before any write).

    A non-apply patch of a missing object is 404; an apply creates it with ``apply_create``,
    or without one answers 405 with ``create_hint``."""
    kind = patch_type(request.headers.get("content-type"))
    options = PatchOptions.from_request(request, kind)
    raw = await read_limited(request, MAX_BODY_BYTES, "the patch")
    document = await run_in_threadpool(decode, kind, raw)
    if kind is PatchType.APPLY:
        check_apply_config(resource, document, namespace, name)
    patch = Patch(resource, kind, document, options, timestamp())
    try:
        if options.dry_run:
            result = await run_in_threadpool(patch.apply_to,
                                             copy.deepcopy(await store.get(namespace, name)))
            store.check_update(result)
        else:
            result = await store.guaranteed_update(
                namespace, name, await decided(patch, store, namespace, name))
    except errors.NotFound:
        if kind is not PatchType.APPLY:
            raise
        if apply_create is None:
            raise errors.MethodNotAllowed(
                f'{resource.plural}.{resource.group} "{name}" not found, and server-side apply '
                f"cannot create it: {create_hint}", group=resource.group,
                resource=resource.plural, name=name) from None
        named = {**document, "metadata": {**(document.get("metadata") or {}), "name": name}}
        return await apply_create(request, namespace, named, patch.created_managed_fields())
    return JSONResponse(renderer.object(result))


async def decided(patch: Patch, store: ObjectStore, namespace: str, name: str
                   ) -> Callable[[Object], Object]:
    """``patch.apply_to`` for the store's atomic update, with its outcome on the object the
    store has now decided beforehand in a worker thread: applying a patch may cost what its
    bounds allow (apiserver.api.patch), and a store may run the update's ``mutate`` on the event
    loop. The update takes that outcome (the patched object, once, or the error) when it sees
    the same object (resourceVersion); after another write it applies the patch anew."""
    try:
        current = await store.get(namespace, name)
    except errors.NotFound:
        return patch.apply_to  # the update looks further (a cache may lag)
    version = _resource_version(current)
    outcome: Object | errors.APIError | None
    try:
        outcome = await run_in_threadpool(patch.apply_to, current)
    except errors.APIError as error:
        outcome = error

    def apply_to(stored: Object) -> Object:
        nonlocal outcome
        if outcome is None or _resource_version(stored) != version:
            return patch.apply_to(stored)
        if isinstance(outcome, errors.APIError):
            raise outcome
        patched, outcome = outcome, None  # handed out once: the store may change it
        return patched

    return apply_to


def _resource_version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
