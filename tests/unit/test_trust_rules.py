"""Trust rules for a pod's notifier declarations: the owner's template (rule 1) or pods/exec
(rule 2), with owners read through `OwnerTemplates` from a fake kube-apiserver (MockTransport:
one GET each while the cache is not running, none once its informers have synced) and a fake
authorizer."""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.kube import Connection, KubeClient, KubeRejected
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.podcache import OwnerTemplates
from apiserver.notifier.trust import OWNER_TEMPLATE, POD_EXEC, controller_of, decide

DECLARATION = json.dumps({"db": [{"name": "quiesce", "action": {"signal": "SIGHUP"}}]})
USER = UserInfo("backup-bot", groups=["system:authenticated"])

KINDS = [
    ("apps/v1", "ReplicaSet", "/apis/apps/v1/namespaces/prod/replicasets/db-7f9c"),
    ("apps/v1", "StatefulSet", "/apis/apps/v1/namespaces/prod/statefulsets/db-7f9c"),
    ("apps/v1", "DaemonSet", "/apis/apps/v1/namespaces/prod/daemonsets/db-7f9c"),
    ("batch/v1", "Job", "/apis/batch/v1/namespaces/prod/jobs/db-7f9c"),
]


def collection_of(path: str) -> str:
    """/apis/apps/v1/namespaces/prod/replicasets/x -> /apis/apps/v1/replicasets"""
    parts = path.split("/")
    return "/".join(parts[:4] + [parts[6]])


@dataclass
class FakeOwners:
    """kube-apiserver serving `objects` by path, and lists of them by collection (watches stay
    open without events); anything else is 404, or `error_code`."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    error_code: int | None = None
    gets: list[str] = field(default_factory=list)
    """Paths of the GETs of single objects."""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.count("/") == 4:  # a collection: list or watch
            if request.url.params.get("watch") == "true":
                await asyncio.Event().wait()
            items = [o for p, o in self.objects.items() if collection_of(p) == path]
            return httpx.Response(200, json={"metadata": {"resourceVersion": "1"},
                                             "items": items})
        self.gets.append(path)
        if self.error_code is not None:
            return httpx.Response(self.error_code, json={
                "kind": "Status", "status": "Failure", "reason": "Forbidden",
                "message": "no", "code": self.error_code})
        obj = self.objects.get(request.url.path)
        if obj is None:
            return httpx.Response(404, json={"kind": "Status", "status": "Failure",
                                             "reason": "NotFound", "code": 404})
        return httpx.Response(200, json=obj)

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


@dataclass
class FakeAuthorizer:
    allowed: bool = False
    asked: list[tuple[UserInfo, RequestAttributes]] = field(default_factory=list)

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append((user, attributes))
        return Decision(self.allowed, "fake")


LABELS = {"app": "db", "tier": "data"}
SELECTOR = {"matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["data", "cache"]}]}
"""The owners' selector: the pods' LABELS match it."""


def pod(name: str = "db-0", *, annotation: str | None = DECLARATION,
        owner: tuple[str, str] | None = ("apps/v1", "StatefulSet"), controller: bool = True,
        labels: dict[str, str] = LABELS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "prod", "uid": f"uid-{name}",
                            "labels": dict(labels)}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation, "other": "x"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "db-7f9c",
                                    "uid": "uid-db-7f9c", "controller": controller}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def owner_with(annotation: str | None, name: str = "db-7f9c") -> dict[str, Any]:
    annotations = {ANNOTATION: annotation, "unrelated": "x" * 100} if annotation is not None \
        else {}
    return {"metadata": {"namespace": "prod", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": "1"},
            "spec": {"selector": SELECTOR,
                     "template": {"metadata": {"annotations": annotations}},
                     "replicas": 3}}


async def run(owners: FakeOwners, authorizer: FakeAuthorizer, target: dict[str, Any]):
    """decide() with an OwnerTemplates that is not running: every owner is one GET."""
    kube = owners.client()
    try:
        return await decide(OwnerTemplates(kube), authorizer, USER, target)
    finally:
        await kube.aclose()


# rule 1


@pytest.mark.parametrize(("api_version", "kind", "path"), KINDS)
async def test_identical_template_annotation_is_trusted_without_review(
        api_version: str, kind: str, path: str) -> None:
    owners = FakeOwners({path: owner_with(DECLARATION)})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, pod(owner=(api_version, kind)))

    assert decision.trusted
    assert decision.rule == OWNER_TEMPLATE
    assert decision.message == ""
    assert owners.gets == [path]
    assert authorizer.asked == []


@pytest.mark.parametrize(("api_version", "kind", "path"), KINDS)
async def test_different_template_annotation_falls_to_rule_2(
        api_version: str, kind: str, path: str) -> None:
    reformatted = json.dumps(json.loads(DECLARATION), indent=1)
    owners = FakeOwners({path: owner_with(reformatted)})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, pod(owner=(api_version, kind)))

    assert not decision.trusted
    assert decision.rule == ""
    assert (f"rule 1 failed: the pod's {ANNOTATION} annotation is not identical to the one in "
            f"the pod template of its controller {kind}/db-7f9c") in decision.message
    assert len(authorizer.asked) == 1


def forged(target: dict[str, Any], uid: str) -> dict[str, Any]:
    """`target` with its controller reference's UID set to `uid` (kind and name kept)."""
    target["metadata"]["ownerReferences"][0]["uid"] = uid
    return target


