"""OpenAPI schemas of PodNotifier and Notification, and the apimachinery types they use.

Schemas are written in OpenAPI 3 form (``#/components/schemas/...`` references); openapi.py
derives the Swagger 2.0 form. Names follow kube-openapi: apimachinery types keep their
``io.k8s.apimachinery...`` names, ours are ``io.x-k8s.notifier.v1alpha1.<Kind>``.
"""

from __future__ import annotations

from typing import Any

from apiserver.api.resources import GROUP, VERSION

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OURS = "io.x-k8s.notifier.v1alpha1"
PHASES = ["Pending", "Running", "Succeeded", "Failed"]


def ref(name: str, description: str = "") -> Schema:
    """A reference; with a description, wrapped in allOf as kube-openapi does (a $ref's
    siblings are ignored in OpenAPI 3.0)."""
    target = {"$ref": f"#/components/schemas/{name}"}
    return {"description": description, "allOf": [target]} if description else target


def _string(description: str, **more: Any) -> Schema:
    return {"type": "string", "description": description, **more}


def _integer(description: str, fmt: str = "int32", **more: Any) -> Schema:
    return {"type": "integer", "format": fmt, "description": description, **more}


def _strings(description: str) -> Schema:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _string_map(description: str) -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"},
            "description": description}


def _object(description: str, properties: dict[str, Schema], required: list[str] | None = None,
            **more: Any) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = required
    return {**schema, **more}


def _array_of(name: str, description: str, **more: Any) -> Schema:
    return {"type": "array", "items": ref(name), "description": description, **more}


def _gvk(kind: str) -> Schema:
    return {"x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": kind}]}


def _top_level(kind: str, description: str, spec: str, status: str, required: list[str]
               ) -> Schema:
    return _object(description, {
        "apiVersion": _string("APIVersion defines the versioned schema of this representation "
                              "of an object."),
        "kind": _string("Kind is a string value representing the REST resource this object "
                        "represents."),
        "metadata": ref(f"{META}.ObjectMeta", "Standard object's metadata."),
        "spec": ref(spec, "What the client asks for."),
        "status": ref(status, "What the server observed. Read-only."),
    }, required, **_gvk(kind))


def _list(kind: str, item: str) -> Schema:
    return _object(f"{kind} is a list of {item.rsplit('.', 1)[1]} objects.", {
        "apiVersion": _string("APIVersion defines the versioned schema of this representation "
                              "of an object."),
        "kind": _string("Kind is a string value representing the REST resource this object "
                        "represents."),
        "metadata": ref(f"{META}.ListMeta", "Standard list metadata."),
        "items": _array_of(item, "The objects."),
    }, ["items"], **_gvk(kind))




def _time(description: str) -> Schema:
    return ref(f"{META}.Time", description)


