"""Issue 9, items 5 and 6 through kube-apiserver's aggregator: hostile bodies and queries are
answered with the server's 4xx Status (never a 5xx, never the aggregator's plain-text 503 on the
next request over a closed connection), and fieldValidation's warnings reach the client."""

from __future__ import annotations

import base64
import json

import pytest

from tests.support.kube import Cluster
from tests.support.notify import API, body, declare, exec_notifier, notification

pytestmark = pytest.mark.cluster

SURROGATE_NAME = b'{"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification", ' \
    b'"metadata": {"name": "a\\ud800"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, ' \
    b'"notifier": "quiesce"}}'
DUPLICATE = (b'{"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification", '
             b'"metadata": {"name": "dup"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, '
             b'"notifier": "BAD NAME", "notifier": "quiesce"}}')


def hostile_requests(namespace: str) -> list[tuple[str, str, bytes, int]]:
    """(method, path with query, body, expected code)."""
    ns = f"{API}/namespaces/{namespace}"
    notify = f"{ns}/pods/no-such-pod/notify"
    deep_token = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")
    return [
        ("POST", notify, b"[" * 50_000, 400),
        ("POST", f"{ns}/notifications", b"{" * 30_000, 400),
        ("DELETE", f"{ns}/podnotifiers/x", b"[" * 50_000, 400),
        ("POST", notify, json.dumps(body("quiesce")).encode("utf-16"), 400),
        ("POST", f"{ns}/notifications", SURROGATE_NAME, 400),
        ("POST", notify, json.dumps(body("q")).replace('"q"', '"q", "timeoutSeconds": '
                                                        + "9" * 5000).encode(), 422),
        ("POST", f"{ns}/notifications",
         json.dumps(notification("n", "q", {"a": "b"})).replace('"n"', "NaN").encode(), 400),
        ("POST", f"{ns}/notifications",
         json.dumps(notification("n", "q", {"a": "b"})).replace('"n"', "1e400").encode(), 422),
        ("POST", f"{ns}/notifications", DUPLICATE, 400),
        ("GET", f"{ns}/podnotifiers?limit=1&continue={deep_token}", b"", 400),
        ("GET", f"{ns}/podnotifiers?watch=true&resourceVersion={'9' * 5000}", b"", 400),
        ("GET", f"{ns}/podnotifiers?watch=true&timeoutSeconds={'9' * 400}", b"", 400),
    ]


def test_hostile_input_is_4xx_and_the_next_request_is_served(cluster: Cluster,
                                                             namespace: str) -> None:
    with cluster.admin() as kube:
        for method, path, content, code in hostile_requests(namespace):
            response = kube.request(method, path, content=content,
                                    headers={"content-type": "application/json"})
            assert response.status_code == code, (path[:120], response.text[:300])
            status = response.json()
            assert status["kind"] == "Status" and status["code"] == code, status
            assert status["message"].isprintable(), status
            following = kube.get(f"{API}/namespaces/{namespace}/podnotifiers")
            assert following.status_code == 200, following.text
        listed = kube.get(f"{API}/namespaces/{namespace}/notifications")
    assert listed.json()["items"] == []


def test_field_validation_warnings_reach_the_client(cluster: Cluster, namespace: str) -> None:
    cluster.create_pod(namespace, "b", labels={"a": "b"}, annotations=declare(
        app=[exec_notifier("quiesce", "true")]))  # a Notification of no pod is refused
    with cluster.admin() as kube:
        warned = kube.post(f"{API}/namespaces/{namespace}/notifications",
                           params={"fieldValidation": "Warn", "dryRun": "All"}, content=DUPLICATE,
                           headers={"content-type": "application/json"})
        ignored = kube.post(f"{API}/namespaces/{namespace}/notifications",
                            params={"fieldValidation": "Ignore", "dryRun": "All"},
                            content=DUPLICATE, headers={"content-type": "application/json"})
    assert warned.status_code == 201, warned.text
    assert warned.headers.get_list("warning") == ['299 - "duplicate field \\"spec.notifier\\""']
    assert warned.json()["spec"]["notifier"] == "quiesce"
    assert ignored.status_code == 201, ignored.text
    assert ignored.headers.get_list("warning") == []
