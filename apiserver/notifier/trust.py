"""Who may define what runs: the trust rules for a pod's notifier declarations.

Pod annotations can be changed by anyone with `patch pods`, so a declaration is honoured only if

1. the pod's annotation is identical to the one in the pod template of its controlling owner
   (ReplicaSet, StatefulSet, DaemonSet or Job), that owner being the object the pod's
   controller reference names by kind, name *and UID*, and the pod's labels matching that
   owner's selector: whoever can change that template can already change the code the pod
   runs. (Without the UID, anyone with `patch pods` could point the reference at any owner's
   kind and name, copy its annotation, and be trusted until the garbage collector removed the
   pod; without the selector, at a real owner with its real UID, until the owner's controller
   released the pod. A pod whose labels match the selector is one the controller itself would
   adopt.) What rule 1 still trusts is in docs/security.md; or
2. the requesting user may `create pods/exec` on the pod (a SubjectAccessReview): they could run
   the command themselves anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Authorizer
from apiserver.errors import quoted
from apiserver.notifier.declarations import ANNOTATION, annotation_matches_template
from apiserver.notifier.podcache import OWNER_KINDS
from apiserver.registry.selectors import LabelSelector

OWNER_TEMPLATE = "OwnerTemplate"
POD_EXEC = "PodExec"


class Owners(Protocol):
    """Where owners are read (`podcache.OwnerTemplates`: from its informers)."""

    async def owner(self, group: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None:
        """The owner, or None if it does not exist; only kinds in OWNER_KINDS are asked."""
        ...


@dataclass(frozen=True)
class TrustDecision:
    trusted: bool
    rule: str
    """OwnerTemplate or PodExec when trusted."""
    message: str
    """When not trusted: which rule failed and how to fix it."""


class ControllerRef(NamedTuple):
    """The pod's controller reference: the owner it names."""

    group: str
    kind: str
    name: str
    uid: str


def controller_of(pod: dict[str, Any]) -> ControllerRef | None:
    """The pod's controlling owner reference, if it has one."""
    for ref in pod["metadata"].get("ownerReferences", []):
        if ref.get("controller"):
            group = ref.get("apiVersion", "").rpartition("/")[0]
            return ControllerRef(group, ref.get("kind", ""), ref.get("name", ""),
                                 ref.get("uid", ""))
    return None


def _rule_1(controller: ControllerRef, owner: dict[str, Any] | None, pod: dict[str, Any]
            ) -> str:
    """Why the owner does not vouch for the pod's annotation, or "" if it does."""
    where = f"{controller.kind}/{controller.name}"
    meta = pod["metadata"]
    if owner is not None:
        uid = owner["metadata"].get("uid", "")
        if not uid or uid != controller.uid:
            return (f"rule 1 failed: the pod's controller reference names {where} with UID "
                    f"{quoted(controller.uid)}, but {where} has UID {quoted(uid)}: the UID "
                    "differs, so that object is not the pod's controller")
        spec = owner.get("spec", {})
        if spec.get("selector") is None:
            return (f"rule 1 failed: the pod's controller {where} has no spec.selector, so it "
                    "adopts no pod and vouches for none")
        selector = LabelSelector.from_object(spec["selector"])
        labels = meta.get("labels") or {}
        if not selector.matches(labels):
            shown = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
            return (f"rule 1 failed: the pod's labels {quoted(shown)} do not match the "
                    f"selector {quoted(str(selector))} of its controller {where}: {where} "
                    "would not adopt this pod, so the pod's reference to it is not trusted")
        template = spec.get("template", {}).get("metadata", {})
        if annotation_matches_template(meta.get("annotations", {}).get(ANNOTATION),
                                       template.get("annotations", {}).get(ANNOTATION)):
            return ""
    return (f"rule 1 failed: the pod's {ANNOTATION} annotation is not identical to the one "
            f"in the pod template of its controller {where}")


async def decide(owners: Owners, authorizer: Authorizer, user: UserInfo, pod: dict[str, Any]
                 ) -> TrustDecision:
    """Whether the pod's notifier declarations may run for `user`.

    Errors reading the owner (KubeUnavailable, KubeRejected other than 404) propagate."""
    meta = pod["metadata"]
    controller = controller_of(pod)
    if controller and (controller.group, controller.kind) in OWNER_KINDS:
        owner = await owners.owner(controller.group, controller.kind, meta["namespace"],
                                   controller.name)
        rule1 = _rule_1(controller, owner, pod)
        if not rule1:
            return TrustDecision(True, OWNER_TEMPLATE, "")
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


class TrustRules:
    """The trust rules with what they read: the owners' pod templates and the authorizer."""

    def __init__(self, owners: Owners, authorizer: Authorizer) -> None:
        self._owners = owners
        self._authorizer = authorizer

    async def decide(self, user: UserInfo, pod: dict[str, Any]) -> TrustDecision:
        return await decide(self._owners, self._authorizer, user, pod)
