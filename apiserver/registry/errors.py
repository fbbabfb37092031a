"""Storage errors: ``apiserver.errors`` kinds raised by the registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from apiserver import errors
from apiserver.api.json_input import as_printable
from apiserver.errors import Cause, StartupError
from apiserver.registry.resources import ResourceType


class StoreError(errors.APIError):
    """Base of all registry errors; each is also the ``apiserver.errors`` kind it names."""

    def __init__(
        self,
        message: str,
        *,
        resource: ResourceType | None = None,
        name: str = "",
        causes: Sequence[Cause] = (),
        retry_after_seconds: int = 0,
    ) -> None:
        super().__init__(
            message,
            group=resource.group if resource else "",
            resource=resource.plural if resource else "",
            name=name,
            causes=causes,
            retry_after_seconds=retry_after_seconds,
        )


class BadRequest(StoreError, errors.BadRequest):
    pass


class InvalidSelector(BadRequest):
    """A label or field selector that does not parse or names an unsupported field.

    Kubernetes answers these with 400; the cause names ``labelSelector`` or ``fieldSelector``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, causes=[Cause("FieldValueInvalid", message, field)])


class NotFound(StoreError, errors.NotFound):
    pass


class AlreadyExists(StoreError, errors.AlreadyExists):
    pass


class Conflict(StoreError, errors.Conflict):
    pass


class Finished(Conflict):
    """A write that would change the spec or status of a finished record: a finished record
    never changes again, whoever writes (a replica whose run was taken over, one that lost its
    Lease); its metadata (labels, annotations) still may."""

    def __init__(self, resource: ResourceType, name: str, phase: str) -> None:
        super().__init__(
            f'{resource.qualified} "{as_printable(name)}" is finished (phase {phase}): a '
            "finished record never changes; create a new run instead",
            resource=resource, name=name,
            causes=[Cause("FieldValueForbidden", f"finished with phase {phase}", "status")])
        self.phase = phase


class Expired(StoreError, errors.Gone):
    """The resourceVersion or continue token is older than the retained history (410 Gone)."""


class TooLarge(StoreError, errors.RequestEntityTooLarge):
    pass


class Invalid(StoreError, errors.Invalid):
    pass


class TooManyRequests(StoreError, errors.TooManyRequests):
    pass


class ResourceVersionTooLarge(StoreError, errors.Timeout):
    """A resourceVersion this store has not reached (e.g. from another data directory)."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message, causes=[Cause("ResourceVersionTooLarge", "Too large resource version")])


STORAGE_RETRY_AFTER_SECONDS = 5


class StorageUnavailable(StoreError, errors.ServiceUnavailable):
    """The storage backend failed to read or write (full disk, I/O error, read-only file
    system): nothing of the request was stored, and the server is not ready until a write
    succeeds again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after_seconds=STORAGE_RETRY_AFTER_SECONDS)


class DataDirInUse(StartupError, RuntimeError):
    """Another process holds the registry database."""


class StorageNotInstalled(StartupError, RuntimeError):
    """--storage=kubernetes without the storage CRDs installed and Established: the server
    does not start; the message names each missing CRD and what to apply."""


def required(resource: ResourceType, *fields: str, detail: str = "") -> Invalid:
    """422 for missing fields; ``detail`` words the requirement if not "<fields> are"."""
    what = detail or " and ".join(fields)
    return Invalid(
        f"{what} {'is' if len(fields) == 1 else 'are'} required",
        resource=resource,
        causes=[Cause("FieldValueRequired", "Required value", field) for field in fields],
    )


def not_found(resource: ResourceType, name: str) -> NotFound:
    return NotFound(f'{resource.qualified} "{name}" not found', resource=resource, name=name)


def check_preconditions(resource: ResourceType, obj: Mapping[str, Any], resource_version: str,
                        uid: str) -> None:
    """Conflict unless the object has the given uid and resourceVersion (each if set), worded
    as kube-apiserver words failed preconditions."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    prefix = f'Operation cannot be fulfilled on {resource.qualified} "{name}": '
    if uid and uid != meta.get("uid"):
        raise Conflict(f"{prefix}Precondition failed: UID in precondition: {as_printable(uid)}, "
                       f"UID in object meta: {meta.get('uid')}", resource=resource, name=name)
    if resource_version and resource_version != meta.get("resourceVersion"):
        raise Conflict(f"{prefix}the object has been modified; please apply your changes to the "
                       "latest version and try again", resource=resource, name=name)


class MalformedObject(StoreError, errors.InternalError):
    """A stored object that is not what its kind's decoder reads (written by someone else, by
    hand or by another version). The store's cache skips it (it is counted and logged once,
    ``KubeObjectStore``); it reaches a caller only from a read of that one object (a
    ``guaranteed_update`` of it), as a 500 naming it."""

    def __init__(self, resource: ResourceType, namespace: str, name: str, reason: str) -> None:
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(
            f'the stored {resource.kind} "{as_printable(where)}" is malformed ({reason}); the '
            "server ignores it: delete it (its storage object), the server rewrites none",
            resource=resource, name=name)
        self.resource_type, self.namespace, self.object_name = resource, namespace, name
        self.why = reason
        """What is wrong, naming the field (the message adds the object and what to do)."""
