"""The query parameters the server reads, and the rule that each single-valued one is given once.

Authorization (the access middleware) and the handlers read the same query. If a parameter
could be given twice, one reader could take the first value and the other the last: a user
allowed to list one record by ``fieldSelector=metadata.name=x`` could append a second, empty
``fieldSelector`` and list them all. So a single-valued parameter given more than once is
refused with 400 before anything reads it, as kube-apiserver's strict decoding of ListOptions
refuses repeated fields. ``dryRun`` is a list in Kubernetes and may repeat. Parameters the
server does not know are ignored, as kube-apiserver ignores them.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from apiserver.errors import BadRequest

SINGLE_VALUED = frozenset({
    "allowWatchBookmarks", "continue", "fieldManager", "fieldSelector", "fieldValidation",
    "gracePeriodSeconds", "includeObject", "labelSelector", "limit", "orphanDependents",
    "pretty", "propagationPolicy", "resourceVersion", "resourceVersionMatch",
    "sendInitialEvents", "timeoutSeconds", "waitSeconds", "watch",
})


def check_single_values(query_string: str) -> None:
    """Raise BadRequest if a single-valued parameter appears more than once."""
    seen: dict[str, int] = {}
    for name, _ in parse_qsl(query_string, keep_blank_values=True):
        if name in SINGLE_VALUED:
            seen[name] = seen.get(name, 0) + 1
    repeated = sorted(name for name, count in seen.items() if count > 1)
    if repeated:
        raise BadRequest(
            "query parameters may be given only once: "
            + ", ".join(f'"{name}" is given {seen[name]} times' for name in repeated)
            + "; give each once")
