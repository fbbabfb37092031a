"""NotifierPods (the read-only pods of notifier.x-k8s.io): what is shown, which reviews are
asked and how many, the pages of a list, and the Table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from apiserver.api.tables import NOTIFIER_POD_TABLE
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.notifier_pods import NotifierPods, decode_continue
from apiserver.registry.errors import BadRequest
from apiserver.registry.selectors import parse_field_selector, parse_label_selector

ALICE = UserInfo("alice", "uid-alice", ["team"])
QUIESCE = {"name": "quiesce", "timeoutSeconds": 60,
           "action": {"exec": {"command": ["/bin/sh", "-c", "sync"]}}}
RELOAD = {"name": "reload", "action": {"signal": "SIGHUP"}}
DECLARED = json.dumps({"db": [QUIESCE], "side": [RELOAD, {**QUIESCE}]})
RS_UID = "uid-rs"


def pod(name: str, namespace: str = "shop", annotation: str | None = DECLARED, *,
        owned: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                            "resourceVersion": "7", "creationTimestamp": "2026-06-01T11:00:00Z",
                            "labels": labels or {"app": "db"}}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation, "other": "secret-ish"}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": "db-rs", "uid": RS_UID, "controller": True}]
    return {"metadata": meta, "spec": {"containers": [{"name": "db"}, {"name": "side"}]},
            "status": {"phase": "Running"}}


class FakePods:
    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        return [p for (ns, _), p in self.pods.items() if ns == namespace]

    def all_pods(self) -> list[dict[str, Any]]:
        return list(self.pods.values())


class FakeOwners:
    async def owner(self, group: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "namespace": namespace, "uid": RS_UID},
                "spec": {"selector": {"matchLabels": {"app": "db"}},
                         "template": {"metadata": {"annotations": {ANNOTATION: DECLARED}}}}}


@dataclass
class FakeAuthorizer:
    """Allows `(verb, resource/subresource, namespace, name)`; name "" grants the namespace."""

    allowed: set[tuple[str, str, str, str]] = field(default_factory=set)
    asked: list[RequestAttributes] = field(default_factory=list)

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append(attributes)
        resource = "/".join(filter(None, (attributes.resource, attributes.subresource)))
        key = (attributes.verb, resource, attributes.namespace)
        if (*key, "") in self.allowed or (*key, attributes.name) in self.allowed:
            return Decision(True)
        return Decision(False, "no RBAC policy matched")


def view(pods: FakePods, authorizer: FakeAuthorizer, **kwargs: Any) -> NotifierPods:
    return NotifierPods(pods, FakeOwners(), authorizer, max_timeout_seconds=600,
                        max_hold_seconds=3600, **kwargs)


NOTIFY_ALL = ("create", "pods/notify", "shop", "")
EXEC_ALL = ("create", "pods/exec", "shop", "")


async def test_shows_the_declarations_and_the_pod_metadata_only():
    found = await view(FakePods(pod("db-0", owned=True)),
                       FakeAuthorizer({NOTIFY_ALL})).get(ALICE, "shop", "db-0")
    assert found == {
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "NotifierPod",
        "metadata": {"name": "db-0", "namespace": "shop", "uid": "uid-db-0",
                     "resourceVersion": "7", "creationTimestamp": "2026-06-01T11:00:00Z",
                     "labels": {"app": "db"}},
        "containers": [{"name": "db", "notifiers": [QUIESCE]},
                       {"name": "side", "notifiers": [RELOAD, QUIESCE]}],
        "access": {"allowed": True, "rule": "OwnerTemplate"}}
    assert "secret-ish" not in json.dumps(found), "only the notifier annotation is shown"


async def test_a_missing_pod_is_none_and_a_pod_declaring_nothing_asks_no_review():
    authorizer = FakeAuthorizer()
    pods = view(FakePods(pod("plain", annotation=None)), authorizer)
    assert await pods.get(ALICE, "shop", "gone") is None
    plain = await pods.get(ALICE, "shop", "plain")
    assert plain is not None
    assert (plain["containers"], "access" in plain) == ([], False)
    assert authorizer.asked == []


async def test_notify_by_resource_name_is_asked_per_pod_after_the_namespace():
    authorizer = FakeAuthorizer({("create", "pods/notify", "shop", "db-0"), EXEC_ALL})
    page = await view(FakePods(pod("db-0"), pod("db-1")), authorizer).list_page(
        ALICE, "shop", labels=parse_label_selector(""), fields=parse_field_selector("", ()))
    first, second = page.items
    assert first["access"] == {"allowed": True, "rule": "PodExec"}
    assert second["access"]["allowed"] is False
    assert second["access"]["reason"] == "Forbidden"
    assert second["access"]["message"] == (
        'User "alice" cannot create resource "pods/notify" in API group "notifier.x-k8s.io" '
        'in the namespace "shop": no RBAC policy matched')
    asked = [(a.verb, a.api_group, a.subresource, a.name) for a in authorizer.asked]
    assert asked.count(("create", "notifier.x-k8s.io", "notify", "")) == 1
    assert asked.count(("create", "", "exec", "")) == 1, "exec allowed namespace-wide: once"
    assert ("create", "notifier.x-k8s.io", "notify", "db-1") in asked


async def test_untrusted_declarations_say_which_rules_failed():
    authorizer = FakeAuthorizer({NOTIFY_ALL})
    found = await view(FakePods(pod("db-0")), authorizer).get(ALICE, "shop", "db-0")
    assert found is not None
    access = found["access"]
    assert (access["allowed"], access["reason"]) == (False, "Untrusted")
    assert "rule 1 failed" in access["message"] and "rule 2 failed" in access["message"]


async def test_an_invalid_annotation_is_shown_as_such_without_reviews():
    authorizer = FakeAuthorizer({NOTIFY_ALL})
    found = await view(FakePods(pod("db-0", annotation='{"db": [{"name": "x"}]}')),
                       authorizer).get(ALICE, "shop", "db-0")
    assert found is not None
    assert found["containers"] == []
    assert found["access"]["reason"] == "InvalidDeclaration"
    assert "action" in found["access"]["message"]
    assert authorizer.asked == []


async def test_reviews_by_name_are_bounded_per_request():
    """Only by resourceNames: each pod costs a review, and the request stops at its maximum."""
    pods = FakePods(*(pod(f"db-{i}") for i in range(6)))
    authorizer = FakeAuthorizer({("create", "pods/notify", "shop", f"db-{i}")
                                 for i in range(6)} | {EXEC_ALL})
    page = await view(pods, authorizer, max_reviews=4).list_page(
        ALICE, "shop", labels=parse_label_selector(""), fields=parse_field_selector("", ()))
    assert len(authorizer.asked) == 4
    reasons = [item["access"].get("reason", "") for item in page.items]
    # notify for the namespace, db-0 and db-1 by name, exec for the namespace: 4 reviews
    assert reasons == ["", "", *["NotReviewed"] * 4]
    refused = next(i["access"] for i in page.items if i["access"].get("reason"))
    assert "asked its maximum of 4 access reviews" in refused["message"]


async def test_pages_by_namespace_and_name_with_selectors():
    pods = FakePods(*(pod(f"db-{i}") for i in (3, 1, 4, 0, 2)), pod("web", labels={"app": "web"}),
                    pod("db-9", namespace="other"))
    pods_view = view(pods, FakeAuthorizer())
    labels, fields = parse_label_selector("app=db"), parse_field_selector("", ())
    seen, token = [], ""
    while True:
        page = await pods_view.list_page(ALICE, "shop", labels=labels, fields=fields, limit=2,
                                         continue_token=token)
        seen.append([item["metadata"]["name"] for item in page.items])
        token = page.continue_token
        if not token:
            break
    assert seen == [["db-0", "db-1"], ["db-2", "db-3"], ["db-4"]]
    everywhere = await pods_view.list_page(
        ALICE, None, labels=labels,
        fields=parse_field_selector("metadata.name!=db-0", ("metadata.name",)))
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere.items] == [
        ("other", "db-9"), ("shop", "db-1"), ("shop", "db-2"), ("shop", "db-3"),
        ("shop", "db-4")]


@pytest.mark.parametrize("token", ["%%%", "e30", "eyJzdGFydCI6WzEsMl19", "x" * 2000])
def test_a_malformed_continue_token_is_a_bad_request(token):
    with pytest.raises(BadRequest, match="continue token is malformed"):
        decode_continue(token)


NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def cells(obj: dict[str, Any]) -> list[Any]:
    return NOTIFIER_POD_TABLE.row(obj, now=NOW)["cells"]


def test_table_columns_and_cells():
    names = [(c["name"], c["priority"]) for c in NOTIFIER_POD_TABLE.column_definitions()]
    assert names == [("Name", 0), ("Notifiers", 0), ("Allowed", 0), ("Age", 0),
                     ("Containers", 1), ("Access", 1)]
    base = {"metadata": {"name": "db-0", "creationTimestamp": "2026-06-01T11:00:00Z"},
            "containers": [{"name": "db", "notifiers": [QUIESCE]},
                           {"name": "side", "notifiers": [RELOAD, QUIESCE]}]}
    assert cells({**base, "access": {"allowed": True, "rule": "OwnerTemplate"}}) == [
        "db-0", "quiesce,reload", "quiesce,reload", "60m", "db=quiesce side=reload,quiesce",
        "OwnerTemplate"]
    assert cells({**base, "access": {"allowed": False, "reason": "Forbidden"}})[1:3] == [
        "quiesce,reload", "<none>"]
    assert cells({"metadata": {"name": "plain"}, "containers": []}) == [
        "plain", "<none>", "<none>", "<unknown>", "<none>", ""]
    invalid = {"metadata": {"name": "bad"}, "containers": [],
               "access": {"allowed": False, "reason": "InvalidDeclaration"}}
    assert cells(invalid)[1:3] == ["<invalid>", "<none>"]
    assert cells(invalid)[5] == "InvalidDeclaration"