NOTIFIER_SCHEMAS: dict[str, Schema] = {
    f"{OURS}.PodNotifier": _top_level(
        "PodNotifier",
        "PodNotifier records one run of a named notifier on one pod. It is created through the "
        "pods/{name}/notify subresource and holds that run's status.",
        f"{OURS}.PodNotifierSpec", f"{OURS}.PodNotifierStatus", ["spec"],
    ),
    f"{OURS}.PodNotifierList": _list("PodNotifierList", f"{OURS}.PodNotifier"),
    f"{OURS}.PodNotifierSpec": _object("PodNotifierSpec says which notifier runs where.", {
        "podName": _string("Name of the pod to notify. It must equal the pod named in the "
                           "request path; the server sets it when omitted."),
        "podUID": _string("UID of the pod when the request was accepted. Set by the server."),
        "notifier": _string("Name of the notifier to run, as the pod declares it in its "
                            "notifier.x-k8s.io/notifiers annotation."),
        "containers": _strings("Containers to notify. Default: every container of the pod that "
                               "declares the notifier."),
        "timeoutSeconds": _integer("Overrides the notifier's timeoutSeconds; bounded by the "
                                   "server's maximum.", minimum=1),
        "ttlSecondsAfterFinished": _integer("Seconds to keep this record after it finishes. "
                                            "Default: set by the server.", minimum=0),
        "requestedBy": ref(f"{OURS}.RequestedBy", "Who requested the run. Set by the server "
                           "from the authenticated caller; a client-supplied value is ignored."),
    }, ["notifier"]),
    f"{OURS}.RequestedBy": _object(
        "RequestedBy identifies who requested the run. Set by the server from the "
        "authenticated caller; a value sent by a client is ignored.",
        {"username": _string("User name."), "uid": _string("User UID."),
         "groups": _strings("User's groups.")},
    ),
    f"{OURS}.PodNotifierStatus": _object("PodNotifierStatus is the observed state of the run.", {
        "phase": _string("Pending, Running, Succeeded or Failed. Succeeded if and only if every "
                         "selected container that declares the notifier succeeded.",
                         enum=PHASES),
        "startTime": _time("When the run started."),
        "completionTime": _time("When the run finished."),
        "reason": _string("Machine-readable reason for the phase: Completed, NonZeroExitCode, "
                          "Timeout, ContainerNotRunning, PodNotRunning, PodDeleted, ExecFailed "
                          "or Interrupted."),
        "message": _string("Human-readable details."),
        "containers": _array_of(f"{OURS}.ContainerNotifierStatus", "Per-container results.",
                                **{"x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["name"]}),
    }),
    f"{OURS}.ContainerNotifierStatus": _object("The notifier's run in one container.", {
        "name": _string("Container name."),
        "containerID": _string("ID of the container the notifier ran in."),
        "phase": _string("Pending, Running, Succeeded or Failed.", enum=PHASES),
        "startTime": _time("When the run started."),
        "completionTime": _time("When the run finished."),
        "exitCode": _integer("Exit code of the command, when it exited."),
        "reason": _string("Machine-readable reason for the phase."),
        "message": _string("Human-readable details."),
        "stdout": _string("The last bytes of standard output (at most a few KiB)."),
        "stdoutTruncated": {"type": "boolean",
                            "description": "True if earlier standard output was dropped."},
        "stderr": _string("The last bytes of standard error (at most a few KiB)."),
        "stderrTruncated": {"type": "boolean",
                            "description": "True if earlier standard error was dropped."},
    }, ["name"]),
    f"{OURS}.Notification": _top_level(
        "Notification",
        "Notification runs a notifier on every pod that matches a label selector. Each pod's "
        "run is a PodNotifier labelled with the Notification's name.",
        f"{OURS}.NotificationSpec", f"{OURS}.NotificationStatus", ["spec"],
    ),
    f"{OURS}.NotificationList": _list("NotificationList", f"{OURS}.Notification"),
    f"{OURS}.NotificationSpec": _object("NotificationSpec says which pods get which notifier.", {
        "selector": ref(f"{META}.LabelSelector", "Selects the pods to notify, in the "
                        "Notification's namespace."),
        "notifier": _string("Name of the notifier to run on each selected pod."),
        "containers": _strings("Containers to notify in each pod. Default: every container "
                               "that declares the notifier."),
        "policy": _string("PreExistingPods (default): the pods matching at creation, fixed "
                          "then. AllPods: also pods that match later, each at most once, until "
                          "deletion or the deadline.", enum=["PreExistingPods", "AllPods"]),
        "parallelism": _integer("How many pods run the notifier at once; bounded by the "
                                "server.", minimum=1),
        "failurePolicy": _string("Abort (default): start no new pods after the first failure. "
                                 "Continue: notify every pod.", enum=["Abort", "Continue"]),
        "rollback": ref(f"{OURS}.NotificationRollback", "Optional notifier that undoes the "
                        "notifier on pods where it succeeded."),
        "timeoutSeconds": _integer("Per-pod timeout; bounded by the server's maximum.",
                                   minimum=1),
        "activeDeadlineSeconds": _integer("Deadline for the whole Notification.", "int64",
                                          minimum=1),
    }, ["selector", "notifier"]),
    f"{OURS}.NotificationRollback": _object(
        "What to run on every pod whose notifier succeeded, when the Notification ends "
        "Failed or is deleted before it finishes.",
        {"notifier": _string("Name of the rollback notifier, e.g. unquiesce.")},
        ["notifier"],
    ),
    f"{OURS}.NotificationStatus": _object("NotificationStatus summarizes the per-pod runs.", {
        "phase": _string("Pending, Running, Succeeded or Failed.", enum=PHASES),
        "counts": ref(f"{OURS}.NotificationCounts", "Pods by state of their run."),
        "startTime": _time("When the run started."),
        "completionTime": _time("When the run finished."),
        "conditions": _array_of(f"{META}.Condition", "Latest observations.",
                                **{"x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["type"]}),
    }),
    f"{OURS}.NotificationCounts": _object("Pods by state of their run.", {
        name: _integer(description) for name, description in (
            ("total", "Pods selected."),
            ("pending", "Pods not started yet."),
            ("running", "Pods whose notifier is running."),
            ("succeeded", "Pods whose notifier succeeded."),
            ("failed", "Pods whose notifier failed (including deleted pods)."),
            ("skipped", "Pods that do not declare the notifier."),
            ("rolledBack", "Pods the rollback notifier ran on."),
        )
    }),
}

META_SCHEMAS: dict[str, Schema] = {
    f"{META}.Time": {"type": "string", "format": "date-time",
                     "description": "Time is a timestamp in RFC 3339 form, in UTC."},
    f"{META}.ObjectMeta": _object(
        "ObjectMeta is metadata that all persisted resources must have.", {
            "name": _string("Name, unique within a namespace."),
            "generateName": _string("Prefix the server uses to generate a unique name when "
                                    "name is not given."),
            "namespace": _string("Namespace of the object."),
            "uid": _string("Unique in time and space; set by the server."),
            "resourceVersion": _string("Opaque version of the object, for optimistic "
                                       "concurrency and watches; set by the server."),
            "generation": _integer("A sequence number of the desired state.", "int64"),
            "creationTimestamp": _time("When the object was created; set by the server."),
            "deletionTimestamp": _time("When the object will be deleted; set by the "
                                       "server."),
            "deletionGracePeriodSeconds": _integer("Seconds allowed for graceful deletion.",
                                                   "int64"),
            "labels": _string_map("Map of string keys and values for organizing and selecting "
                                  "objects."),
            "annotations": _string_map("Unstructured key value map stored with the object."),
            "ownerReferences": _array_of(f"{META}.OwnerReference", "Objects this one depends "
                                         "on.", **{"x-kubernetes-list-type": "map",
                                                   "x-kubernetes-list-map-keys": ["uid"]}),
            "finalizers": _strings("Must be empty before the object is deleted from storage."),
            "managedFields": _array_of(f"{META}.ManagedFieldsEntry", "Which manager set "
                                       "which fields (server-side apply)."),
            "selfLink": _string("Deprecated and unset."),
        }),
    f"{META}.ListMeta": _object("ListMeta describes a list of objects.", {
        "resourceVersion": _string("Version of the list, for watching from it."),
        "continue": _string("Token to fetch the next page of a limited list."),
        "remainingItemCount": _integer("Items left after this page, if known.", "int64"),
        "selfLink": _string("Deprecated and unset."),
    }),
    f"{META}.OwnerReference": _object("Identifies an owning object.", {
        "apiVersion": _string("API version of the owner."),
        "kind": _string("Kind of the owner."),
        "name": _string("Name of the owner."),
        "uid": _string("UID of the owner."),
        "controller": {"type": "boolean", "description": "True if the owner is the managing "
                       "controller."},
        "blockOwnerDeletion": {"type": "boolean", "description": "If true, the owner cannot be "
                               "deleted from storage until this reference is removed."},
    }, ["apiVersion", "kind", "name", "uid"], **{"x-kubernetes-map-type": "atomic"}),
    f"{META}.ManagedFieldsEntry": _object("Which fields a workflow manages.", {
        "manager": _string("Identifier of the workflow."),
        "operation": _string("Apply or Update."),
        "apiVersion": _string("Version of the fields' schema."),
        "time": _time("When the fields were last changed."),
        "fieldsType": _string("Format of fieldsV1; only FieldsV1."),
        "fieldsV1": ref(f"{META}.FieldsV1", "The fields managed."),
        "subresource": _string("Subresource the object was updated through."),
    }),
    f"{META}.FieldsV1": {"type": "object", "description": "A set of fields, in JSON."},
    f"{META}.LabelSelector": _object(
        "A label query over objects; requirements are ANDed. An empty selector matches all.", {
            "matchLabels": _string_map("Labels that must have these values."),
            "matchExpressions": _array_of(f"{META}.LabelSelectorRequirement",
                                          "Requirements on labels."),
        }, **{"x-kubernetes-map-type": "atomic"}),
    f"{META}.LabelSelectorRequirement": _object("A requirement on one label.", {
        "key": _string("The label key."),
        "operator": _string("In, NotIn, Exists or DoesNotExist."),
        "values": _strings("Values for In and NotIn; empty for Exists and DoesNotExist."),
    }, ["key", "operator"]),
    f"{META}.Condition": _object("One aspect of the current state.", {
        "type": _string("Type of condition, in CamelCase."),
        "status": _string("True, False or Unknown."),
        "observedGeneration": _integer("Generation the condition was set for.", "int64"),
        "lastTransitionTime": _time("When the condition last changed status."),
        "reason": _string("Machine-readable reason for the last transition."),
        "message": _string("Human-readable details."),
    }, ["type", "status", "lastTransitionTime", "reason", "message"]),
    f"{META}.Status": _object("Status is the result of an operation that returns no object.", {
        "apiVersion": _string("APIVersion of this representation."),
        "kind": _string("Kind of this representation."),
        "metadata": ref(f"{META}.ListMeta", "Standard list metadata."),
        "status": _string("Success or Failure."),
        "message": _string("Human-readable description of the status."),
        "reason": _string("Machine-readable reason for a Failure."),
        "details": ref(f"{META}.StatusDetails", "Extended data about the failure."),
        "code": _integer("HTTP status code."),
    }),
    f"{META}.StatusDetails": _object("Details of a Status.", {
        "name": _string("Name of the object concerned."),
        "group": _string("API group of the object concerned."),
        "kind": _string("Kind (or resource) of the object concerned."),
        "uid": _string("UID of the object concerned."),
        "causes": _array_of(f"{META}.StatusCause", "Causes of the failure."),
        "retryAfterSeconds": _integer("Seconds to wait before retrying."),
    }),
    f"{META}.StatusCause": _object("One cause of a failure.", {
        "reason": _string("Machine-readable cause."),
        "message": _string("Human-readable cause."),
        "field": _string("Field path of the cause, e.g. spec.notifier."),
    }),
    f"{META}.WatchEvent": _object("An event in a watch stream.", {
        "type": _string("ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."),
        "object": ref("io.k8s.apimachinery.pkg.runtime.RawExtension",
                      "The object of the event, or a Status for ERROR."),
    }, ["type", "object"]),
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {
        "type": "object", "description": "The object of the event, or a Status for ERROR."},
}

SCHEMAS: dict[str, Schema] = {**NOTIFIER_SCHEMAS, **META_SCHEMAS}
