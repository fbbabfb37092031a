from __future__ import annotations

import json

from apiserver import errors
from apiserver.api import status
from apiserver.authz.attributes import RequestAttributes, request_attributes

G = "notifier.x-k8s.io"


def test_status_shape_and_response():
    error = errors.not_found("podnotifiers", G, "run-1")
    assert status.status_body(error) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'podnotifiers.notifier.x-k8s.io "run-1" not found', "reason": "NotFound",
        "details": {"name": "run-1", "group": G, "kind": "podnotifiers"}, "code": 404,
    }
    response = status.response(error)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert json.loads(response.body) == status.status_body(error)


def test_forbidden_namespaced_subresource():
    attributes = request_attributes("POST", f"/apis/{G}/v1alpha1/namespaces/ns/pods/p/notify")
    error = status.forbidden_request("alice", attributes)
    assert error.code == 403
    assert status.status_body(error)["reason"] == "Forbidden"
    assert status.status_body(error)["message"] == (
        'pods.notifier.x-k8s.io "p" is forbidden: User "alice" cannot create resource '
        '"pods/notify" in API group "notifier.x-k8s.io" in the namespace "ns"')
    assert status.status_body(error)["details"] == {"name": "p", "group": G, "kind": "pods"}


def test_namespace_wide_notify_denial_says_how_to_check_access():
    """The check a Notification's creator must pass is this server's own: its 403 says how to
    check (one pod's notify is denied by kube-apiserver first, whose wording ours equals)."""
    attributes = RequestAttributes.for_resource(
        "create", group=G, version="v1alpha1", resource="pods", subresource="notify",
        namespace="ns")
    message = status.forbidden_request("alice", attributes, "no RBAC policy matched").message
    assert message.endswith(': no RBAC policy matched. Check access with "kubectl notify can-i '
                            'POD" or "kubectl auth can-i create pods.notifier.x-k8s.io '
                            '--subresource=notify" (plain "pods/notify" names the core pods)')


def test_other_denials_carry_no_notify_hint():
    attributes = request_attributes("DELETE", f"/apis/{G}/v1alpha1/namespaces/ns/podnotifiers/p")
    assert "can-i" not in status.forbidden_request("alice", attributes).message


def test_forbidden_without_name_at_cluster_scope_with_reason():
    attributes = request_attributes("GET", f"/apis/{G}/v1alpha1/podnotifiers")
    error = status.forbidden_request("system:anonymous", attributes, "no RBAC policy matched")
    assert status.status_body(error)["message"] == (
        'podnotifiers.notifier.x-k8s.io is forbidden: User "system:anonymous" cannot list '
        'resource "podnotifiers" in API group "notifier.x-k8s.io" at the cluster scope: '
        "no RBAC policy matched")


def test_forbidden_non_resource_path_is_sanitized():
    error = status.forbidden_request("bob<script>", request_attributes("GET", "/openapi/v2"))
    assert status.status_body(error)["message"] == (
        'forbidden: User "bob&lt;script&gt;" cannot get path "/openapi/v2"')
    assert status.status_body(error)["details"] == {}


def test_unauthorized_has_no_details():
    assert status.status_body(status.unauthorized()) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_invalid_lists_causes():
    """As apimachinery's NewInvalid: the summary joins field and problem, each cause carries
    only the problem (kubectl prints "<field>: <message>" per cause)."""
    causes = [errors.Cause("FieldValueRequired", "Required value", "spec.notifier"),
              errors.Cause("FieldValueInvalid", "Invalid value: \"x\"", "spec.podName")]
    error = errors.invalid("PodNotifier", G, "run-1", causes)
    assert error.code == 422
    assert status.status_body(error)["message"] == (
        'PodNotifier.notifier.x-k8s.io "run-1" is invalid: [spec.notifier: Required value, '
        'spec.podName: Invalid value: "x"]')
    assert status.status_body(error)["details"] == {
        "name": "run-1", "group": G, "kind": "PodNotifier", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value",
             "field": "spec.notifier"},
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "x"',
             "field": "spec.podName"}]}


def test_invalid_with_one_cause_is_not_bracketed():
    error = errors.invalid("Notification", G, "snap-", [
        errors.Cause("FieldValueInvalid", "Invalid value: 0: must be between 1 and 600, inclusive",
                     "spec.timeoutSeconds")])
    assert error.message == (
        'Notification.notifier.x-k8s.io "snap-" is invalid: spec.timeoutSeconds: Invalid value: '
        "0: must be between 1 and 600, inclusive")


def test_too_many_requests_sets_retry_after():
    error = errors.too_many_requests("too many unfinished notifiers for pod p", 5)
    response = status.response(error)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "5"
    assert status.status_body(error)["details"] == {"retryAfterSeconds": 5}


def test_codes_and_reasons():
    cases = {
        errors.bad_request("x"): (400, "BadRequest"),
        status.method_not_allowed(): (405, "MethodNotAllowed"),
        status.path_not_found(): (404, "NotFound"),
        errors.not_acceptable(["application/json"]): (406, "NotAcceptable"),
        errors.request_entity_too_large("1 MiB max"): (413, "RequestEntityTooLarge"),
        errors.unsupported_media_type(["application/json"]): (415, "UnsupportedMediaType"),
        errors.internal_error("boom"): (500, "InternalError"),
        errors.service_unavailable("down"): (503, "ServiceUnavailable"),
    }
    for error, (code, reason) in cases.items():
        body = status.status_body(error)
        assert (error.code, body["code"], body["reason"]) == (code, code, reason)
    assert status.status_body(errors.internal_error("boom"))["message"] == (
        "Internal error occurred: boom")
