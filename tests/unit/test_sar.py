from __future__ import annotations

import ssl

import httpx
import pytest

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, request_attributes
from apiserver.authz.sar import Decision, SubjectAccessReviewAuthorizer, review_spec
from apiserver.kube import Connection, KubeClient, KubeRejected, KubeUnavailable

NOTIFY = request_attributes("POST", "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/pods/p/notify")
ALICE = UserInfo("alice", "uid-1", ["team-a", "system:authenticated"], {"scopes": ["x"]})


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def authorizer(fake_kube, clock):
    return SubjectAccessReviewAuthorizer(fake_kube.client(), allowed_ttl=10, denied_ttl=5,
                                         clock=clock)


def test_review_spec_resource():
    assert review_spec(ALICE, NOTIFY) == {
        "user": "alice", "uid": "uid-1", "groups": ["team-a", "system:authenticated"],
        "extra": {"scopes": ["x"]},
        "resourceAttributes": {"namespace": "ns", "verb": "create", "group": "notifier.x-k8s.io",
                               "version": "v1alpha1", "resource": "pods",
                               "subresource": "notify", "name": "p"},
    }


def test_review_spec_non_resource():
    spec = review_spec(UserInfo("bob"), request_attributes("GET", "/openapi/v2"))
    assert spec == {"user": "bob", "groups": [],
                    "nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"}}


async def test_repeated_requests_within_ttl_make_one_review(authorizer, fake_kube, clock):
    fake_kube.allow = lambda spec: spec["user"] == "alice"
    for _ in range(5):
        assert await authorizer.authorize(ALICE, NOTIFY) == Decision(True, "")
    assert fake_kube.paths() == ["/apis/authorization.k8s.io/v1/subjectaccessreviews"]
    assert fake_kube.reviews[0][1]["kind"] == "SubjectAccessReview"
    c = authorizer.counters
    assert (c.reviews, c.cache_misses, c.cache_hits) == (1, 1, 4)
    clock.now = 9.9
    await authorizer.authorize(ALICE, NOTIFY)
    assert c.reviews == 1
    clock.now = 10.0
    await authorizer.authorize(ALICE, NOTIFY)
    assert c.reviews == 2


async def test_denied_cached_with_its_own_ttl(authorizer, fake_kube, clock):
    bob = UserInfo("bob", groups=["system:authenticated"])
    assert not (await authorizer.authorize(bob, NOTIFY)).allowed
    clock.now = 4.9
    assert not (await authorizer.authorize(bob, NOTIFY)).allowed
    assert authorizer.counters.reviews == 1
    clock.now = 5.0
    await authorizer.authorize(bob, NOTIFY)
    assert authorizer.counters.reviews == 2


async def test_cache_key_is_the_whole_spec(authorizer, fake_kube):
    await authorizer.authorize(ALICE, NOTIFY)
    await authorizer.authorize(UserInfo("alice", "uid-1", ["team-a"], {"scopes": ["x"]}), NOTIFY)
    await authorizer.authorize(ALICE, RequestAttributes(**{**vars(NOTIFY), "name": "q"}))
    assert authorizer.counters.reviews == 3


async def test_errors_fail_closed_and_are_not_cached(authorizer, fake_kube):
    fake_kube.allow = lambda spec: True
    fake_kube.down = True
    with pytest.raises(KubeUnavailable):
        await authorizer.authorize(ALICE, NOTIFY)
    fake_kube.down, fake_kube.error_code = False, 500
    with pytest.raises(KubeRejected):
        await authorizer.authorize(ALICE, NOTIFY)
    fake_kube.error_code = None
    assert (await authorizer.authorize(ALICE, NOTIFY)).allowed
    assert (authorizer.counters.errors, authorizer.counters.reviews) == (2, 3)


async def test_system_masters_need_no_review(authorizer, fake_kube):
    admin = UserInfo("system:kube-aggregator", groups=["system:masters"])
    assert (await authorizer.authorize(admin, NOTIFY)).allowed
    assert fake_kube.reviews == []
    anonymous = UserInfo("system:anonymous", groups=["system:unauthenticated"])
    assert not (await authorizer.authorize(anonymous, request_attributes("GET", "/apis"))).allowed


async def test_denied_answer_overrides_allowed():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"status": {"allowed": True, "denied": True,
                                                    "reason": "conflicting"}})

    kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                      transport=httpx.MockTransport(handler))
    authorizer = SubjectAccessReviewAuthorizer(kube, allowed_ttl=1, denied_ttl=1)
    assert await authorizer.authorize(ALICE, NOTIFY) == Decision(False, "conflicting")
