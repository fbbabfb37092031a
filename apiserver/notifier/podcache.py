"""What admitting a notify reads from kube-apiserver, cached by informers: the pods, and the pod
templates of their controlling owners (ReplicaSet, StatefulSet, DaemonSet, Job).

Each object is trimmed to the fields notify needs, to bound memory:

- a pod keeps ``metadata`` (namespace, name, uid, resourceVersion, creationTimestamp, labels,
  annotations, ownerReferences, deletionTimestamp), ``spec.hostNetwork``,
  ``spec.containers[]`` name and named ``ports`` (name, containerPort), and ``status`` (phase,
  podIP, ``containerStatuses[]`` name, containerID and state);
- an owner keeps ``metadata`` (namespace, name, uid, resourceVersion), its ``spec.selector``
  and, of its pod template, only the notifier annotation (``spec.template.metadata.annotations``).

Reads come from the cache; only an object the cache has not seen yet (created a moment ago,
or before the first list is in) costs one GET, so steady-state admission makes no request.
What the cache holds lags kube-apiserver by the watch's latency (milliseconds).

Start both with ``asyncio.create_task(cache.run())``; `has_synced()` (and ``await
wait_synced()``) tell when their first lists are in, for readiness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from apiserver.kube import KubeClient, KubeRejected, paths
from apiserver.kube.informer import NAMESPACE, Backoff, Informer, by_namespace
from apiserver.notifier.declarations import ANNOTATION

Object = dict[str, Any]

PODS = f"{paths.CORE}/pods"
POD_METADATA = ("namespace", "name", "uid", "resourceVersion", "creationTimestamp", "labels",
                "annotations", "ownerReferences", "deletionTimestamp")
OWNER_METADATA = ("namespace", "name", "uid", "resourceVersion")

OWNER_KINDS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("apps", "ReplicaSet"): ("/apis/apps/v1", "replicasets"),
    ("apps", "StatefulSet"): ("/apis/apps/v1", "statefulsets"),
    ("apps", "DaemonSet"): ("/apis/apps/v1", "daemonsets"),
    ("batch", "Job"): ("/apis/batch/v1", "jobs"),
}
"""(group, kind) of each owner whose pod template can vouch for a pod: (API path, resource)."""


def _pick(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: mapping[key] for key in keys if key in mapping}


def trim_pod(pod: Object) -> Object:
    status = pod.get("status") or {}
    trimmed_status: dict[str, Any] = _pick(status, ("phase", "podIP"))
    if "containerStatuses" in status:
        trimmed_status["containerStatuses"] = [
            _pick(container, ("name", "containerID", "state"))
            for container in status["containerStatuses"] or []]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": _pick(pod["metadata"], POD_METADATA),
        "spec": trim_pod_spec(pod.get("spec") or {}),
        "status": trimmed_status,
    }


def trim_pod_spec(spec: Object) -> Object:
    """Of a pod's spec: ``hostNetwork`` and each container's name and named ports (an http
    notifier's target)."""
    containers = []
    for container in spec.get("containers") or []:
        trimmed: Object = {"name": container["name"]}
        ports = [_pick(port, ("name", "containerPort")) for port in container.get("ports") or []
                 if port.get("name")]
        if ports:
            trimmed["ports"] = ports
        containers.append(trimmed)
    return {"containers": containers, **_pick(spec, ("hostNetwork",))}


def trim_owner(owner: Object) -> Object:
    template = (((owner.get("spec") or {}).get("template") or {}).get("metadata") or {})
    annotations = _pick(template.get("annotations") or {}, (ANNOTATION,))
    spec: dict[str, Any] = _pick(owner.get("spec") or {}, ("selector",))
    spec["template"] = {"metadata": {"annotations": annotations}}
    return {"metadata": _pick(owner["metadata"], OWNER_METADATA), "spec": spec}


async def _get_or_none(kube: KubeClient, path: str) -> Object | None:
    """The object at `path`, or None if kube-apiserver answers 404 (other errors raise)."""
    try:
        return await kube.get(path)
    except KubeRejected as error:
        if error.status_code == 404:
            return None
        raise


class PodCache:
    """All pods, trimmed (see the module's docstring), indexed by namespace: the replica's one
    informer of pods, which ``notifier.pods.PodDirectory`` reads too."""

    def __init__(self, kube: KubeClient, *, backoff: Backoff | None = None) -> None:
        self._kube = kube
        self.informer = Informer(kube, PODS, name="pods", transform=trim_pod,
                                 indexes={NAMESPACE: by_namespace}, backoff=backoff)
        self.gets = 0
        """GETs made for pods the cache had not seen."""

    async def run(self) -> None:
        await self.informer.run()

    def has_synced(self) -> bool:
        return self.informer.has_synced()

    async def wait_synced(self) -> None:
        await self.informer.synced.wait()

    async def pod(self, namespace: str, name: str) -> Object | None:
        """The pod (trimmed), or None if kube-apiserver says it does not exist.

        From the cache; a pod the cache has not seen is read with one GET. Raises
        KubeUnavailable or KubeRejected (other than 404) if that GET fails."""
        cached = self.informer.get(namespace, name)
        if cached is not None:
            return cached
        self.gets += 1
        pod = await _get_or_none(self._kube, paths.namespaced(paths.CORE, namespace, "pods", name))
        return trim_pod(pod) if pod is not None else None

    def in_namespace(self, namespace: str) -> list[Object]:
        """The cached pods of `namespace` (filter them with a label selector's `matches`)."""
        return self.informer.by_index(NAMESPACE, namespace)

    def all_pods(self) -> list[Object]:
        """Every cached pod."""
        return self.informer.list()


class OwnerTemplates:
    """The ReplicaSets, StatefulSets, DaemonSets and Jobs, trimmed to their selector and their
    pod template's notifier annotation: one informer per kind. `backoff` makes each
    informer's Backoff."""

    def __init__(self, kube: KubeClient, *,
                 backoff: Callable[[], Backoff] = Backoff) -> None:
        self._kube = kube
        self.informers = {
            kind: Informer(kube, f"{api}/{resource}", name=f"owners-{resource}",
                           transform=trim_owner, backoff=backoff())
            for kind, (api, resource) in OWNER_KINDS.items()}
        self.gets = 0
        """GETs made for owners the cache had not seen."""

    async def run(self) -> None:
        """Run every kind's informer until cancelled."""
        async with asyncio.TaskGroup() as group:
            for (_, kind), informer in self.informers.items():
                group.create_task(informer.run(), name=f"owners-{kind}")

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers.values())

    async def wait_synced(self) -> None:
        for informer in self.informers.values():
            await informer.synced.wait()

    async def owner(self, group: str, kind: str, namespace: str, name: str) -> Object | None:
        """The owner (trimmed), or None if kube-apiserver says it does not exist.

        From the cache; an owner the cache has not seen is read with one GET. Raises KeyError
        for a kind not in OWNER_KINDS, and KubeUnavailable or KubeRejected (other than 404)
        if that GET fails."""
        try:
            informer = self.informers[(group, kind)]
        except KeyError:
            raise KeyError(f"owner kind {kind!r} in group {group!r} is not cached (cached: "
                           f"{', '.join(k for _, k in OWNER_KINDS)})") from None
        cached = informer.get(namespace, name)
        if cached is not None:
            return cached
        self.gets += 1
        api, resource = OWNER_KINDS[(group, kind)]
        owner = await _get_or_none(self._kube, paths.namespaced(api, namespace, resource, name))
        return trim_owner(owner) if owner is not None else None
