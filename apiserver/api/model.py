"""The base of the API's typed definitions (types.py) and the markers their fields carry.

A field is declared once, as a pydantic field with markers in its ``Annotated`` metadata::

    timeout_seconds: Annotated[
        int | None,
        Field(description="Per-pod timeout; bounded by the server's maximum."),
        Bounds(1, "max_timeout_seconds"),
        Invalid("must be a whole number"),
    ] = None

From that one declaration come its JSON name (camelCase unless ``Field(alias=...)`` says
otherwise), its OpenAPI schema (schema.py reads the type, the description and the markers), the
strict decoding of a request (decoding.py: no coercion, unknown fields refused) and the field
errors a wrong value gets, worded as Kubernetes words them.

Markers run as pydantic validators. A marker that finds a problem raises it as a ``Problem``
(relative to the field: the translation in decoding.py prefixes the field's path), so that one
check can report several problems, at sub-paths (``[key]`` of a map) and with the value it
chooses to show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, PydanticCustomError, PydanticKnownError, core_schema

from apiserver.api.field_errors import CauseReason, FieldError

FIELD_ERRORS = "field_errors"
"""The pydantic error type that carries ``Problem``s (in ``ctx["problems"]``)."""
UNKNOWN_FIELD = "extra_forbidden"
"""The pydantic error type of a field the definition does not have."""

Limits = Mapping[str, int]
"""Server-configured bounds, by name (e.g. ``max_timeout_seconds``); the validation context."""


class APIModel(BaseModel):
    """A typed API object or part of one: strict, closed (unknown fields are errors), camelCase.

    ``validate_default``: markers also see absent fields (as None), so that ``Required`` can
    say what to set. The class docstring is the schema's description.
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, validate_default=True, alias_generator=to_camel,
        frozen=True,
    )

    schema_name: ClassVar[str] = ""
    """The OpenAPI component name (``io.x-k8s.notifier.v1alpha1.<Kind>``); set by types.py."""
    schema_extra: ClassVar[Mapping[str, Any]] = {}
    """Extensions of the object's schema, e.g. ``x-kubernetes-map-type``."""
    KIND: ClassVar[str] = ""
    """Set on top-level objects (PodNotifier, Notification): their ``kind``."""


class _Input:
    """The default of ``Problem.value``: the value of the checked field."""


_INPUT: Any = _Input()


@dataclass(frozen=True)
class Problem:
    """One problem a marker found, relative to the field it checks."""

    reason: CauseReason
    detail: str
    at: str = ""
    """Path below the field, e.g. ``[app]`` (a map key) or ``.name``; empty for the field."""
    value: Any = _INPUT
    supported: tuple[str, ...] = ()
    quoted: bool = False
    """List ``supported`` as JSON strings (see ``FieldError.not_supported``)."""

    def at_path(self, path: str, field_value: Any) -> FieldError:
        """The field error of this problem found in the field at ``path`` holding
        ``field_value``."""
        where = f"{path}{self.at}"
        value = field_value if self.value is _INPUT else self.value
        if self.reason is CauseReason.REQUIRED:
            return FieldError.required(where, self.detail)
        if self.reason is CauseReason.NOT_SUPPORTED:
            return FieldError.not_supported(where, value, self.supported, self.detail,
                                            quoted=self.quoted)
        if self.reason is CauseReason.DUPLICATE:
            return FieldError.duplicate(where, value, self.detail)
        return FieldError.invalid(where, value, self.detail)


def invalid(detail: str, *, at: str = "", value: Any = _INPUT) -> Problem:
    return Problem(CauseReason.INVALID, detail, at, value)


def fail(problems: Iterable[Problem]) -> NoReturn:
    """Raise ``problems`` as the field's validation error."""
    found = tuple(problems)
    raise PydanticCustomError(FIELD_ERRORS, "{count} field problem(s)",
                              {"problems": found, "count": len(found)})


_WRAPPERS = ("nullable", "function-after", "function-before", "function-wrap")
_COLLECTIONS = {"list": ("items_schema",), "set": ("items_schema",),
                "dict": ("keys_schema", "values_schema")}
_PLAIN = ("str", "int", "bool", "float")