@pytest.mark.parametrize(("api_version", "kind", "path"), KINDS)
@pytest.mark.parametrize("uid", ["made-up-uid", "", "UID-DB-7F9C", "uid-db-7f9c "])
async def test_owner_with_another_uid_is_not_the_controller(
        api_version: str, kind: str, path: str, uid: str) -> None:
    """A pod whose reference names a real owner's kind and name with another UID (a forged
    or stale ownerReference) is not vouched for by that owner, even with its very annotation:
    rule 1 fails, saying the UID differs, and rule 2 decides."""
    owners = FakeOwners({path: owner_with(DECLARATION)})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, forged(pod(owner=(api_version, kind)), uid))

    assert not decision.trusted
    assert (f'rule 1 failed: the pod\'s controller reference names {kind}/db-7f9c with UID '
            f'"{uid}", but {kind}/db-7f9c has UID "uid-db-7f9c": the UID differs'
            ) in decision.message
    assert "not identical" not in decision.message
    assert len(authorizer.asked) == 1


@pytest.mark.parametrize(("api_version", "kind", "path"), KINDS)
@pytest.mark.parametrize("labels", [
    {"app": "web", "tier": "data"},  # matchLabels fails
    {"app": "db", "tier": "web"},  # matchExpressions fails
    {"app": "db"},  # In needs the label
    {},
])
async def test_a_pod_outside_the_owners_selector_is_not_vouched_for(
        api_version: str, kind: str, path: str, labels: dict[str, str]) -> None:
    """A pod whose controller reference names a real owner with its real UID, carrying that
    owner's very annotation, but whose labels the owner's selector does not match (a reference
    someone with `patch pods` wrote, which the controller would drop): rule 1 fails, naming
    the labels and the selector, and rule 2 decides."""
    owners = FakeOwners({path: owner_with(DECLARATION)})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, pod(owner=(api_version, kind), labels=labels))

    assert not decision.trusted
    shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    assert (f'rule 1 failed: the pod\'s labels "{shown}" do not match the selector '
            f'"app=db,tier in (cache,data)" of its controller {kind}/db-7f9c: {kind}/db-7f9c '
            "would not adopt this pod") in decision.message
    assert "not identical" not in decision.message
    assert len(authorizer.asked) == 1


async def test_a_pod_outside_the_owners_selector_leaves_rule_2() -> None:
    owners = FakeOwners({KINDS[0][2]: owner_with(DECLARATION)})

    decision = await run(owners, FakeAuthorizer(allowed=True),
                         pod(owner=KINDS[0][:2], labels={"app": "web"}))

    assert (decision.trusted, decision.rule) == (True, POD_EXEC)


