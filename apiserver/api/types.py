"""The typed definitions of PodNotifier, Notification and NotifierPod, and the apimachinery
types they use.

Each object is one pydantic model (model.py describes the markers): its docstring and its
fields' descriptions are the OpenAPI schema (``SCHEMAS``, derived in schema.py, served by
openapi.py and read by ``kubectl explain``); its field types and markers are the strict decoding
and the validation of create requests (decoding.py); tables.py takes its columns' descriptions
and types from it.

Schema names follow kube-openapi: apimachinery types keep their ``io.k8s.apimachinery...``
names, ours are ``io.x-k8s.notifier.v1alpha1.<Kind>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from apiserver.api.field_errors import CauseReason
from apiserver.api.json_input import as_printable
from apiserver.api.model import (
    APIModel,
    Bounds,
    Check,
    Invalid,
    NotAccepted,
    OneOf,
    Problem,
    Required,
    SchemaRef,
    ServerSet,
    invalid,
)
from apiserver.api.schema import Schema, component_schemas
from apiserver.api.validation import (
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)
from apiserver.config import flag_default

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OURS = "io.x-k8s.notifier.v1alpha1"


class Phase(StrEnum):
    """The phase of a run (a PodNotifier, one of its containers, or a Notification)."""

    PENDING = "Pending"
    RUNNING = "Running"
    HELD = "Held"
    """A held notifier's command reported ready and keeps running until it is released."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


PHASES = tuple(Phase)
FINISHED_PHASES = (Phase.SUCCEEDED, Phase.FAILED)
PhaseName = Annotated[str, OneOf(PHASES)]
NOTIFICATION_PHASES = tuple(phase for phase in Phase if phase is not Phase.HELD)
"""A Notification is never Held (a held pod's run counts as succeeded: docs/notifications.md)."""
NotificationPhaseName = Annotated[str, OneOf(NOTIFICATION_PHASES)]

CONDITION_COMPLETE, CONDITION_FAILED = "Complete", "Failed"
"""The condition types of a finished run (PodNotifier, Notification), as a Job has them:
``kubectl wait --for=condition=Complete`` (or ``=Failed``)."""
CONDITION_TYPES = (CONDITION_COMPLETE, CONDITION_FAILED)
CONDITION_PODS_SKIPPED, CONDITION_WAITING_FOR_PODS = "PodsSkipped", "WaitingForPods"
"""A Notification's conditions while it runs (docs/notifications.md): PodsSkipped True once a
pod in scope was skipped for not declaring the notifier; WaitingForPods True while an AllPods
Notification created with no pod in scope has none, False once pods joined."""
CONDITION_QUIESCED = "Quiesced"
"""A Notification with spec.release: True (reason AllPodsQuiesced) while its quiesce window is
open, False (reason Released, or ReleasedAfterMaxHold) once its release started."""
CONDITION_WAITING_FOR_NOTIFICATION = "WaitingForNotification"
"""concurrencyPolicy Wait: True (reason OtherNotificationQuiescing) while pods wait for other
Notifications that quiesce them with the same notifier, its message naming the pods and those
Notifications; False (reason NoPodWaiting) once none waits."""
NOTIFICATION_CONDITION_TYPES = (*CONDITION_TYPES, CONDITION_PODS_SKIPPED,
                                CONDITION_WAITING_FOR_PODS, CONDITION_QUIESCED,
                                CONDITION_WAITING_FOR_NOTIFICATION)
PODNOTIFIER_REASONS = ("Completed", "NonZeroExitCode", "Timeout", "ContainerNotRunning",
                       "PodNotRunning", "PodDeleted", "ExecFailed", "Interrupted",
                       "InternalError", "Released", "HoldExpired", "HoldEnded", "NotReady",
                       "StopFailed", "NonSuccessStatusCode", "ConnectionRefused",
                       "RequestFailed")
"""Every reason a PodNotifier (or one of its containers) ends with; notifier/ sets them."""

PRE_EXISTING_PODS, ALL_PODS = "PreExistingPods", "AllPods"
POLICIES = (PRE_EXISTING_PODS, ALL_PODS)
ABORT, CONTINUE = "Abort", "Continue"
FAILURE_POLICIES = (ABORT, CONTINUE)
FORBID, WAIT = "Forbid", "Wait"
CONCURRENCY_POLICIES = (FORBID, WAIT)
ConcurrencyPolicy = Annotated[str, OneOf(CONCURRENCY_POLICIES)]
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

MAX_TTL_SECONDS = 30 * 24 * 3600
DEFAULT_PARALLELISM = 1
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
MAX_GENERATE_NAME_LENGTH = 248
"""generateName prefixes leave room for the 5 characters the server appends (253 in all)."""
RESERVED_LABEL_PREFIX = "notifier.x-k8s.io/"

INT64: dict[str, Any] = {"format": "int64"}
WHOLE_NUMBER = "must be a whole number"
MAP_OF_STRINGS = "must be a map of strings"
A_STRING = "must be a string"
TIME = f"{META}.Time"
TIME_SCHEMA: Schema = {"type": "string", "format": "date-time",
                       "description": "Time is a timestamp in RFC 3339 form, in UTC."}


def _server_default(option: str) -> str:
    """``the server's --flag (N unless its operator set another)``, for descriptions."""
    flag, default = flag_default(option)
    return f"the server's {flag} ({default} unless its operator set another)"