def _fail_fast(schema: CoreSchema) -> CoreSchema:
    """``schema``, where it is (within validators and null) a list or map of plain values,
    stopping at the first item that is not of its type: ``Invalid`` words all such errors as
    one problem, and a large body's list of wrong items would otherwise make as many errors,
    built and read without the GIL released once (seconds, for a 1 MiB body)."""
    kind = schema["type"]
    if kind in _WRAPPERS and "schema" in schema:
        return {**schema, "schema": _fail_fast(schema["schema"])}
    parts = _COLLECTIONS.get(kind, ())
    if parts and all(schema.get(part, {"type": "any"})["type"] in _PLAIN
                     for part in parts):
        return {**schema, "fail_fast": True}
    return schema


def _is_ours(error: ValidationError) -> bool:
    """Whether the error holds problems a marker worded or unknown fields: those pass through
    ``Invalid`` unchanged."""
    return any(detail["type"] in (FIELD_ERRORS, UNKNOWN_FIELD) for detail in error.errors())


# Markers. Each is a frozen dataclass in a field's Annotated metadata; pydantic calls
# __get_pydantic_core_schema__ to wrap the field's validation, schema.py reads the attributes.
# In ``Annotated[T, A, B]`` B wraps A, so ``Invalid`` goes last: it sees every other error.


@dataclass(frozen=True)
class Invalid:
    """The message when the value is not of the field's type (or a part of it is not)."""

    detail: str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate,
                                                           _fail_fast(handler(source)))

    def _validate(self, value: Any, validate: Callable[[Any], Any]) -> Any:
        try:
            return validate(value)
        except ValidationError as error:
            if _is_ours(error):
                raise
            fail([invalid(self.detail)])


@dataclass(frozen=True)
class Required:
    """The field must be set; ``detail`` says what to set it to.

    Unset is null or absent, and, with ``empty`` (the default), also "" and []. Declare the
    field with a default of None: absence is this marker's error, not pydantic's.
    """

    detail: str
    empty: bool = True

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, validate: Callable[[Any], Any]) -> Any:
        if value is None or (self.empty and (value == "" or value == [])):
            fail([Problem(CauseReason.REQUIRED, self.detail)])
        return validate(value)


@dataclass(frozen=True)
class OneOf:
    """The field is one of ``choices`` (the schema's enum); anything else, null included, is
    not supported (put the marker inside the Optional of an optional field)."""

    choices: tuple[str, ...]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, validate: Callable[[Any], Any]) -> Any:
        if not isinstance(value, str) or value not in self.choices:
            fail([Problem(CauseReason.NOT_SUPPORTED, "", supported=self.choices)])
        return validate(value)


@dataclass(frozen=True)
class Bounds:
    """An integer between ``low`` and ``high`` inclusive; ``high`` may name a server limit.

    ``detail`` is the message, formatted with ``low`` and ``high``.
    """

    low: int
    high: int | str
    detail: str = "must be between {low} and {high}, inclusive"

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.with_info_after_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, info: core_schema.ValidationInfo) -> Any:
        if value is None:
            return value
        high = self.high if isinstance(self.high, int) else (info.context or {})[self.high]
        if not self.low <= value <= high:
            fail([invalid(self.detail.format(low=self.low, high=high))])
        return value


@dataclass(frozen=True)
class Check:
    """Further rules: ``rule`` yields the problems it finds in the value.

    By default the rule sees a well-typed value. With ``before``, it sees the raw input first
    (and must accept anything): for maps, whose bad entries are each reported at their key.
    """

    rule: Callable[[Any], Iterable[Problem]]
    before: bool = False

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        if self.before:
            return core_schema.no_info_before_validator_function(self._validate, handler(source))
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def _validate(self, value: Any) -> Any:
        problems = list(self.rule(value)) if value is not None else []
        if problems:
            fail(problems)
        return value


@dataclass(frozen=True)
class ServerSet:
    """The server sets this field: a value in a request is accepted and ignored (neither
    checked nor kept), as kube-apiserver drops ``status`` on create."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, validate: Callable[[Any], Any]) -> None:
        return None


@dataclass(frozen=True)
class NotAccepted:
    """The object has this field but this server takes no value for it from a client: a request
    that sets it is refused as if the field were unknown."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, validate: Callable[[Any], Any]) -> None:
        if value is not None:
            raise PydanticKnownError("extra_forbidden")
        return None


@dataclass(frozen=True)
class SchemaRef:
    """Schema only: the field's schema is a reference to this component (e.g. ``metav1.Time``
    for a timestamp string)."""

    name: str

