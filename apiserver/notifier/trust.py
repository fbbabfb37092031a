"""Who may define what runs: the trust rules for a pod's notifier declarations.

Pod annotations can be changed by anyone with `patch pods`, so a declaration is honoured only if

1. the pod's annotation is identical to the one in the pod template of its controlling owner
   (ReplicaSet, StatefulSet, DaemonSet or Job): whoever can change that template can already
   change the code the pod runs; or
2. the requesting user may `create pods/exec` on the pod (a SubjectAccessReview): they could run
   the command themselves anyway.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Authorizer
from apiserver.definitions import ANNOTATION, annotation_matches_template
from apiserver.kube import KubeClient, KubeRejected

CONTROLLERS = {
    ("apps", "ReplicaSet"): "/apis/apps/v1/namespaces/{namespace}/replicasets/{name}",
    ("apps", "StatefulSet"): "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}",
    ("apps", "DaemonSet"): "/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
    ("batch", "Job"): "/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
}

OWNER_TEMPLATE = "OwnerTemplate"
POD_EXEC = "PodExec"

OwnerCache = MutableMapping[str, dict[str, Any] | None]
"""Owner objects by API path, shared by the pods of one fan-out so each owner is read once."""


@dataclass(frozen=True)
class TrustDecision:
    trusted: bool
    rule: str
    """OwnerTemplate or PodExec when trusted."""
    message: str
    """When not trusted: which rule failed and how to fix it."""


def controller_of(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """(group, kind, name) of the pod's controlling owner, if it has one."""
    for ref in pod["metadata"].get("ownerReferences", []):
        if ref.get("controller"):
            group = ref.get("apiVersion", "").rpartition("/")[0]
            return group, ref.get("kind", ""), ref.get("name", "")
    return None


async def _owner(kube: KubeClient, path: str, cache: OwnerCache | None) -> dict[str, Any] | None:
    if cache is not None and path in cache:
        return cache[path]
    try:
        owner: dict[str, Any] | None = await kube.get(path)
    except KubeRejected as error:
        if error.status_code != 404:
            raise
        owner = None
    if cache is not None:
        cache[path] = owner
    return owner


async def decide(kube: KubeClient, authorizer: Authorizer, user: UserInfo, pod: dict[str, Any],
                 owner_cache: OwnerCache | None = None) -> TrustDecision:
    """Whether the pod's notifier declarations may run for `user`."""
    meta = pod["metadata"]
    annotation = meta.get("annotations", {}).get(ANNOTATION)
    controller = controller_of(pod)
    if controller and (controller[0], controller[1]) in CONTROLLERS:
        group, kind, name = controller
        path = CONTROLLERS[(group, kind)].format(namespace=meta["namespace"], name=name)
        owner = await _owner(kube, path, owner_cache)
        template = (owner or {}).get("spec", {}).get("template", {}).get("metadata", {})
        if annotation_matches_template(annotation, template.get("annotations", {}).get(ANNOTATION)):
            return TrustDecision(True, OWNER_TEMPLATE, "")
        rule1 = (f"rule 1 failed: the pod's {ANNOTATION} annotation is not identical to the one "
                 f"in the pod template of its controller {kind}/{name}")
    else:
        rule1 = ("rule 1 failed: the pod has no controlling ReplicaSet, StatefulSet, DaemonSet "
                 "or Job whose pod template could vouch for its notifiers")
    decision = await authorizer.authorize(user, RequestAttributes.for_resource(
        "create", group="", version="v1", resource="pods", subresource="exec",
        namespace=meta["namespace"], name=meta["name"]))
    if decision.allowed:
        return TrustDecision(True, POD_EXEC, "")
    rule2 = (f'rule 2 failed: User "{user.name}" cannot create resource "pods/exec" in API '
             f'group "" in the namespace "{meta["namespace"]}"')
    return TrustDecision(False, "", (
        f"the pod's notifiers are not trusted: {rule1}; {rule2}. To fix: declare the notifiers "
        f"in the pod template of the workload (Deployment, StatefulSet, DaemonSet or Job) and "
        f"do not change the annotation on the pod, or have the caller granted create on "
        f"pods/exec for this pod"))
