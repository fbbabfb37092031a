"""Issue 9, items 5 and 6 through kube-apiserver's aggregator: hostile bodies and queries are
answered with the server's 4xx Status (never a 5xx, never the aggregator's plain-text 503 on the
next request over a closed connection), and fieldValidation's warnings reach the client.

Issue 20, item 3: integers too long for 64 bits, in every form YAML writes them, are a 4xx on
every endpoint that reads a YAML body; a JSON patch is bounded in its operations and in what it
builds (413)."""

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


HUGE_INTEGERS = ["9" * 5000, "0x" + "f" * 5000, "0b" + "1" * 20_000, "1" + ":59" * 5000,
                 "0" + "7" * 5000]
"""Decimal, hexadecimal, binary, sexagesimal and octal, each of more than 4300 decimal digits:
each gave 500 (Python's integer-string conversion limit, raised from
apiserver/api/yaml_input.py)."""


def yaml_requests(namespace: str, number: str) -> list[tuple[str, str, str, bytes, int]]:
    """(method, path, content type, YAML body holding ``number``, expected code)."""
    ns = f"{API}/namespaces/{namespace}"
    notification_yaml = ("apiVersion: notifier.x-k8s.io/v1alpha1\nkind: Notification\n"
                         "metadata: {name: big}\nspec:\n  selector: {matchLabels: {a: b}}\n"
                         f"  notifier: quiesce\n  parallelism: {number}\n").encode()
    notify_yaml = ("apiVersion: notifier.x-k8s.io/v1alpha1\nkind: PodNotifier\n"
                   f"spec: {{notifier: quiesce, timeoutSeconds: {number}}}\n").encode()
    return [
        ("POST", f"{ns}/pods/no-such-pod/notify", "application/yaml", notify_yaml, 422),
        ("POST", f"{ns}/notifications", "application/yaml", notification_yaml, 422),
        ("PATCH", f"{ns}/notifications/big?fieldManager=test", "application/apply-patch+yaml",
         notification_yaml, 422),
        ("POST", f"{ns}/podnotifiers/no-such-record/release", "application/yaml",
         f"note: {number}\n".encode(), 404),
    ]


@pytest.mark.parametrize("number", HUGE_INTEGERS, ids=["decimal", "hexadecimal", "binary",
                                                       "sexagesimal", "octal"])
def test_integers_past_64_bits_in_yaml_are_4xx_naming_the_field(cluster: Cluster, namespace: str,
                                                                 number: str) -> None:
    """Each is read as the JSON reader reads a number past 64 bits (a float, here infinite),
    which the integer fields refuse naming themselves; the release reads its body and then
    finds no record."""
    with cluster.admin() as kube:
        for method, path, content_type, content, code in yaml_requests(namespace, number):
            response = kube.request(method, path, content=content,
                                    headers={"content-type": content_type})
            assert response.status_code == code, (method, path, response.text[:300])
            status = response.json()
            assert status["kind"] == "Status" and status["code"] == code, status
            if code == 422:
                field = "spec.parallelism" if b"parallelism" in content else "spec.timeoutSeconds"
                assert [cause["field"] for cause in status["details"]["causes"]] == [field]
        listed = kube.get(f"{API}/namespaces/{namespace}/notifications")
    assert listed.json()["items"] == []


def test_a_json_patch_is_bounded_in_operations_and_in_what_it_builds(cluster: Cluster,
                                                                    namespace: str) -> None:
    """kube-apiserver's cap of 10000 operations, and copies that double the object with each
    operation stop at the bound on the patched object's size: 413 both, nothing changed (the
    Notification's status moves on as it runs)."""
    cluster.create_pod(namespace, "b", labels={"a": "b"}, annotations=declare(
        app=[exec_notifier("quiesce", "true")]))
    path = f"{API}/namespaces/{namespace}/notifications/n"
    json_patch = {"content-type": "application/json-patch+json"}
    with cluster.admin() as kube:
        created = kube.post(f"{API}/namespaces/{namespace}/notifications",
                            json=notification("n", "quiesce", {"a": "b"}))
        assert created.status_code == 201, created.text
        too_many = [{"op": "test", "path": "/kind", "value": "Notification"}] * 10_001
        response = kube.patch(path, content=json.dumps(too_many), headers=json_patch)
        assert response.status_code == 413, response.text[:300]
        assert "maximum operations in a JSON patch is 10000, got 10001" in response.text
        doubling = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "x" * 1000}}]
        doubling += [{"op": "copy", "from": "/metadata/annotations",
                      "path": f"/metadata/annotations/{index}"} for index in range(12)]
        response = kube.patch(path, content=json.dumps(doubling), headers=json_patch)
        assert response.status_code == 413, response.text[:300]
        assert "would be larger than" in response.json()["message"]
        stored = kube.get(path).json()
    assert stored["metadata"].get("annotations") == created.json()["metadata"].get("annotations")
