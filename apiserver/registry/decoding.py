"""Reading stored objects defensively: one decoder per stored kind, one error.

A stored object may have been written by anyone with write access to its storage (an admin's
``kubectl edit``, another version), so nothing read back is trusted. Each kind has one decoder
(``ScopeRun.of``, ``PodSet.of``, ...) built from the readers here: it returns the typed object or
raises ``MalformedObject(resource, namespace, name, reason)``, the reason naming the field, what
it holds and what it must be. The store's cache (``kube_cache.StorageCache``) applies the
kind's decoder to every object it receives and skips the malformed ones, so no pass, list,
watch or start reads one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from apiserver.registry.errors import MalformedObject
from apiserver.registry.objects import metadata
from apiserver.registry.resources import ResourceType
from apiserver.registry.store import Object

T = TypeVar("T")

Decoder = Callable[[Object], object]
"""A kind's decoder as a store applies it: raises ``MalformedObject``, or the object is valid."""


class Malformed(Exception):  # noqa: N818 - a reason, turned into MalformedObject by `decoded`
    """Why a field cannot be read: raised by the readers, caught by ``decoded``."""


def decoded(resource: ResourceType, obj: Object, decode: Callable[[Object], T]) -> T:
    """``decode(obj)``; a ``Malformed`` (or a value ``decode`` did not expect: a bug of a
    decoder that is not defensive yet) as the one ``MalformedObject`` naming the object."""
    try:
        mapping(obj, "the object")
        return decode(obj)
    except (Malformed, LookupError, TypeError, ValueError, AttributeError) as error:
        meta = metadata(obj) if isinstance(obj, dict) else {}
        raise MalformedObject(resource, str(meta.get("namespace", "")),
                              str(meta.get("name", "")),
                              str(error) if isinstance(error, Malformed)
                              else f"{type(error).__name__}: {error}") from error


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{path} must be an object, not {_kind_of(value)}")
    return value


def listing(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{path} must be a list, not {_kind_of(value)}")
    return value


def text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{path} must be a string, not {_kind_of(value)}")
    return value


def integer(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{path} must be an integer, not {_kind_of(value)}")
    return value


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise Malformed(f"{path} must be a boolean, not {_kind_of(value)}")
    return value


def optional_mapping(value: object, path: str) -> Mapping[str, Any]:
    """An object, or empty when the field is absent (null); so for each ``optional_``."""
    return {} if value is None else mapping(value, path)


def optional_listing(value: object, path: str) -> list[Any]:
    return [] if value is None else listing(value, path)


def optional_text(value: object, path: str) -> str:
    return "" if value is None else text(value, path)


def optional_integer(value: object, path: str) -> int:
    return 0 if value is None else integer(value, path)


def string_map(value: object, path: str) -> dict[str, str]:
    """An optional map of strings (labels, annotations)."""
    found = optional_mapping(value, path)
    for key, item in found.items():
        text(item, f"{path}[{key!r}]")
    return dict(found)


def public_object(obj: Object) -> Object:
    """What every stored public object needs for the store to index and select it: metadata
    with string labels and annotations."""
    meta = mapping(obj.get("metadata"), "metadata")
    string_map(meta.get("labels"), "metadata.labels")
    string_map(meta.get("annotations"), "metadata.annotations")
    return obj