def _listed(words: tuple[str, ...]) -> str:
    """``a, b or c``, for descriptions."""
    return f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else "".join(words)


def _list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


# Checks


def qualified_name_problems(value: str) -> Iterator[Problem]:
    """A ``Check`` rule: the value is a qualified name (a notifier name, a label key)."""
    return (invalid(problem) for problem in qualified_name_errors(value))


def _object_name(value: str) -> Iterator[Problem]:
    """Problems of a name; "" is no name (generateName or the server picks one)."""
    return (invalid(problem) for problem in dns1123_subdomain_errors(value) if value)


def _name_prefix(value: str) -> Iterator[Problem]:
    if len(value) > MAX_GENERATE_NAME_LENGTH:
        yield invalid(f"must be no more than {MAX_GENERATE_NAME_LENGTH} characters (the server "
                      "appends 5)")
    elif value:
        yield from (invalid(problem) for problem in dns1123_subdomain_errors(value.rstrip("-")))


def _label_map(value: Any, *, reserved: bool = False) -> Iterator[Problem]:
    """Each key a qualified name, each value a label value (checked before the type, so that
    each bad entry is reported at its own path)."""
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        problems = qualified_name_errors(key)
        problems += label_value_errors(item) if isinstance(item, str) else [A_STRING]
        if reserved and key.startswith(RESERVED_LABEL_PREFIX):
            problems.append(f"the {RESERVED_LABEL_PREFIX} label prefix is reserved for the "
                            "server")
        yield from (invalid(problem, at=f"[{as_printable(key)}]", value=item)
                    for problem in problems)


def _object_labels(value: Any) -> Iterator[Problem]:
    return _label_map(value, reserved=True)


def _container_names(value: list[str]) -> Iterator[Problem]:
    if not all(value):
        yield invalid(CONTAINER_NAMES)


