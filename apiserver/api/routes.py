"""URL paths of the resource endpoints (the handlers live in apiserver.handlers)."""

from __future__ import annotations

from apiserver.api.resources import API_PATH

NAMESPACED = f"{API_PATH}/namespaces/{{namespace}}"
POD_NOTIFY_PATH = f"{NAMESPACED}/pods/{{pod}}/notify"
PODNOTIFIER_RELEASE_PATH = f"{NAMESPACED}/podnotifiers/{{name}}/release"
