from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest
from fastapi import APIRouter, Request

from apiserver.api.routes import POD_NOTIFY_PATH
from apiserver.authn.authenticator import Authenticator
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustStore
from apiserver.authz.sar import SubjectAccessReviewAuthorizer
from apiserver.handlers.caller import CurrentUser
from apiserver.kube import KubeUnavailable
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness

API = "/apis/notifier.x-k8s.io/v1alpha1"
NOTIFY = f"{API}/namespaces/ns/pods/p1/notify"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN = {"authorization": "Bearer good"}


@dataclass
class Server:
    app: object
    store: TrustStore
    authorizer: SubjectAccessReviewAuthorizer
    ready: dict
    body_reads: list
    cert: bytes | None = None

    def client(self, cert: bytes | None = None) -> httpx.AsyncClient:
        """A client whose requests arrive as if over TLS with `cert` as the client cert."""

        async def app(scope, receive, send):
            scope["extensions"] = {"tls": {"client_cert_der": cert}}

            async def tracked_receive():
                self.body_reads.append(scope["path"])
                return await receive()

            await self.app(scope, tracked_receive, send)

        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="https://notifier.test")


def probe_router() -> APIRouter:
    router = APIRouter()

    @router.post(f"{API}/namespaces/{{namespace}}/pods/{{pod}}/notify")
    async def echo(request: Request, user: CurrentUser) -> dict:
        body = await request.json()
        return {"user": user.name, "groups": user.groups, "body": body,
                "headers": sorted(request.headers.keys())}

    @router.get(f"{API}/namespaces/{{namespace}}/podnotifiers")
    async def typed(limit: int) -> dict:
        return {"limit": limit}

    @router.get(f"{API}/namespaces/{{namespace}}/podnotifiers/boom")
    async def boom() -> None:
        raise RuntimeError("secret detail 42")

    @router.get(f"{API}/namespaces/{{namespace}}/podnotifiers/kube-down")
    async def kube_down() -> None:
        raise KubeUnavailable("connection refused")

    return router


@pytest.fixture
def make_server(pki, fake_kube):
    fake_kube.tokens["good"] = {"username": "carol", "groups": ["team-c"]}

    def make(router: APIRouter | None = None, loaded: bool = True) -> Server:
        kube = fake_kube.client()
        store = TrustStore()
        if loaded:
            store.update(pki.trust())
        authorizer = SubjectAccessReviewAuthorizer(kube, allowed_ttl=10, denied_ttl=10)
        ready = {"trust-material": True, "kube-apiserver": False}
        readiness = Readiness()
        for name in ready:
            readiness.add(name, lambda name=name: ready[name])
        app = create_app(authenticator=Authenticator(store, TokenReviewer(kube, 10)),
                         authorizer=authorizer, readiness=readiness,
                         resource_router=router or APIRouter())
        return Server(app, store, authorizer, ready, [])

    return make


def assert_status(response: httpx.Response, code: int, reason: str) -> dict:
    assert response.status_code == code
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert {k: body[k] for k in ("kind", "apiVersion", "status", "code", "reason")} == {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "reason": reason}
    return body


async def test_anonymous_is_reviewed_and_forbidden(make_server, fake_kube):
    server = make_server()
    async with server.client() as client:
        response = await client.get(API)
    body = assert_status(response, 403, "Forbidden")
    assert body["message"] == (
        f'forbidden: User "system:anonymous" cannot get path "{API}"')
    [(path, review)] = fake_kube.reviews
    assert path == SAR
    assert review["spec"]["user"] == "system:anonymous"
    assert review["spec"]["groups"] == ["system:unauthenticated"]


async def test_denied_notify_is_403_before_the_body_is_read(make_server, fake_kube):
    server = make_server()
    async with server.client() as client:
        response = await client.post(NOTIFY, headers=TOKEN, json={"spec": {"notifier": "x"}})
    body = assert_status(response, 403, "Forbidden")
    assert body["message"] == (
        'pods.notifier.x-k8s.io "p1" is forbidden: User "carol" cannot create resource '
        '"pods/notify" in API group "notifier.x-k8s.io" in the namespace "ns"')
    assert body["details"] == {"name": "p1", "group": "notifier.x-k8s.io", "kind": "pods"}
    assert server.body_reads == []
    sar = fake_kube.reviews[-1][1]["spec"]
    assert sar["groups"] == ["team-c", "system:authenticated"]


async def test_allowed_notify_reaches_the_handler_as_the_caller(make_server, fake_kube):
    fake_kube.allow = lambda spec: spec["user"] == "carol"
    router = APIRouter()

    @router.post(POD_NOTIFY_PATH)
    async def handler(user: CurrentUser) -> dict:
        return {"user": user.name, "groups": user.groups}

    server = make_server(router)
    async with server.client() as client:
        response = await client.post(NOTIFY, headers=TOKEN, json={})
    assert response.status_code == 200
    assert response.json() == {"user": "carol", "groups": ["team-c", "system:authenticated"]}


async def test_repeated_requests_make_one_review(make_server, fake_kube):
    fake_kube.allow = lambda spec: True
    server = make_server()
    async with server.client() as client:
        for _ in range(3):
            assert (await client.get(API, headers=TOKEN)).status_code == 200
    assert fake_kube.paths().count(SAR) == 1
    assert server.authorizer.counters.cache_hits == 2


async def test_handler_gets_user_and_no_identity_headers(make_server, pki, fake_kube):
    server = make_server(probe_router())
    headers = {"x-remote-user": "bob", "x-remote-group": "system:masters",
               "x-remote-extra-scope": "s"}
    async with server.client(pki.der(pki.front_proxy)) as client:
        response = await client.post(NOTIFY, headers=headers, json={"a": 1})
    assert response.status_code == 200
    assert response.json() == {
        "user": "bob", "groups": ["system:masters", "system:authenticated"], "body": {"a": 1},
        "headers": ["accept", "accept-encoding", "connection", "content-length",
                    "content-type", "host", "user-agent"]}
    assert fake_kube.reviews == []  # system:masters: no review


