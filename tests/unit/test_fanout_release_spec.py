"""Validation of a Notification's spec.release and spec.concurrencyPolicy (issue 11)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.api.decoding import Body
from apiserver.api.status import status_body
from apiserver.errors import APIError
from apiserver.fanout.spec import NotificationRequest, validate

MAX_HOLD = 600


def body(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "snap"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "quiesce", **spec}}


def check(obj: dict[str, Any]) -> NotificationRequest:
    return validate(Body(obj), "prod", max_parallelism=10, max_timeout_seconds=60,
                    max_hold_seconds=MAX_HOLD)


def causes(obj: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(APIError) as caught:
        check(obj)
    answer = status_body(caught.value)
    assert answer["code"] == 422, answer
    return [(c["field"], c["message"]) for c in answer["details"]["causes"]]


def test_max_hold_seconds_defaults_to_the_server_bound() -> None:
    ask = check(body(release={"notifier": "unquiesce", "afterSeconds": 30}))
    assert ask.spec["release"] == {"notifier": "unquiesce", "afterSeconds": 30,
                                   "maxHoldSeconds": MAX_HOLD}
    assert "concurrencyPolicy" not in ask.spec  # unset means Forbid


def test_everything_set_is_kept() -> None:
    ask = check(body(release={"notifier": "unquiesce", "afterSeconds": 0, "maxHoldSeconds": 1},
                     concurrencyPolicy="Wait"))
    assert ask.spec["release"] == {"notifier": "unquiesce", "afterSeconds": 0,
                                   "maxHoldSeconds": 1}
    assert ask.spec["concurrencyPolicy"] == "Wait"


def test_an_empty_release_waits_for_the_action() -> None:
    assert check(body(release={})).spec["release"] == {"maxHoldSeconds": MAX_HOLD}


def test_release_and_rollback_are_exclusive() -> None:
    (cause,) = causes(body(release={"notifier": "unquiesce"},
                           rollback={"notifier": "unquiesce"}))
    assert cause[0] == "spec.release"
    assert "may not be set with spec.rollback" in cause[1]
    assert '{"notifier": "unquiesce"}' in cause[1]


def test_release_needs_pre_existing_pods() -> None:
    (cause,) = causes(body(release={"notifier": "unquiesce"}, policy="AllPods"))
    assert cause[0] == "spec.release" and "PreExistingPods" in cause[1]


@pytest.mark.parametrize(("release", "field", "detail"), [
    ({"afterSeconds": -1}, "spec.release.afterSeconds", "between 0 and 600"),
    ({"afterSeconds": MAX_HOLD + 1}, "spec.release.afterSeconds", "between 0 and 600"),
    ({"maxHoldSeconds": 0}, "spec.release.maxHoldSeconds", "between 1 and 600"),
    ({"maxHoldSeconds": MAX_HOLD + 1}, "spec.release.maxHoldSeconds", "between 1 and 600"),
    ({"afterSeconds": 11, "maxHoldSeconds": 10}, "spec.release.afterSeconds",
     "at most maxHoldSeconds (10)"),
    ({"afterSeconds": "30"}, "spec.release.afterSeconds", "whole number"),
    ({"notifier": "not a name"}, "spec.release.notifier", "Invalid value"),
])
def test_release_values(release: dict[str, Any], field: str, detail: str) -> None:
    (cause,) = causes(body(release=release))
    assert cause[0] == field and detail in cause[1], cause


def test_a_release_that_is_not_an_object() -> None:
    (cause,) = causes(body(release="unquiesce"))
    assert cause[0] == "spec.release" and "afterSeconds" in cause[1]


def test_concurrency_policy_is_forbid_or_wait() -> None:
    (cause,) = causes(body(concurrencyPolicy="Replace"))
    assert cause[0] == "spec.concurrencyPolicy"
    assert "supported values: Forbid, Wait" in cause[1]
