"""Which roles of a set of manifests grant the rights that must stay with the server in its
namespace (docs/certificates.md, "Permissions"), and to whom they are bound."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SERVER = {"kind": "ServiceAccount", "name": "container-notifier"}
"""The server's identity (its namespace is the release's)."""
WORKLOADS = ("deployments", "replicasets", "statefulsets", "daemonsets")
SERVER_ONLY: dict[tuple[str, str], frozenset[str]] = {
    ("", "secrets"): frozenset({"get", "list", "watch", "create", "update", "patch", "delete",
                                "deletecollection"}),
    ("", "pods"): frozenset({"create"}),
    ("", "pods/exec"): frozenset({"create", "get"}),
    ("", "serviceaccounts/token"): frozenset({"create"}),
    **{("apps", workload): frozenset({"create", "update", "patch"}) for workload in WORKLOADS},
    ("batch", "jobs"): frozenset({"create", "update", "patch"}),
    ("batch", "cronjobs"): frozenset({"create", "update", "patch"}),
    ("apiregistration.k8s.io", "apiservices"): frozenset({"update", "patch"}),
}
"""(API group, resource) -> the verbs whoever holds could read or replace the serving CA, run
code that mounts it, act as the server, or change the record of the CAs it made."""
AGGREGATION = "rbac.authorization.k8s.io/aggregate-to-"


def _matches(granted: Iterable[str], wanted: str) -> bool:
    return "*" in granted or wanted in granted


def server_only_rights(rule: dict[str, Any]) -> list[str]:
    """The rights of SERVER_ONLY (and ``impersonate``) that `rule` grants, as
    ``verb group/resource``."""
    groups, resources, verbs = (rule.get(key, []) for key in ("apiGroups", "resources", "verbs"))
    found = [f"{verb} {group}/{resource}"
             for (group, resource), protected in SERVER_ONLY.items()
             if _matches(groups, group) and _matches(resources, resource)
             for verb in sorted(protected) if _matches(verbs, verb)]
    if _matches(verbs, "impersonate"):
        found.append(f"impersonate {','.join(groups)}/{','.join(resources)}")
    return found


def holders(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``Kind/name`` of each Role and ClusterRole granting rights of SERVER_ONLY -> those
    rights."""
    return {f"{o['kind']}/{o['metadata']['name']}": rights for o in objects
            if o["kind"] in ("Role", "ClusterRole")
            and (rights := [r for rule in o.get("rules", []) for r in server_only_rights(rule)])}


def granted_to_others(objects: list[dict[str, Any]]) -> list[str]:
    """Why a right of SERVER_ONLY reaches someone other than the server: a role granting one
    that aggregates into other roles, or is bound to another subject."""
    held = holders(objects)
    problems = []
    for role in objects:
        key = f"{role['kind']}/{role['metadata'].get('name')}"
        labels = role["metadata"].get("labels") or {}
        if key in held and any(label.startswith(AGGREGATION) for label in labels):
            problems.append(f"{key} aggregates {held[key]} into other roles")
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = binding["roleRef"]
        key = f"{role['kind']}/{role['name']}"
        others = [s for s in binding.get("subjects", [])
                  if {k: s.get(k) for k in SERVER} != SERVER]
        if key in held and others:
            problems.append(f"{binding['kind']}/{binding['metadata']['name']} grants "
                            f"{held[key]} to {others}")
    return problems