def _unique(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(dict.fromkeys(value))


CONTAINER_NAMES = "must be a list of container names (or left out for all)"
ContainerNames = Annotated[list[str] | None, AfterValidator(_unique), Check(_container_names),
                           Invalid(CONTAINER_NAMES)]
"""Container names, duplicates dropped; unset means every container that declares the
notifier."""


# apimachinery


class OwnerReference(APIModel):
    """Identifies an owning object."""

    schema_name = f"{META}.OwnerReference"
    schema_extra = {"x-kubernetes-map-type": "atomic"}

    api_version: Annotated[str, Field(description="API version of the owner.")]
    kind: Annotated[str, Field(description="Kind of the owner.")]
    name: Annotated[str, Field(description="Name of the owner.")]
    uid: Annotated[str, Field(description="UID of the owner.")]
    controller: Annotated[bool | None, Field(
        description="True if the owner is the managing controller.")] = None
    block_owner_deletion: Annotated[bool | None, Field(
        description="If true, the owner cannot be deleted from storage until this reference is "
                    "removed.")] = None


class FieldsV1(APIModel):
    """A set of fields, in JSON."""

    schema_name = f"{META}.FieldsV1"


class ManagedFieldsEntry(APIModel):
    """Which fields a workflow manages."""

    schema_name = f"{META}.ManagedFieldsEntry"

    manager: Annotated[str | None, Field(description="Identifier of the workflow.")] = None
    operation: Annotated[str | None, Field(description="Apply or Update.")] = None
    api_version: Annotated[str | None, Field(description="Version of the fields' schema.")] = None
    time: Annotated[str | None, Field(description="When the fields were last changed."),
                    SchemaRef(TIME)] = None
    fields_type: Annotated[str | None, Field(description="Format of fieldsV1; only FieldsV1.")
                           ] = None
    fields_v1: Annotated[FieldsV1 | None, Field(alias="fieldsV1",
                                                description="The fields managed.")] = None
    subresource: Annotated[str | None, Field(
        description="Subresource the object was updated through.")] = None


class ObjectMeta(APIModel):
    """ObjectMeta is metadata that all persisted resources must have.

    A create request may set name or generateName, namespace (that of the URL), labels
    (except the server's notifier.x-k8s.io/ ones) and annotations; the server sets the rest.
    """

    schema_name = f"{META}.ObjectMeta"

    name: Annotated[str | None, Field(description=(
        "Name must be unique within a namespace. Is required when creating resources, although "
        "some resources may allow a client to request the generation of an appropriate name "
        "automatically. Name is primarily intended for creation idempotence and configuration "
        "definition. Cannot be updated. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")),
        Check(_object_name), Invalid(A_STRING)] = None
    generate_name: Annotated[str | None, Field(
        description="Prefix the server uses to generate a unique name when name is not given."),
        Check(_name_prefix), Invalid(A_STRING)] = None
    namespace: Annotated[str | None, Field(description="Namespace of the object."),
                         Invalid(A_STRING)] = None
    labels: Annotated[dict[str, str] | None, Field(
        description="Map of string keys and values for organizing and selecting objects."),
        Check(_object_labels, before=True), Invalid(MAP_OF_STRINGS)] = None
    annotations: Annotated[dict[str, str] | None, Field(
        description="Unstructured key value map stored with the object."),
        Invalid(MAP_OF_STRINGS)] = None
    uid: Annotated[str | None, Field(description="Unique in time and space; set by the server."),
                   NotAccepted()] = None
    resource_version: Annotated[str | None, Field(
        description="Opaque version of the object, for optimistic concurrency and watches; set "
                    "by the server."), NotAccepted()] = None
    generation: Annotated[int | None, Field(
        description="A sequence number of the desired state.", json_schema_extra=INT64),
        NotAccepted()] = None
    creation_timestamp: Annotated[str | None, Field(description=(
        "CreationTimestamp is a timestamp representing the server time when this object was "
        "created. It is not guaranteed to be set in happens-before order across separate "
        "operations. Clients may not set this value. It is represented in RFC3339 form and is "
        "in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
        "#metadata")), SchemaRef(TIME), NotAccepted()] = None
    deletion_timestamp: Annotated[str | None, Field(
        description="When the object will be deleted; set by the server."), SchemaRef(TIME),
        NotAccepted()] = None
    deletion_grace_period_seconds: Annotated[int | None, Field(
        description="Seconds allowed for graceful deletion.", json_schema_extra=INT64),
        NotAccepted()] = None
    owner_references: Annotated[list[OwnerReference] | None, Field(
        description="Objects this one depends on.", json_schema_extra=_list_map("uid")),
        NotAccepted()] = None
    finalizers: Annotated[list[str] | None, Field(
        description="Must be empty before the object is deleted from storage."),
        NotAccepted()] = None
    managed_fields: Annotated[list[ManagedFieldsEntry] | None, Field(
        description="Which manager set which fields (server-side apply)."), NotAccepted()] = None
    self_link: Annotated[str | None, Field(description="Deprecated and unset."),
                         NotAccepted()] = None


class ListMeta(APIModel):
    """ListMeta describes a list of objects."""

    schema_name = f"{META}.ListMeta"

    resource_version: Annotated[str | None, Field(
        description="Version of the list, for watching from it.")] = None
    continue_: Annotated[str | None, Field(
        alias="continue", description="Token to fetch the next page of a limited list.")] = None
    remaining_item_count: Annotated[int | None, Field(
        description="Items left after this page, if known.", json_schema_extra=INT64)] = None
    self_link: Annotated[str | None, Field(description="Deprecated and unset.")] = None


LABEL_SELECTOR_VALUES = ("must be a non-empty list of label values for In and NotIn, and empty "
                         "for Exists and DoesNotExist")


def _requirement_values(requirement: LabelSelectorRequirement) -> Iterator[Problem]:
    values = requirement.values or []
    if (requirement.operator in ("In", "NotIn")) != bool(values) or not all(
            value and not label_value_errors(value) for value in values):
        yield invalid(LABEL_SELECTOR_VALUES, at=".values", value=requirement.values)


class LabelSelectorRequirement(APIModel):
    """A requirement on one label."""

    schema_name = f"{META}.LabelSelectorRequirement"

    key: Annotated[str, Field(description="The label key."), Check(qualified_name_problems),
                   Invalid(A_STRING)]
    operator: Annotated[str, Field(description="In, NotIn, Exists or DoesNotExist."),
                        OneOf(SELECTOR_OPERATORS)]
    values: Annotated[list[str] | None, Field(
        description="Values for In and NotIn; empty for Exists and DoesNotExist."),
        Invalid(LABEL_SELECTOR_VALUES)] = None


class LabelSelector(APIModel):
    """A label query over objects; requirements are ANDed. An empty selector matches all."""

    schema_name = f"{META}.LabelSelector"
    schema_extra = {"x-kubernetes-map-type": "atomic"}

    match_labels: Annotated[dict[str, str] | None, Field(
        description="Labels that must have these values."), Check(_label_map, before=True),
        Invalid(MAP_OF_STRINGS)] = None
    match_expressions: Annotated[list[Annotated[
        LabelSelectorRequirement, Check(_requirement_values),
        Invalid("must be {key, operator, values}")]] | None, Field(
        description="Requirements on labels."), Invalid("must be a list")] = None


class Condition(APIModel):
    """One aspect of the current state."""

    schema_name = f"{META}.Condition"

    type: Annotated[str, Field(description=(
        f"Type of condition, in CamelCase: {_listed(CONDITION_TYPES)} (a finished run); a "
        f"Notification may also have {_listed(NOTIFICATION_CONDITION_TYPES[2:])}."))]
    status: Annotated[str, Field(description="True, False or Unknown.")]
    observed_generation: Annotated[int | None, Field(
        description="Generation the condition was set for.", json_schema_extra=INT64)] = None
    last_transition_time: Annotated[str, Field(
        description="When the condition last changed status."), SchemaRef(TIME)]
    reason: Annotated[str, Field(description="Machine-readable reason for the last transition.")]
    message: Annotated[str, Field(description="Human-readable details.")]


class StatusCause(APIModel):
    """One cause of a failure."""

    schema_name = f"{META}.StatusCause"

    reason: Annotated[str | None, Field(description="Machine-readable cause.")] = None
    message: Annotated[str | None, Field(description="Human-readable cause.")] = None
    field: Annotated[str | None, Field(
        description="Field path of the cause, e.g. spec.notifier.")] = None


class StatusDetails(APIModel):
    """Details of a Status."""

    schema_name = f"{META}.StatusDetails"

    name: Annotated[str | None, Field(description="Name of the object concerned.")] = None
    group: Annotated[str | None, Field(description="API group of the object concerned.")] = None
    kind: Annotated[str | None, Field(
        description="Kind (or resource) of the object concerned.")] = None
    uid: Annotated[str | None, Field(description="UID of the object concerned.")] = None
    causes: Annotated[list[StatusCause] | None, Field(
        description="Causes of the failure.")] = None
    retry_after_seconds: Annotated[int | None, Field(
        description="Seconds to wait before retrying.")] = None


class Status(APIModel):
    """Status is the result of an operation that returns no object."""

    schema_name = f"{META}.Status"

    api_version: Annotated[str | None, Field(
        description="APIVersion of this representation.")] = None
    kind: Annotated[str | None, Field(description="Kind of this representation.")] = None
    metadata: Annotated[ListMeta | None, Field(description="Standard list metadata.")] = None
    status: Annotated[str | None, Field(description="Success or Failure.")] = None
    message: Annotated[str | None, Field(
        description="Human-readable description of the status.")] = None
    reason: Annotated[str | None, Field(
        description="Machine-readable reason for a Failure.")] = None
    details: Annotated[StatusDetails | None, Field(
        description="Extended data about the failure.")] = None
    code: Annotated[int | None, Field(description="HTTP status code.")] = None


class RawExtension(APIModel):
    """The object of the event, or a Status for ERROR."""

    schema_name = "io.k8s.apimachinery.pkg.runtime.RawExtension"


class WatchEvent(APIModel):
    """An event in a watch stream."""

    schema_name = f"{META}.WatchEvent"

    type: Annotated[str, Field(description="ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.")]
    object: Annotated[RawExtension, Field(
        description="The object of the event, or a Status for ERROR.")]


# notifier.x-k8s.io/v1alpha1


class RequestedBy(APIModel):
    """RequestedBy identifies who requested the run. Set by the server from the authenticated
    caller; a value sent by a client is ignored."""

    schema_name = f"{OURS}.RequestedBy"

    username: Annotated[str | None, Field(description="User name.")] = None
    uid: Annotated[str | None, Field(description="User UID.")] = None
    groups: Annotated[list[str] | None, Field(description="User's groups.")] = None
    extra: Annotated[dict[str, list[str]] | None, Field(
        description="Further attributes of the user, as the authenticator gave them.")] = None


API_VERSION_DESCRIPTION = ("APIVersion defines the versioned schema of this representation of "
                           "an object.")
KIND_DESCRIPTION = ("Kind is a string value representing the REST resource this object "
                    "represents.")
SPEC_DESCRIPTION = "What the client asks for."
STATUS_DESCRIPTION = "What the server observed. Read-only."


class TopLevel(APIModel):
    """The fields every top-level object has (its kind's docstring describes it)."""

    api_version: Annotated[str | None, Field(description=API_VERSION_DESCRIPTION)] = None
    kind: Annotated[str | None, Field(description=KIND_DESCRIPTION)] = None
    metadata: Annotated[ObjectMeta, Field(default_factory=ObjectMeta,
                                          description="Standard object's metadata.")]


class PodNotifierSpec(APIModel):
    """PodNotifierSpec says which notifier runs where."""

    schema_name = f"{OURS}.PodNotifierSpec"

    pod_name: Annotated[str | None, Field(
        description="Name of the pod to notify. It must equal the pod named in the request "
                    "path; the server sets it when omitted."), Invalid(A_STRING)] = None
    pod_uid: Annotated[str | None, Field(
        alias="podUID", description="UID of the pod when the request was accepted. Set by the "
                                    "server."), ServerSet()] = None
    notifier: Annotated[str | None, Field(
        description="Name of the notifier to run, as the pod declares it in its "
                    "notifier.x-k8s.io/notifiers annotation."),
        Check(qualified_name_problems), Invalid(A_STRING),
        Required("name the notifier to run, as the pod declares it")] = None
    containers: Annotated[ContainerNames, Field(
        description="Containers to notify. Default: every container of the pod that declares "
                    "the notifier.")] = None
    timeout_seconds: Annotated[int | None, Field(
        description="Overrides the notifier's timeoutSeconds; bounded by the server's maximum."),
        Bounds(1, "max_timeout_seconds"), Invalid(WHOLE_NUMBER)] = None
    ttl_seconds_after_finished: Annotated[int | None, Field(
        description="Seconds to keep this record after it finishes. Default: "
                    f"{_server_default('default_ttl_seconds_after_finished')}; at most "
                    f"{MAX_TTL_SECONDS} (30 days)."),
        Bounds(0, MAX_TTL_SECONDS), Invalid(WHOLE_NUMBER)] = None
    requested_by: Annotated[RequestedBy | None, Field(
        description="Who requested the run. Set by the server from the authenticated caller; a "
                    "client-supplied value is ignored."), ServerSet()] = None


class ContainerNotifierStatus(APIModel):
    """The notifier's run in one container."""

    schema_name = f"{OURS}.ContainerNotifierStatus"

    name: Annotated[str, Field(description="Container name.")]
    container_id: Annotated[str | None, Field(
        alias="containerID", description="ID of the container the notifier ran in.")] = None
    phase: Annotated[PhaseName | None, Field(
        description="Pending, Running, Held (a held notifier's command is ready and keeps "
                    "running), Succeeded or Failed.")] = None
    start_time: Annotated[str | None, Field(description="When the run started."),
                          SchemaRef(TIME)] = None
    held_time: Annotated[str | None, Field(
        description="A held notifier: when the record became Held."), SchemaRef(TIME)] = None
    pid: Annotated[int | None, Field(
        description="A held notifier: the PID of the command in the container (in its PID "
                    "namespace), by which any server replica can stop it.")] = None
    completion_time: Annotated[str | None, Field(description="When the run finished."),
                               SchemaRef(TIME)] = None
    exit_code: Annotated[int | None, Field(
        description="Exit code of the command, when it exited.")] = None
    reason: Annotated[str | None, Field(
        description="Machine-readable reason for the phase: Completed (exit code 0), "
                    "NonZeroExitCode (exitCode says which), Timeout (no exit within "
                    "timeoutSeconds), ContainerNotRunning, PodNotRunning, PodDeleted, "
                    "ExecFailed (the command could not be run), Interrupted (the server "
                    "stopped) or InternalError; for a held notifier also Released, HoldExpired, "
                    "HoldEnded, NotReady or StopFailed (as the record's); for an http notifier "
                    "Completed (a 2xx answer), NonSuccessStatusCode (statusCode says which), "
                    "ConnectionRefused, Timeout or RequestFailed (no pod IP, TLS, a reset "
                    "connection, a malformed answer; message says which).")] = None
    message: Annotated[str | None, Field(
        description="Human-readable details, from the runtime or the server.")] = None
    stopped: Annotated[str | None, Field(
        description="Set when the command outlived timeoutSeconds: Terminated (it exited after "
                    "SIGTERM), Killed (still running after the grace period, so SIGKILL), "
                    "Exited (it had exited before it was signalled) or NotStopped (it could "
                    "not be signalled, e.g. the container has no /bin/sh: it may still run; "
                    "message says why).")] = None
    stdout: Annotated[str | None, Field(
        description="The last bytes of standard output (at most a few KiB).")] = None
    stdout_truncated: Annotated[bool | None, Field(
        description="True if earlier standard output was dropped.")] = None
    stderr: Annotated[str | None, Field(
        description="The last bytes of standard error (at most a few KiB).")] = None
    stderr_truncated: Annotated[bool | None, Field(
        description="True if earlier standard error was dropped.")] = None
    status_code: Annotated[int | None, Field(
        description="An http notifier: the status code of the pod's answer, when it "
                    "answered.")] = None
    response_body: Annotated[str | None, Field(
        description="An http notifier: the first bytes of the answer's body (at most a few "
                    "KiB), when it answered.")] = None
    response_body_truncated: Annotated[bool | None, Field(
        description="True if the rest of the answer's body was not read.")] = None


class PodNotifierStatus(APIModel):
    """PodNotifierStatus is the observed state of the run."""

    schema_name = f"{OURS}.PodNotifierStatus"

    phase: Annotated[PhaseName | None, Field(
        description="Pending, Running, Held (a held notifier: every container's command is "
                    "ready and keeps running until released), Succeeded or Failed. Succeeded "
                    "if and only if every selected container that declares the notifier "
                    "succeeded.")] = None
    start_time: Annotated[str | None, Field(description="When the run started."),
                          SchemaRef(TIME)] = None
    replica: Annotated[str | None, Field(
        description="The server replica that runs the notifier (its pod's name): if that "
                    "replica stops, another one ends the run Interrupted once its Lease has "
                    "expired.")] = None
    max_hold_seconds: Annotated[int | None, Field(
        description="Set on the records of held notifiers: the longest the run stays Held "
                    "before it fails HoldExpired.")] = None
    held_time: Annotated[str | None, Field(
        description="When every container's command was ready and the record became Held."),
        SchemaRef(TIME)] = None
    release_requested_time: Annotated[str | None, Field(
        description="When a release was first requested (POST .../release)."),
        SchemaRef(TIME)] = None
    release_requested_by: Annotated[str | None, Field(
        description="The user name of who first requested the release.")] = None
    released_time: Annotated[str | None, Field(
        description="When the held commands were stopped on that request."),
        SchemaRef(TIME)] = None
    released_by: Annotated[str | None, Field(
        description="The user name of who released the hold.")] = None
    completion_time: Annotated[str | None, Field(description="When the run finished."),
                               SchemaRef(TIME)] = None
    reason: Annotated[str | None, Field(
        description="Machine-readable reason for the phase: Completed when it succeeded "
                    "(Released for a held notifier); otherwise the reason of the first failed "
                    f"container, or why the run ended. One of {_listed(PODNOTIFIER_REASONS)}."
    )] = None
    message: Annotated[str | None, Field(
        description="Human-readable details, e.g. 1/2 containers failed (db: exit code 7).")
    ] = None
    containers: Annotated[list[ContainerNotifierStatus] | None, Field(
        description="Per-container results.", json_schema_extra=_list_map("name"))] = None
    conditions: Annotated[list[Condition] | None, Field(
        description="Set when the run finishes, as a Job's: type Complete (it succeeded) or "
                    "Failed, status True, reason and message those of the status, "
                    "lastTransitionTime its completionTime. Wait for one with kubectl wait "
                    "--for=condition=Complete podnotifier/NAME.",
        json_schema_extra=_list_map("type"))] = None


class PodNotifier(TopLevel):
    """PodNotifier records one run of a named notifier on one pod. It is created through the
    pods/{name}/notify subresource and holds that run's status."""

    schema_name = f"{OURS}.PodNotifier"
    KIND = "PodNotifier"

    spec: Annotated[PodNotifierSpec, Field(description=SPEC_DESCRIPTION)]
    status: Annotated[PodNotifierStatus | None, Field(description=STATUS_DESCRIPTION),
                      ServerSet()] = None


NOTIFIER_NAME_REQUIRED = "name the notifier the pods declare"


class NotificationRollback(APIModel):
    """What to run on every pod whose notifier succeeded, when the Notification ends Failed or
    is deleted before it finishes."""

    schema_name = f"{OURS}.NotificationRollback"

    notifier: Annotated[str | None, Field(
        description="Name of the rollback notifier, e.g. unquiesce."),
        Check(qualified_name_problems), Invalid(A_STRING), Required(NOTIFIER_NAME_REQUIRED)] = None


class NotificationRelease(APIModel):
    """The quiesce window: every pod stays quiesced until the release, which unquiesces each
    pod that was quiesced exactly once (docs/notifications.md, "Quiesce windows")."""

    schema_name = f"{OURS}.NotificationRelease"

    notifier: Annotated[str | None, Field(
        description="Name of the notifier that unquiesces a pod, e.g. unquiesce. Optional "
                    "for a held quiesce notifier (ending its hold unquiesces)."),
        Check(qualified_name_problems), Invalid(A_STRING)] = None
    after_seconds: Annotated[int | None, Field(
        description="Release this long after every pod is quiesced; at most maxHoldSeconds. "
                    "Default: only on the release action (or maxHoldSeconds).",
        json_schema_extra=INT64),
        Bounds(0, "max_hold_seconds"), Invalid(WHOLE_NUMBER)] = None
    max_hold_seconds: Annotated[int | None, Field(
        description="The longest window: release this long after the Notification started "
                    "even if nobody released it (its orchestrator presumed dead). Default and "
                    "bound: the server's --max-hold-seconds.", json_schema_extra=INT64),
        Bounds(1, "max_hold_seconds"), Invalid(WHOLE_NUMBER)] = None


def _release_rules(value: NotificationRelease) -> Iterator[Problem]:
    if (value.after_seconds is not None and value.max_hold_seconds is not None
            and value.after_seconds > value.max_hold_seconds):
        yield invalid(f"must be at most maxHoldSeconds ({value.max_hold_seconds}): the window "
                      "never outlasts it; lower afterSeconds or raise maxHoldSeconds",
                      at=".afterSeconds", value=value.after_seconds)


def _spec_rules(value: NotificationSpec) -> Iterator[Problem]:
    """Rules across fields of a NotificationSpec."""
    if value.release is None:
        return
    if value.rollback is not None:
        yield invalid("may not be set with spec.rollback: the release notifier already runs "
                      "on every quiesced pod when the Notification fails; drop rollback (or "
                      "move its notifier to release.notifier)", at=".release",
                      value=value.release.model_dump(by_alias=True, exclude_none=True))
    if value.policy != PRE_EXISTING_PODS:
        yield invalid(f"needs policy {PRE_EXISTING_PODS}: a quiesce window opens when every "
                      "pod of a fixed set is quiesced; drop release or the policy",
                      at=".release",
                      value=value.release.model_dump(by_alias=True, exclude_none=True))


class NotificationSpec(APIModel):
    """NotificationSpec says which pods get which notifier."""

    schema_name = f"{OURS}.NotificationSpec"

    selector: Annotated[LabelSelector | None, Field(
        description="Selects the pods to notify, in the Notification's namespace."),
        Invalid("must be a label selector object"),
        Required('a label selector of the pods to notify, e.g. {"matchLabels": {"app": '
                 '"db"}}', empty=False)] = None
    notifier: Annotated[str | None, Field(
        description="Name of the notifier to run on each selected pod."),
        Check(qualified_name_problems), Invalid(A_STRING), Required(NOTIFIER_NAME_REQUIRED)] = None
    policy: Annotated[str, Field(
        description="PreExistingPods (default): the pods matching at creation, fixed then. "
                    "AllPods: also pods that match later, each at most once, until deletion or "
                    "the deadline."), OneOf(POLICIES)] = PRE_EXISTING_PODS
    failure_policy: Annotated[str, Field(
        description="Abort (default): start no new pods after the first failure. Continue: "
                    "notify every pod."), OneOf(FAILURE_POLICIES)] = ABORT
    parallelism: Annotated[int, Field(
        description=f"How many pods run the notifier at once. Default {DEFAULT_PARALLELISM}; "
                    f"at most {_server_default('max_notification_parallelism')}."),
        Bounds(1, "max_parallelism"), Invalid(WHOLE_NUMBER)] = DEFAULT_PARALLELISM
    containers: Annotated[ContainerNames, Field(
        description="Containers to notify in each pod. Default: every container that declares "
                    "the notifier.")] = None
    rollback: Annotated[NotificationRollback | None, Field(
        description="Optional notifier that undoes the notifier on pods where it succeeded."),
        Invalid('must be {"notifier": NAME}')] = None
    release: Annotated[NotificationRelease | None, Field(
        description="Opens a quiesce window once every pod is quiesced, and ends it by the "
                    "release action (the release subresource), afterSeconds, maxHoldSeconds, "
                    "the deadline, deletion or a failure: then every quiesced pod is "
                    "unquiesced exactly once. Not with rollback."),
        Check(_release_rules),
        Invalid('must be {"notifier": NAME, "afterSeconds": N, "maxHoldSeconds": N}')] = None
    concurrency_policy: Annotated[ConcurrencyPolicy | None, Field(
        description="When another Notification is quiescing one of its pods with the same "
                    "notifier (from that pod's start until its release, or the end of its run "
                    "without release): Forbid (default) fails the pod with reason "
                    "QuiesceConflict; Wait holds it (and its parallelism slot) until the "
                    "other released it, within the deadline.")] = None
    timeout_seconds: Annotated[int | None, Field(
        description="Per-pod timeout; bounded by the server's maximum."),
        Bounds(1, "max_timeout_seconds"), Invalid(WHOLE_NUMBER)] = None
    active_deadline_seconds: Annotated[int | None, Field(
        description="Deadline for the whole Notification.", json_schema_extra=INT64),
        Bounds(1, MAX_DEADLINE_SECONDS), Invalid(WHOLE_NUMBER)] = None
    requested_by: Annotated[RequestedBy | None, Field(
        description="Who created the Notification. Set by the server from the authenticated "
                    "caller; a client-supplied value is ignored."), ServerSet()] = None


class NotificationCounts(APIModel):
    """Pods by state of their run."""

    schema_name = f"{OURS}.NotificationCounts"

    total: Annotated[int | None, Field(description="Pods selected.")] = None
    pending: Annotated[int | None, Field(description="Pods not started yet.")] = None
    running: Annotated[int | None, Field(description="Pods whose notifier is running.")] = None
    succeeded: Annotated[int | None, Field(
        description="Pods whose notifier succeeded.")] = None
    failed: Annotated[int | None, Field(
        description="Pods whose notifier failed (including deleted pods).")] = None
    skipped: Annotated[int | None, Field(
        description="Pods that do not declare the notifier (see the PodsSkipped "
                    "condition).")] = None
    rolled_back: Annotated[int | None, Field(
        description="Pods whose rollback notifier succeeded.")] = None
    released: Annotated[int | None, Field(
        description="With spec.release: quiesced pods released successfully.")] = None
    may_have_run_twice: Annotated[int | None, Field(
        description="Pods whose rollback or release ran again after an interrupted attempt: "
                    "the interrupted attempt's command may have run to its end too, so it may "
                    "have run twice (undo steps run at least once). Omitted when 0.")] = None


class NotificationWindow(APIModel):
    """The quiesce window of a Notification with spec.release: a snapshot taken between
    quiescedTime and releaseTime was taken while every pod was quiesced."""

    schema_name = f"{OURS}.NotificationWindow"

    quiesced_time: Annotated[str | None, Field(
        description="When the last pod became quiesced; set only if every pod did."),
        SchemaRef(TIME)] = None
    release_requested_time: Annotated[str | None, Field(
        description="When the release action was first requested."), SchemaRef(TIME)] = None
    release_time: Annotated[str | None, Field(
        description="When the release started (no pod was unquiesced before)."),
        SchemaRef(TIME)] = None
    unquiesced_time: Annotated[str | None, Field(
        description="When the last quiesced pod was released."), SchemaRef(TIME)] = None
    release_reason: Annotated[str | None, Field(
        description="Why the window ended: ReleaseRequested, AfterSeconds, "
                    "ReleasedAfterMaxHold, DeadlineExceeded, Deleted, HoldEnded, or the "
                    "failure that ended the run (FailFast, PodsFailed, ...).")] = None


class NotificationStatus(APIModel):
    """NotificationStatus summarizes the per-pod runs."""

    schema_name = f"{OURS}.NotificationStatus"

    phase: Annotated[NotificationPhaseName | None, Field(
        description=f"{_listed(NOTIFICATION_PHASES)}.")] = None
    counts: Annotated[NotificationCounts | None, Field(
        description="Pods by state of their run.")] = None
    window: Annotated[NotificationWindow | None, Field(
        description="With spec.release: the quiesce window's times.")] = None
    start_time: Annotated[str | None, Field(description="When the run started."),
                          SchemaRef(TIME)] = None
    completion_time: Annotated[str | None, Field(description="When the run finished."),
                               SchemaRef(TIME)] = None
    conditions: Annotated[list[Condition] | None, Field(
        description="Set when the Notification finishes: type Complete (reason PodsSucceeded) "
                    "or Failed (reason PodsFailed, FailFast, DeadlineExceeded, Deleted, "
                    "NotifierNotDeclared, ScopeNotRecorded, InternalError, or with "
                    "spec.release ReleaseFailed, HoldEnded or ReleasedAfterMaxHold), status "
                    "True, "
                    "listed first. Wait for one with kubectl wait --for=condition=Complete "
                    "notification/NAME. While it runs: PodsSkipped, True (reason "
                    "NotifierNotDeclared) once pods were skipped for not declaring the "
                    "notifier, its message counting and naming them; WaitingForPods, True "
                    "(reason NoPodsSelected) while an AllPods Notification created with no pod "
                    "in scope has none, False (reason PodsJoined) once pods joined; with "
                    "spec.release, Quiesced, True (reason AllPodsQuiesced) while the window "
                    "is open, False (reason Released or ReleasedAfterMaxHold) once the "
                    "release started; with concurrencyPolicy Wait, WaitingForNotification, "
                    "True (reason OtherNotificationQuiescing) while pods wait for other "
                    "Notifications quiescing them, its message naming the pods and those "
                    "Notifications, False (reason NoPodWaiting) once none waits.",
        json_schema_extra=_list_map("type"))] = None


def _name_or_generate_name(meta: ObjectMeta) -> Iterator[Problem]:
    if not meta.name and not meta.generate_name:
        yield Problem(CauseReason.REQUIRED, "name or generateName is required", at=".name")


class Notification(TopLevel):
    """Notification runs a notifier on every pod that matches a label selector. Each pod's run
    is a PodNotifier labelled with the Notification's name."""

    schema_name = f"{OURS}.Notification"
    KIND = "Notification"

    metadata: Annotated[ObjectMeta, Field(default_factory=ObjectMeta,
                                          description="Standard object's metadata."),
                        Check(_name_or_generate_name)]
    spec: Annotated[NotificationSpec, Field(description=SPEC_DESCRIPTION), Check(_spec_rules)]
    status: Annotated[NotificationStatus | None, Field(description=STATUS_DESCRIPTION),
                      ServerSet()] = None


ACCESS_FORBIDDEN, ACCESS_UNTRUSTED, ACCESS_INVALID_DECLARATION, ACCESS_NOT_REVIEWED = (
    "Forbidden", "Untrusted", "InvalidDeclaration", "NotReviewed")
"""Why a NotifierPod's access is refused (``access.reason``)."""


class NotifierPodContainer(APIModel):
    """The notifiers one container of the pod declares."""

    schema_name = f"{OURS}.NotifierPodContainer"

    name: Annotated[str, Field(description="Container name.")]
    notifiers: Annotated[list[dict[str, Any]] | None, Field(
        description="The container's entries of the pod's notifier.x-k8s.io/notifiers "
                    "annotation, as declared there: name, action (exec.command, signal or "
                    "http), "
                    "timeoutSeconds and, for a held notifier, hold.",
        json_schema_extra={"items": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}})] = None


