"""The names in a request's path, checked before anything uses them.

A resource request names its namespace and object in the path, and the server authorizes those
names and then acts on them (reads the pod, lists a namespace's pods, stores a record). A name
that no Kubernetes object can have must stop here, before the authorizer or kube-apiserver sees
it: ``ss-1?x`` would be authorized as that name and, put into a kube-apiserver URL, read
``ss-1``; ``..`` would read the namespace itself. So, as kube-apiserver's validation requires:

- a namespace must be a DNS-1123 label;
- a pod, a PodNotifier record or a Notification name must be a DNS-1123 subdomain (which rules
  out ``.``, ``..`` and every ``/``, ``%``, ``?``, ``#``, space or control character);
- no segment of a resource path may be empty, ``.`` or ``..``, or hold an encoded ``/``
  (``%2F``), so the segments the router reads are the segments authorized.

Anything else is answered 404 NotFound, as kube-apiserver answers a GET of a name that cannot
exist (``pods "ss-1?x" not found``); the value is quoted with Go's escaping, so the message
holds no raw control character. See docs/api.md, "Names in the path".
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from apiserver.api.validation import dns1123_label_errors, dns1123_subdomain_errors
from apiserver.authz.attributes import RequestAttributes
from apiserver.errors import NotFound, qualified, quoted

_CORE_RESOURCES = frozenset({"pods", "namespaces"})
"""Resources named in this API's paths that are kube-apiserver's own (core group)."""
_NAME_RULES: dict[str, Callable[[str], list[str]]] = {"namespaces": dns1123_label_errors}
"""How each resource's names are checked; any other resource's (pods, podnotifiers,
notifications) must be a DNS-1123 subdomain."""
_NOT_SEGMENTS = frozenset({"", ".", ".."})
_NAME_FROM_SELECTOR = frozenset({"list", "watch"})
"""Verbs whose attributes' name is the ``metadata.name`` of the field selector, not a path
segment: a name no object has there lists nothing, as in kube-apiserver."""


def check_path_names(attributes: RequestAttributes, raw_path: bytes | None = None) -> None:
    """Raise NotFound if the request's namespace or name cannot be a Kubernetes name, or a
    segment of its path (`raw_path`, still percent-encoded, as the ASGI scope has it) is
    empty, a dot segment or holds an encoded '/'. Non-resource requests are not checked."""
    if not attributes.resource_request:
        return
    if attributes.namespace and dns1123_label_errors(attributes.namespace):
        raise _not_found("namespaces", "", attributes.namespace)
    if attributes.name and attributes.verb not in _NAME_FROM_SELECTOR:
        rule = _NAME_RULES.get(attributes.resource, dns1123_subdomain_errors)
        if rule(attributes.name):
            group = "" if attributes.resource in _CORE_RESOURCES else attributes.api_group
            raise _not_found(attributes.resource, group, attributes.name)
    if raw_path is not None:
        _check_segments(raw_path)


def _check_segments(raw_path: bytes) -> None:
    for raw in raw_path.decode("latin-1").strip("/").split("/"):
        segment = unquote(raw)
        if segment in _NOT_SEGMENTS or "/" in segment:
            raise NotFound(f"the server could not find the requested resource: the path "
                           f"segment {quoted(segment)} cannot name anything (an empty, '.' or "
                           "'..' segment, or an encoded '/')")


def _not_found(resource: str, group: str, name: str) -> NotFound:
    return NotFound(f"{qualified(resource, group)} {quoted(name)} not found",
                    group=group, resource=resource, name=quoted(name)[1:-1])