async def test_forged_headers_without_proxy_cert_are_ignored(make_server, fake_kube):
    server = make_server(probe_router())
    async with server.client() as client:
        response = await client.post(NOTIFY, headers={"x-remote-user": "admin",
                                                      "x-remote-group": "system:masters"})
    assert_status(response, 403, "Forbidden")
    assert 'User "system:anonymous"' in response.json()["message"]


async def test_bad_token_is_401(make_server):
    server = make_server()
    async with server.client() as client:
        response = await client.get(API, headers={"authorization": "Bearer bad"})
    assert assert_status(response, 401, "Unauthorized")["message"] == "Unauthorized"


async def test_kube_unreachable_fails_closed(make_server, fake_kube):
    server = make_server()
    fake_kube.down = True
    async with server.client() as client:
        with_token = await client.post(NOTIFY, headers=TOKEN, json={})
        anonymous = await client.get(API)
    assert "kube-apiserver is unavailable" in assert_status(
        with_token, 503, "ServiceUnavailable")["message"]
    assert_status(anonymous, 503, "ServiceUnavailable")


async def test_review_error_is_500(make_server, fake_kube):
    server = make_server()
    fake_kube.error_code = 403
    async with server.client() as client:
        response = await client.get(API)
    assert "SubjectAccessReview failed" in assert_status(response, 500, "InternalError")[
        "message"]


async def test_trust_not_loaded_is_503(make_server):
    server = make_server(loaded=False)
    async with server.client() as client:
        response = await client.get(API)
    assert "not been loaded" in assert_status(response, 503, "ServiceUnavailable")["message"]


async def test_routing_and_validation_errors_are_status(make_server, pki):
    server = make_server(probe_router())
    async with server.client(pki.der(pki.front_proxy)) as client:
        headers = {"x-remote-user": "admin", "x-remote-group": "system:masters"}
        unknown = await client.get(f"{API}/namespaces/ns/foos", headers=headers)
        wrong_method = await client.put(NOTIFY, headers=headers)
        invalid = await client.get(f"{API}/namespaces/ns/podnotifiers?limit=x", headers=headers)
        boom = await client.get(f"{API}/namespaces/ns/podnotifiers/boom", headers=headers)
        kube_down = await client.get(f"{API}/namespaces/ns/podnotifiers/kube-down",
                                     headers=headers)
        slash = await client.get(f"{API}/", headers=headers)
    assert assert_status(unknown, 404, "NotFound")["message"] == (
        "the server could not find the requested resource")
    assert_status(wrong_method, 405, "MethodNotAllowed")
    assert wrong_method.headers["allow"] == "POST"
    assert "limit" in assert_status(invalid, 400, "BadRequest")["message"]
    assert "secret detail" not in assert_status(boom, 500, "InternalError")["message"]
    assert_status(kube_down, 503, "ServiceUnavailable")
    assert_status(slash, 404, "NotFound")


async def test_health_needs_no_credentials_and_no_kube(make_server, fake_kube):
    server = make_server()
    fake_kube.down = True
    async with server.client() as client:
        for path in ("/healthz", "/livez"):
            response = await client.get(path)
            assert (response.status_code, response.text) == (200, "ok")
            assert response.headers["content-type"].startswith("text/plain")
        not_ready = await client.get("/readyz")
        server.ready["kube-apiserver"] = True
        ready = await client.get("/readyz")
        verbose = await client.get("/readyz?verbose")
    assert not_ready.status_code == 500
    assert not_ready.text == ("[+]ping ok\n[+]trust-material ok\n"
                              "[-]kube-apiserver failed: reason withheld\nreadyz check failed\n")
    assert (ready.status_code, ready.text) == (200, "ok")
    assert verbose.text.endswith("readyz check passed\n")
    assert fake_kube.reviews == []


async def test_websocket_scope_is_refused(make_server):
    server = make_server()
    sent = []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    await server.app({"type": "websocket", "path": "/apis", "headers": [],
                      "query_string": b""}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}]


async def test_discovery_and_openapi_served(make_server, fake_kube):
    fake_kube.allow = lambda spec: True
    server = make_server()
    v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    async with server.client() as client:
        resources = await client.get(API)
        group = await client.get("/apis/notifier.x-k8s.io")
        groups = await client.get("/apis")
        aggregated = await client.get("/apis", headers={"accept": f"{v2},application/json"})
        refused = await client.get("/apis", headers={"accept": "application/yaml"})
        swagger = await client.get("/openapi/v2")
        cached = await client.get("/openapi/v2",
                                  headers={"if-none-match": swagger.headers["etag"]})
        protobuf_only = await client.get("/openapi/v2", headers={
            "accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
        v3 = await client.get("/openapi/v3")
        url = v3.json()["paths"]["apis/notifier.x-k8s.io/v1alpha1"]["serverRelativeURL"]
        document = await client.get(url)
    assert resources.json()["kind"] == "APIResourceList"
    assert group.json()["kind"] == "APIGroup"
    assert groups.json()["kind"] == "APIGroupList"
    assert aggregated.headers["content-type"] == v2
    assert aggregated.json()["kind"] == "APIGroupDiscoveryList"
    assert_status(refused, 406, "NotAcceptable")
    assert swagger.json()["swagger"] == "2.0"
    assert cached.status_code == 304
    assert_status(protobuf_only, 406, "NotAcceptable")
    assert document.json()["openapi"] == "3.0.0"
    assert document.headers["cache-control"] == "public, immutable"
