"""The error hierarchy: each layer's errors are kinds of apiserver.errors, rendered by the edge
with the code, reason, message and details kube-apiserver would give."""

from __future__ import annotations

import pytest

from apiserver import errors
from apiserver.api.status import status_body
from apiserver.errors import Cause
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.notifier import errors as notifier_errors
from apiserver.registry import errors as registry_errors
from apiserver.registry.resources import PODNOTIFIERS


def test_not_declared_names_the_declared_notifiers() -> None:
    body = status_body(notifier_errors.NotDeclared("db-0", "quiesse", ["quiesce", "reload"]))
    assert (body["code"], body["reason"]) == (404, "NotFound")
    assert body["message"] == ('notifier "quiesse" is not declared by pod "db-0" (declared: '
                               "quiesce, reload; see its notifier.x-k8s.io/notifiers annotation)")
    assert body["details"] == {"name": "quiesse", "kind": "notifier"}


def test_untrusted_is_a_403_on_the_pod() -> None:
    body = status_body(notifier_errors.Untrusted("db-0", "rule 1 failed"))
    assert (body["code"], body["reason"]) == (403, "Forbidden")
    assert body["message"] == 'pods "db-0" is forbidden: rule 1 failed'
    assert body["details"] == {"name": "db-0", "kind": "pods"}


def test_invalid_declaration_lists_its_causes() -> None:
    causes = [Cause("FieldValueRequired", "Required value", "a"),
              Cause("FieldValueInvalid", "Invalid value", "b")]
    body = status_body(notifier_errors.InvalidDeclaration("db-0", causes))
    assert (body["code"], body["reason"]) == (422, "Invalid")
    assert body["message"] == 'Pod "db-0" is invalid: [a: Required value, b: Invalid value]'
    assert body["details"]["kind"] == "Pod"
    assert [c["field"] for c in body["details"]["causes"]] == ["a", "b"]


def test_pod_not_found_is_worded_like_kube_apiserver() -> None:
    body = status_body(notifier_errors.PodNotFound("ns", "gone"))
    assert body["message"] == 'pods "gone" not found'
    assert body["details"] == {"name": "gone", "kind": "pods"}


def test_too_many_runs_carries_its_retry_hint() -> None:
    error = notifier_errors.TooManyRuns("busy", retry_after_seconds=3)
    assert (error.code, status_body(error)["details"]) == (429, {"retryAfterSeconds": 3})


@pytest.mark.parametrize(("error", "kind"), [
    (registry_errors.NotFound("x", resource=PODNOTIFIERS, name="r"), errors.NotFound),
    (registry_errors.Conflict("x", resource=PODNOTIFIERS, name="r"), errors.Conflict),
    (registry_errors.Expired("x"), errors.Gone),
    (registry_errors.InvalidSelector("labelSelector", "bad"), errors.BadRequest),
    (registry_errors.ResourceVersionTooLarge("x"), errors.Timeout),
    (KubeUnavailable("down"), errors.ServiceUnavailable),
    (KubeRejected(403, {"message": "no"}), errors.InternalError),
])
def test_every_layer_raises_a_kind_of_the_one_hierarchy(error: errors.APIError,
                                                       kind: type[errors.APIError]) -> None:
    assert isinstance(error, kind)
    body = status_body(error)
    assert (body["code"], body["reason"]) == (kind.code, kind.reason)


def test_registry_details_name_the_resource() -> None:
    body = status_body(registry_errors.NotFound(
        'podnotifiers.notifier.x-k8s.io "r" not found', resource=PODNOTIFIERS, name="r"))
    assert body["details"] == {"name": "r", "group": "notifier.x-k8s.io", "kind": "podnotifiers"}


def test_kube_rejected_keeps_what_kube_apiserver_answered() -> None:
    error = KubeRejected(403, {"reason": "Forbidden", "message": "no"})
    assert (error.status_code, error.answer_reason, error.code) == (403, "Forbidden", 500)
    assert str(error) == "kube-apiserver answered 403: no"
