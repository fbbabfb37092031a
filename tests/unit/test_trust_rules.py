"""Trust rules for a pod's notifier declarations: the owner's template (rule 1) or pods/exec
(rule 2), against a fake kube-apiserver (MockTransport) and a fake authorizer."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.definitions import ANNOTATION
from apiserver.kube import Connection, KubeClient, KubeRejected
from apiserver.notifier.trust import OWNER_TEMPLATE, POD_EXEC, controller_of, decide

DECLARATION = json.dumps({"db": [{"name": "quiesce", "action": {"signal": "SIGHUP"}}]})
USER = UserInfo("backup-bot", groups=["system:authenticated"])

KINDS = [
    ("apps/v1", "ReplicaSet", "/apis/apps/v1/namespaces/prod/replicasets/db-7f9c"),
    ("apps/v1", "StatefulSet", "/apis/apps/v1/namespaces/prod/statefulsets/db-7f9c"),
    ("apps/v1", "DaemonSet", "/apis/apps/v1/namespaces/prod/daemonsets/db-7f9c"),
    ("batch/v1", "Job", "/apis/batch/v1/namespaces/prod/jobs/db-7f9c"),
]


@dataclass
class FakeOwners:
    """kube-apiserver serving `objects` by path; anything else is 404, or `error_code`."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    error_code: int | None = None
    gets: list[str] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.gets.append(request.url.path)
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


def pod(name: str = "db-0", *, annotation: str | None = DECLARATION,
        owner: tuple[str, str] | None = ("apps/v1", "StatefulSet"), controller: bool = True
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "prod", "uid": f"uid-{name}"}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation, "other": "x"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "db-7f9c",
                                    "uid": "owner-uid", "controller": controller}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def owner_with(annotation: str | None) -> dict[str, Any]:
    annotations = {ANNOTATION: annotation} if annotation is not None else {}
    return {"spec": {"template": {"metadata": {"annotations": annotations}}}}


async def run(owners: FakeOwners, authorizer: FakeAuthorizer, target: dict[str, Any],
              cache: dict[str, Any] | None = None):
    kube = owners.client()
    try:
        return await decide(kube, authorizer, USER, target, cache)
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


# owner cache and errors


async def test_owner_cache_reads_each_owner_once() -> None:
    path = KINDS[0][2]
    owners = FakeOwners({path: owner_with(DECLARATION)})
    authorizer = FakeAuthorizer(allowed=False)
    cache: dict[str, Any] = {}
    kube = owners.client()
    try:
        decisions = [await decide(kube, authorizer, USER,
                                  pod(f"db-{i}", owner=("apps/v1", "ReplicaSet")), cache)
                     for i in range(5)]
    finally:
        await kube.aclose()

    assert all(d.trusted and d.rule == OWNER_TEMPLATE for d in decisions)
    assert owners.gets == [path]
    assert list(cache) == [path]


async def test_owner_cache_remembers_a_missing_owner() -> None:
    owners = FakeOwners({})
    cache: dict[str, Any] = {}
    for i in range(3):
        await run(owners, FakeAuthorizer(allowed=True), pod(f"db-{i}"), cache)
    assert owners.gets == [KINDS[1][2]]
    assert cache == {KINDS[1][2]: None}


async def test_without_cache_every_pod_reads_its_owner() -> None:
    path = KINDS[1][2]
    owners = FakeOwners({path: owner_with(DECLARATION)})
    for i in range(2):
        await run(owners, FakeAuthorizer(), pod(f"db-{i}"))
    assert owners.gets == [path, path]


@pytest.mark.parametrize("code", [403, 500])
async def test_other_owner_errors_propagate(code: int) -> None:
    owners = FakeOwners({}, error_code=code)
    authorizer = FakeAuthorizer(allowed=True)
    cache: dict[str, Any] = {}

    with pytest.raises(KubeRejected) as caught:
        await run(owners, authorizer, pod(), cache)

    assert caught.value.status_code == code
    assert authorizer.asked == []
    assert cache == {}


def test_controller_of() -> None:
    assert controller_of(pod()) == ("apps", "StatefulSet", "db-7f9c")
    assert controller_of(pod(owner=("batch/v1", "Job"))) == ("batch", "Job", "db-7f9c")
    assert controller_of(pod(owner=None)) is None
    assert controller_of(pod(controller=False)) is None