@pytest.mark.parametrize(("selector", "labels", "trusted"), [
    ({"matchLabels": {"app": "db"}}, {"app": "db", "extra": "x"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
     {"app": "web"}, False),
    ({"matchExpressions": [{"key": "job", "operator": "Exists"}]}, {"job": ""}, True),
    ({"matchExpressions": [{"key": "job", "operator": "Exists"}]}, {"app": "db"}, False),
    ({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}, {"canary": "1"},
     False),
    ({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},  # a Job's generated one
     {"batch.kubernetes.io/controller-uid": "u-2"}, False),
])
async def test_the_selector_is_read_as_kubernetes_reads_it(
        selector: dict[str, Any], labels: dict[str, str], trusted: bool) -> None:
    owner = owner_with(DECLARATION)
    owner["spec"]["selector"] = selector
    owners = FakeOwners({KINDS[3][2]: owner})

    decision = await run(owners, FakeAuthorizer(), pod(owner=KINDS[3][:2], labels=labels))

    assert decision.trusted is trusted, decision.message


async def test_an_owner_without_a_selector_vouches_for_nothing() -> None:
    owner = owner_with(DECLARATION)
    del owner["spec"]["selector"]
    owners = FakeOwners({KINDS[0][2]: owner})

    decision = await run(owners, FakeAuthorizer(), pod(owner=KINDS[0][:2]))

    assert not decision.trusted
    assert ("rule 1 failed: the pod's controller ReplicaSet/db-7f9c has no spec.selector"
            in decision.message)


async def test_an_owner_without_uid_vouches_for_nothing() -> None:
    """Every stored object has a UID; one read without it (a broken cache) is no match, even
    for a reference without one."""
    owner = owner_with(DECLARATION)
    del owner["metadata"]["uid"]
    owners = FakeOwners({KINDS[0][2]: owner})

    decision = await run(owners, FakeAuthorizer(), forged(pod(owner=KINDS[0][:2]), ""))

    assert not decision.trusted
    assert 'has UID "": the UID differs' in decision.message


async def test_owner_with_another_uid_leaves_rule_2() -> None:
    owners = FakeOwners({KINDS[0][2]: owner_with(DECLARATION)})
    authorizer = FakeAuthorizer(allowed=True)

    decision = await run(owners, authorizer,
                         forged(pod(owner=KINDS[0][:2]), "made-up-uid"))

    assert (decision.trusted, decision.rule) == (True, POD_EXEC)


async def test_a_uid_in_the_message_is_escaped() -> None:
    owners = FakeOwners({KINDS[0][2]: owner_with(DECLARATION)})

    decision = await run(owners, FakeAuthorizer(),
                         forged(pod(owner=KINDS[0][:2]), 'x"\n\x00\ud800'))

    assert 'with UID "x\\"\\n\\x00\\ud800"' in decision.message
    assert not any(char in decision.message for char in "\n\x00\ud800")


async def test_different_annotation_trusted_by_rule_2() -> None:
    path = KINDS[1][2]
    owners = FakeOwners({path: owner_with(DECLARATION + " ")})
    authorizer = FakeAuthorizer(allowed=True)

    decision = await run(owners, authorizer, pod())

    assert (decision.trusted, decision.rule) == (True, POD_EXEC)


async def test_pod_without_annotation_is_not_trusted_by_rule_1() -> None:
    path = KINDS[1][2]
    owners = FakeOwners({path: owner_with(None)})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, pod(annotation=None))

    assert not decision.trusted
    assert "rule 1 failed" in decision.message


async def test_owner_not_found_falls_to_rule_2() -> None:
    owners = FakeOwners({})
    authorizer = FakeAuthorizer(allowed=True)

    decision = await run(owners, authorizer, pod())

    assert (decision.trusted, decision.rule) == (True, POD_EXEC)
    assert owners.gets == [KINDS[1][2]]


async def test_owner_not_found_and_no_exec() -> None:
    decision = await run(FakeOwners({}), FakeAuthorizer(allowed=False), pod())
    assert not decision.trusted
    assert "not identical to the one in the pod template of its controller StatefulSet/db-7f9c" \
        in decision.message


