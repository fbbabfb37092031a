"""URL paths of kube-apiserver objects, built from names without letting a name change the URL.

A name put raw into a path can make the server act on another URL than the one it authorized:
``ss-1?x`` ends the path at ``ss-1`` (the rest becomes a query), ``#`` starts a fragment, ``/``
adds segments, and ``.``/``..`` are dot segments that every URL library removes (``pods/..``
is the namespace itself). So every name or namespace goes through `segment`: it is escaped
with ``urllib.parse.quote(value, safe="")`` and the three values that escaping cannot make
safe (empty, ``.``, ``..``) are refused. `check` is the client's last guard: the path it is
given must already be such a path.

Names are validated (DNS-1123) before the server gets here (the access middleware refuses the
rest with 404); reaching `UnsafeSegment` means a caller skipped that.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from apiserver.errors import BadRequest, quoted

CORE = "/api/v1"
"""The core group's API path (pods, configmaps); others are ``/apis/<group>/<version>``."""

_DOT_SEGMENTS = frozenset({"", ".", ".."})
_NOT_IN_A_PATH = ("?", "#")


class UnsafeSegment(BadRequest):
    """A value cannot be one segment of a kube-apiserver URL path (empty, ``.`` or ``..``), or
    a path given to the client would not reach the URL it names."""


def segment(value: str) -> str:
    """`value` escaped as exactly one path segment; raises UnsafeSegment for "", "." and ".."."""
    if value in _DOT_SEGMENTS:
        raise UnsafeSegment(
            f"{quoted(value)} cannot be a name in a kube-apiserver URL: an empty name, '.' and "
            "'..' are not object names (they would address another object); give a valid "
            "DNS-1123 name")
    return quote(value, safe="")


def namespaced(api: str, namespace: str, resource: str, name: str = "",
               subresource: str = "") -> str:
    """``<api>/namespaces/<namespace>/<resource>[/<name>[/<subresource>]]``, the namespace
    and name escaped by `segment`; `api` (e.g. CORE, ``/apis/apps/v1``), `resource` and
    `subresource` are the server's own constants."""
    path = f"{api}/namespaces/{segment(namespace)}/{resource}"
    if name:
        path += f"/{segment(name)}"
        if subresource:
            path += f"/{subresource}"
    return path


def check(path: str) -> None:
    """Raise UnsafeSegment unless `path` is an absolute path whose segments are all non-empty
    and not dot segments and that has no query or fragment (give those as parameters)."""
    problem = ""
    if not path.startswith("/"):
        problem = "does not start with '/'"
    elif any(char in path for char in _NOT_IN_A_PATH):
        problem = "holds '?' or '#' (escape names with paths.segment; give queries as params)"
    elif any(unquote(part) in _DOT_SEGMENTS for part in path[1:].split("/")):
        problem = "has an empty, '.' or '..' segment (escaped or not)"
    if problem:
        raise UnsafeSegment(f"the kube-apiserver path {quoted(path)} {problem}: the server "
                            "acts only on the URL it validated")
