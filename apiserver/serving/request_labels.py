"""How a request is named in the request metrics (``apiserver_request_*``) and the request log.

Every label value comes from a fixed set, never from the request as sent, so that no request (a
404 on a random path, an invented method) can create a series:

- a resource request of notifier.x-k8s.io/v1alpha1 on a resource the server serves is labelled
  with that resource and subresource (``podnotifiers``/``release``, ``pods``/``notify``) and its
  request verb (get, list, watch, create, patch, delete, deletecollection, ...);
- a request for one of the non-resource paths the server serves (discovery, OpenAPI, health,
  /metrics) has resource "" and the path as subresource, as k8s.io/apiserver labels its health
  and discovery handlers;
- anything else has resource "" and subresource ``other``.

Polls (the aggregator's discovery, probes, scrapes) are `POLLED_PATHS`: logged at debug.
"""

from __future__ import annotations

from dataclasses import dataclass

from apiserver.api.openapi import V3_GROUP_VERSION_PATH
from apiserver.api.resources import API_PATH, GROUP, RESOURCES, VERSION
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import ALWAYS_ALLOWED_PATHS
from apiserver.serving.metrics import METRICS_PATH

DISCOVERY_PATHS = frozenset({"/apis", f"/apis/{GROUP}", API_PATH, "/openapi/v2", "/openapi/v3",
                             f"/openapi/v3/{V3_GROUP_VERSION_PATH}"})
POLLED_PATHS = DISCOVERY_PATHS | ALWAYS_ALLOWED_PATHS | {METRICS_PATH}
"""The non-resource paths the server serves; requests for them are logged at debug."""

OTHER = "other"
"""The label value of whatever is outside its fixed set (an unserved path, an unknown verb)."""

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete",
                   "deletecollection", "head", "post", "put", "options"})
"""Request verbs (resource requests) and lower-cased HTTP methods (non-resource requests)."""

_SERVED = frozenset(tuple(resource.name.partition("/")[::2]) for resource in RESOURCES)
"""(resource, subresource) of every resource served, "" for no subresource."""


@dataclass(frozen=True)
class RequestLabels:
    verb: str
    resource: str
    subresource: str


def request_labels(attributes: RequestAttributes) -> RequestLabels:
    """The request's metric labels, each from a fixed set (see the module docstring)."""
    verb = attributes.verb if attributes.verb in VERBS else OTHER
    if attributes.resource_request:
        served = (attributes.api_group, attributes.api_version) == (GROUP, VERSION) and (
            attributes.resource, attributes.subresource) in _SERVED
        if served:
            return RequestLabels(verb, attributes.resource, attributes.subresource)
        return RequestLabels(verb, "", OTHER)
    return RequestLabels(verb, "", attributes.path if attributes.path in POLLED_PATHS else OTHER)
