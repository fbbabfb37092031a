"""Helpers for notifier tests: declarations, notify requests, reading records."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.support.kube import Cluster

API = "/apis/notifier.x-k8s.io/v1alpha1"
ANNOTATION = "notifier.x-k8s.io/notifiers"


def exec_notifier(name: str, script: str, timeout: int | None = None) -> dict[str, Any]:
    notifier: dict[str, Any] = {"name": name,
                                "action": {"exec": {"command": ["/bin/sh", "-c", script]}}}
    if timeout is not None:
        notifier["timeoutSeconds"] = timeout
    return notifier


def signal_notifier(name: str, signal: str) -> dict[str, Any]:
    return {"name": name, "action": {"signal": signal}}


def declare(**containers: list[dict[str, Any]]) -> dict[str, str]:
    """The pod annotations that declare these notifiers per container."""
    return {ANNOTATION: json.dumps(containers)}


def notify_path(namespace: str, pod: str) -> str:
    return f"{API}/namespaces/{namespace}/pods/{pod}/notify"


def body(notifier: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "spec": {"notifier": notifier, **spec}}


def notify(client: httpx.Client, namespace: str, pod: str, notifier: str, wait: int = 20,
           **spec: Any) -> httpx.Response:
    return client.post(notify_path(namespace, pod), params={"waitSeconds": str(wait)},
                       json=body(notifier, **spec))


def records(cluster: Cluster, namespace: str, **params: str) -> list[dict[str, Any]]:
    with cluster.admin() as kube:
        response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers", params=params)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def notification(name: str, notifier: str, selector: dict[str, str], **spec: Any
                 ) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": selector}, "notifier": notifier, **spec}}


def create_notification(client: httpx.Client, namespace: str, obj: dict[str, Any]
                        ) -> httpx.Response:
    return client.post(f"{API}/namespaces/{namespace}/notifications", json=obj)


def get_notification(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(f"{API}/namespaces/{namespace}/notifications/{name}")
    assert response.status_code == 200, response.text
    return response.json()


def wait_finished(cluster: Cluster, namespace: str, name: str, timeout: float = 60
                  ) -> dict[str, Any]:
    """The Notification once its phase is Succeeded or Failed. A 503 while waiting (the
    aggregator reached a replica that was just killed, before the load balancer took it out)
    or a timeout (it reached a replica that is paused) is waited through."""
    deadline = time.monotonic() + timeout
    status: Any = "never read"
    while time.monotonic() < deadline:
        try:
            with cluster.admin(timeout=10) as kube:
                response = kube.get(f"{API}/namespaces/{namespace}/notifications/{name}")
        except httpx.TimeoutException:
            continue
        if response.status_code != 503:
            assert response.status_code == 200, response.text
            obj: dict[str, Any] = response.json()
            status = obj.get("status", {})
            if status.get("phase") in ("Succeeded", "Failed"):
                return obj
        time.sleep(0.25)
    raise AssertionError(f"notification {name} did not finish in {timeout} s: {status}")
