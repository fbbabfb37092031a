"""Storage errors, each carrying what its ``metav1.Status`` needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from apiserver.api.status import StatusError
from apiserver.registry.resources import ResourceType


class StoreError(Exception):
    """Base of all registry errors; ``as_status()`` is the ``metav1.Status`` body to answer."""

    code: ClassVar[int] = 500
    reason: ClassVar[str] = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        resource: ResourceType | None = None,
        name: str = "",
        causes: Sequence[Mapping[str, str]] = (),
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.resource = resource
        self.name = name
        self.causes = [dict(cause) for cause in causes]
        self.retry_after_seconds = retry_after_seconds

    @property
    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.resource is not None:
            details["group"] = self.resource.group
            details["kind"] = self.resource.plural
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        return details

    def status_error(self) -> StatusError:
        """The same error as the API layer's StatusError (one Status builder for both)."""
        return StatusError(self.code, self.reason, self.message, details=self.details or None)

    def as_status(self) -> dict[str, Any]:
        return self.status_error().status


class BadRequest(StoreError):
    code = 400
    reason = "BadRequest"


class InvalidSelector(BadRequest):
    """A label or field selector that does not parse or names an unsupported field.

    Kubernetes answers these with 400; the cause names ``labelSelector`` or ``fieldSelector``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(
            message,
            causes=[{"reason": "FieldValueInvalid", "message": message, "field": field}],
        )


class NotFound(StoreError):
    code = 404
    reason = "NotFound"


class AlreadyExists(StoreError):
    code = 409
    reason = "AlreadyExists"


class Conflict(StoreError):
    code = 409
    reason = "Conflict"


class Expired(StoreError):
    """The resourceVersion or continue token is older than the retained history (410 Gone)."""

    code = 410
    reason = "Expired"


class TooLarge(StoreError):
    code = 413
    reason = "RequestEntityTooLarge"


class Invalid(StoreError):
    code = 422
    reason = "Invalid"


class TooManyRequests(StoreError):
    code = 429
    reason = "TooManyRequests"


class ResourceVersionTooLarge(StoreError):
    """A resourceVersion this store has not reached (e.g. from another data directory)."""

    code = 504
    reason = "Timeout"

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        )


class DataDirInUse(RuntimeError):
    """Another process holds the registry database."""


def check_preconditions(resource: ResourceType, obj: Mapping[str, Any], resource_version: str,
                        uid: str) -> None:
    """Conflict unless the object has the given uid and resourceVersion (each if set), worded
    as kube-apiserver words failed preconditions."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    prefix = f'Operation cannot be fulfilled on {resource.qualified} "{name}": '
    if uid and uid != meta.get("uid"):
        raise Conflict(f"{prefix}Precondition failed: UID in precondition: {uid}, UID in object "
                       f"meta: {meta.get('uid')}", resource=resource, name=name)
    if resource_version and resource_version != meta.get("resourceVersion"):
        raise Conflict(f"{prefix}the object has been modified; please apply your changes to the "
                       "latest version and try again", resource=resource, name=name)