class NotifierPodAccess(APIModel):
    """Whether the caller may run the pod's notifiers: create pods/notify (group
    notifier.x-k8s.io) on the pod, and a trust rule vouching for its declarations. Capacity and
    the pod's bounds, checked when a run starts, are not part of it."""

    schema_name = f"{OURS}.NotifierPodAccess"

    allowed: Annotated[bool, Field(
        description="True if the caller may run every notifier the pod declares.")]
    rule: Annotated[str | None, Field(
        description="When allowed, the trust rule that vouches for the declarations: "
                    "OwnerTemplate (the pod template of the pod's controller declares the same) "
                    "or PodExec (the caller may create pods/exec on the pod).")] = None
    reason: Annotated[str | None, Field(
        description=f"When not allowed: {ACCESS_FORBIDDEN} (no create pods/notify on the pod), "
                    f"{ACCESS_UNTRUSTED} (no trust rule vouches for the declarations), "
                    f"{ACCESS_INVALID_DECLARATION} (the annotation does not validate) or "
                    f"{ACCESS_NOT_REVIEWED} (this request asked its most access reviews; get "
                    "the pod by name)."), OneOf((ACCESS_FORBIDDEN, ACCESS_UNTRUSTED,
                                                 ACCESS_INVALID_DECLARATION,
                                                 ACCESS_NOT_REVIEWED))] = None
    message: Annotated[str | None, Field(
        description="When not allowed: why, and what to change.")] = None