@pytest.mark.parametrize(("owner", "controller"), [
    (None, True),
    (("apps/v1", "StatefulSet"), False),
    (("apps/v1", "Deployment"), True),
    (("example.com/v1", "Database"), True),
    (("v1", "ReplicationController"), True),
])
async def test_no_supported_controller_skips_rule_1(owner: tuple[str, str] | None,
                                                    controller: bool) -> None:
    owners = FakeOwners({})
    authorizer = FakeAuthorizer(allowed=False)

    decision = await run(owners, authorizer, pod(owner=owner, controller=controller))

    assert owners.gets == []
    assert not decision.trusted
    assert ("rule 1 failed: the pod has no controlling ReplicaSet, StatefulSet, DaemonSet or "
            "Job") in decision.message


# rule 2


async def test_rule_2_asks_for_pods_exec_on_the_pod() -> None:
    authorizer = FakeAuthorizer(allowed=True)

    decision = await run(FakeOwners({}), authorizer, pod("db-3", owner=None))

    assert (decision.trusted, decision.rule, decision.message) == (True, POD_EXEC, "")
    [(user, attributes)] = authorizer.asked
    assert user == USER
    assert attributes == RequestAttributes.for_resource(
        "create", group="", version="v1", resource="pods", subresource="exec",
        namespace="prod", name="db-3")


async def test_denied_names_both_rules_and_the_user() -> None:
    decision = await run(FakeOwners({}), FakeAuthorizer(allowed=False), pod(owner=None))

    assert not decision.trusted
    assert decision.message.startswith("the pod's notifiers are not trusted: rule 1 failed: ")
    assert ('; rule 2 failed: User "backup-bot" cannot create resource "pods/exec" in API '
            'group "" in the namespace "prod". To fix: ') in decision.message
    assert "pod template of the workload" in decision.message


# owners from the cache, and errors


async def test_synced_owner_cache_makes_no_get() -> None:
    owners = FakeOwners({path: owner_with(DECLARATION) for _, _, path in KINDS})
    authorizer = FakeAuthorizer(allowed=False)
    kube = owners.client()
    templates = OwnerTemplates(kube)
    task = asyncio.create_task(templates.run())
    try:
        async with asyncio.timeout(5):
            await templates.wait_synced()
        assert templates.has_synced()
        decisions = [await decide(templates, authorizer, USER, pod(f"db-{i}", owner=kind[:2]))
                     for i in range(3) for kind in KINDS]
        cached = await templates.owner("apps", "ReplicaSet", "prod", "db-7f9c")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.aclose()

    assert all(d.trusted and d.rule == OWNER_TEMPLATE for d in decisions)
    assert owners.gets == []
    assert templates.gets == 0
    # trimmed to what the trust rules read
    assert cached == {"metadata": {"namespace": "prod", "name": "db-7f9c",
                                   "uid": "uid-db-7f9c", "resourceVersion": "1"},
                      "spec": {"selector": SELECTOR, "template": {"metadata": {"annotations": {
                          ANNOTATION: DECLARATION}}}}}


async def test_an_owner_the_cache_has_not_seen_costs_one_get_each_time() -> None:
    path = KINDS[1][2]
    owners = FakeOwners({path: owner_with(DECLARATION)})
    for i in range(2):
        await run(owners, FakeAuthorizer(), pod(f"db-{i}"))
    assert owners.gets == [path, path]


@pytest.mark.parametrize("code", [403, 500])
async def test_other_owner_errors_propagate(code: int) -> None:
    owners = FakeOwners({}, error_code=code)
    authorizer = FakeAuthorizer(allowed=True)

    with pytest.raises(KubeRejected) as caught:
        await run(owners, authorizer, pod())

    assert caught.value.status_code == code
    assert authorizer.asked == []


def test_controller_of() -> None:
    assert controller_of(pod()) == ("apps", "StatefulSet", "db-7f9c", "uid-db-7f9c")
    assert controller_of(pod(owner=("batch/v1", "Job"))) == ("batch", "Job", "db-7f9c",
                                                              "uid-db-7f9c")
    assert controller_of(pod(owner=None)) is None
    assert controller_of(pod(controller=False)) is None
