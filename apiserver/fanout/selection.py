"""Which pods a new Notification notifies, resolved once before the object is stored
(docs/notifications.md, "Which pods"): those its selector matches now, except those already
terminating, with the notifiers they declare; and why such a scope would notify nothing
("No silent no-op"), worded as the field errors of the refused create."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver.api.field_errors import FieldError
from apiserver.api.types import ALL_PODS
from apiserver.kube import KubeClient, paths
from apiserver.notifier.declarations import ANNOTATION, declared_names, held_names

LIST_PAGE_SIZE = "500"
MAX_DECLARED_SHOWN = 20
"""How many declared notifier names a refusal lists."""


@dataclass(frozen=True)
class PodInScope:
    name: str
    uid: str
    declares: frozenset[str]
    """The notifier names its annotation declares, for any container (trust is not checked
    here: an untrusted pod fails its run, as a notify of it would)."""
    holds: frozenset[str] = frozenset()
    """Those it declares with ``hold`` (held notifiers: ending the hold unquiesces)."""


async def pods_in_scope(kube: KubeClient, namespace: str, selector: str) -> list[PodInScope]:
    """The pods the selector matches now, except those already terminating."""
    found: list[PodInScope] = []
    token = ""
    while True:
        params = {"labelSelector": selector, "limit": LIST_PAGE_SIZE}
        if token:
            params["continue"] = token
        page = await kube.get(paths.namespaced(paths.CORE, namespace, "pods"), params=params)
        for pod in page.get("items") or []:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            annotation = (meta.get("annotations") or {}).get(ANNOTATION)
            found.append(PodInScope(meta["name"], meta["uid"], declared_names(annotation),
                                    held_names(annotation)))
        token = page["metadata"].get("continue", "")
        if not token:
            return found


def scope_errors(spec: dict[str, Any], namespace: str, selector: str, pods: list[PodInScope]
                 ) -> list[FieldError]:
    """Why a Notification over `pods` (those `selector` matched) would do nothing
    (docs/notifications.md, "No silent no-op"): a PreExistingPods scope that is empty, or any
    scope in which no pod declares the notifier. An empty AllPods scope is allowed (it waits
    for pods, visibly)."""
    if not pods:
        if spec.get("policy") == ALL_PODS:
            return []
        return [FieldError.invalid(
            "spec.selector", selector,
            f'selects no pod in namespace "{namespace}" (terminating pods do not count); check '
            f"the pods' labels (kubectl get pods -n {namespace} -l '{selector}'), or use policy "
            f"{ALL_PODS} to notify pods as they start")]
    notifier = spec["notifier"]
    if any(notifier in pod.declares for pod in pods):
        return release_errors(spec, pods)
    declared = sorted(set().union(*(pod.declares for pod in pods)))
    shown = ", ".join(declared[:MAX_DECLARED_SHOWN]) + (
        f" and {len(declared) - MAX_DECLARED_SHOWN} more"
        if len(declared) > MAX_DECLARED_SHOWN else "")
    which = f"selected by {selector}" if selector else "in the namespace"
    return [FieldError.invalid(
        "spec.notifier", notifier,
        f"no pod {which} declares it; "
        + (f"they declare: {shown}" if declared else "they declare no notifier")
        + f" (in their {ANNOTATION} annotation)")]


def release_errors(spec: dict[str, Any], pods: list[PodInScope]) -> list[FieldError]:
    """A window without a release notifier can only end a held quiesce: refuse one over pods
    that declare the notifier without ``hold`` (nothing would unquiesce them)."""
    release = spec.get("release")
    if release is None or release.get("notifier"):
        return []
    notifier = spec["notifier"]
    ordinary = [pod.name for pod in pods
                if notifier in pod.declares and notifier not in pod.holds]
    if not ordinary:
        return []
    shown = ", ".join(ordinary[:MAX_DECLARED_SHOWN]) + (
        f" and {len(ordinary) - MAX_DECLARED_SHOWN} more"
        if len(ordinary) > MAX_DECLARED_SHOWN else "")
    return [FieldError.required(
        "spec.release.notifier",
        f'notifier "{notifier}" is not held (no hold in its declaration) in pods {shown}, so '
        "nothing would unquiesce them when the window ends; name the notifier that "
        "unquiesces, e.g. unquiesce")]