class NotifierPod(TopLevel):
    """NotifierPod is what a pod declares in its notifier.x-k8s.io/notifiers annotation, and
    whether the caller may run it: a read-only view of a core pod (same namespace, name, uid,
    labels and creationTimestamp; resourceVersion is the pod's). Reading it needs get (or list)
    on the core pods as well. Run a notifier with the pods/notify subresource."""

    schema_name = f"{OURS}.NotifierPod"
    KIND = "NotifierPod"

    containers: Annotated[list[NotifierPodContainer] | None, Field(
        description="The containers that declare notifiers, in the pod's order.",
        json_schema_extra=_list_map("name"))] = None
    access: Annotated[NotifierPodAccess | None, Field(
        description="Whether the caller may run the declared notifiers; unset when the pod "
                    "declares none.")] = None


KINDS: tuple[type[TopLevel], ...] = (PodNotifier, Notification)
PATCH_SCHEMA: Schema = {"type": "object", "description": (
    "Patch is the body of a PATCH request: a JSON patch, a JSON merge patch, a strategic merge "
    "patch (applied as a merge patch, as for custom resources) or an apply patch, as its "
    "Content-Type says.")}
SCHEMAS: dict[str, Schema] = component_schemas(
    (*KINDS, NotifierPod, Status, WatchEvent),
    extra={TIME: TIME_SCHEMA, f"{META}.Patch": PATCH_SCHEMA},
    list_meta=ListMeta.schema_name)
"""Every component the OpenAPI documents hold, in OpenAPI 3 form."""
