"""The resources served in notifier.x-k8s.io/v1alpha1 (see docs: the API contract)."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "notifier.x-k8s.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
API_PATH = f"/apis/{GROUP_VERSION}"


@dataclass(frozen=True)
class Resource:
    name: str
    """Plural name; ``parent/subresource`` for a subresource."""
    kind: str
    verbs: tuple[str, ...]
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    namespaced: bool = True


NOTIFIER_PODS = Resource("pods", "NotifierPod", ("get", "list"), singular="pod")
"""Read-only: each pod's declared notifiers and whether the caller may run them (like
metrics.k8s.io's pods). Serving ``pods`` lets kubectl's RESTMapper resolve
``pods.notifier.x-k8s.io`` (``kubectl auth can-i create pods.notifier.x-k8s.io
--subresource=notify``); plain ``pods`` stays the core group's, which kubectl prefers."""
POD_NOTIFY = Resource("pods/notify", "PodNotifier", ("create",))
PODNOTIFIERS = Resource(
    "podnotifiers", "PodNotifier",
    ("delete", "deletecollection", "get", "list", "patch", "watch"),
    singular="podnotifier", short_names=("pnot",), categories=("notifier",),
)
PODNOTIFIER_RELEASE = Resource("podnotifiers/release", "PodNotifier", ("create",))
"""Release a held notifier (apiserver.notifier.holds)."""
NOTIFICATIONS = Resource(
    "notifications", "Notification",
    ("create", "delete", "deletecollection", "get", "list", "patch", "watch"),
    singular="notification", short_names=("notif",), categories=("notifier",),
)
NOTIFICATION_RELEASE = Resource("notifications/release", "Notification", ("create",))
"""Ends a Notification's quiesce window (spec.release)."""
RESOURCES = (NOTIFICATIONS, NOTIFICATION_RELEASE, PODNOTIFIERS, PODNOTIFIER_RELEASE,
             NOTIFIER_PODS, POD_NOTIFY)
