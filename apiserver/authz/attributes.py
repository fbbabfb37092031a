"""Authorization attributes of a request, derived as k8s.io/apiserver's RequestInfoFactory does.

``/apis/<group>/<version>/...`` and ``/api/<version>/...`` with at least one more segment are
resource requests; every other path (``/apis``, ``/openapi/v2``, ``/healthz``) is a non-resource
request whose verb is the lower-cased HTTP method.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from apiserver.errors import quoted

_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool


@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    path: str = ""
    """The URL path of a non-resource request."""
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @classmethod
    def for_resource(cls, verb: str, *, group: str, version: str, resource: str,
                     namespace: str = "", subresource: str = "", name: str = ""
                     ) -> RequestAttributes:
        """Attributes for checking an action the server takes for a user (e.g. pods/exec)."""
        return cls(verb=verb, resource_request=True, api_group=group, api_version=version,
                   namespace=namespace, resource=resource, subresource=subresource, name=name)


def request_attributes(method: str, path: str, query_string: str = "") -> RequestAttributes:
    """Attributes of an HTTP request; `path` is the decoded URL path."""
    non_resource = RequestAttributes(verb=method.lower(), path=path)
    parts = path.strip("/").split("/")
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]

    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 else ""

    verb = _VERBS.get(method.upper(), "")
    query = parse_qs(query_string, keep_blank_values=True)
    if not name and verb == "get":
        watch = query.get("watch", [""])[0]
        verb = "watch" if watch in _TRUE else "list"
        name = _name_from_field_selector(query.get("fieldSelector", [""])[0])
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestAttributes(verb=verb, path=path, resource_request=True, api_group=group,
                             api_version=version, namespace=namespace, resource=resource,
                             subresource=subresource, name=name)


def _name_from_field_selector(selector: str) -> str:
    """The name a list/watch is limited to by ``metadata.name=<name>``, else ""."""
    for term in selector.split(","):
        for operator in ("==", "="):
            field, sep, value = term.partition(operator)
            if sep and field.strip() == "metadata.name":
                value = value.strip()
                return value if value and "/" not in value and value not in (".", "..") else ""
    return ""


def denial_message(user_name: str, attributes: RequestAttributes, reason: str = "") -> str:
    """Why the authorizer refused, worded as kube-apiserver words it (``User "u" cannot create
    resource "pods/notify" in API group "g" in the namespace "ns"``), every value quoted as
    Go's %q does and HTML-escaped."""
    user = quoted(user_name)
    if not attributes.resource_request:
        message = f"User {user} cannot {attributes.verb} path {quoted(attributes.path)}"
    else:
        resource = attributes.resource
        if attributes.subresource:
            resource = f"{resource}/{attributes.subresource}"
        message = (f"User {user} cannot {attributes.verb} resource {quoted(resource)} "
                   f"in API group {quoted(attributes.api_group)}")
        if attributes.namespace:
            message += f" in the namespace {quoted(attributes.namespace)}"
        else:
            message += " at the cluster scope"
    message = message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"{message}: {reason}" if reason else message
