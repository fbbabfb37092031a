"""Names in the path, checked by the access middleware after authentication and before the
authorizer or the app sees the request: every resource path of the API, hostile names.

The middleware is driven with raw ASGI scopes (an HTTP client would normalise ``..`` and
refuse control characters before sending), as uvicorn builds them: ``path`` percent-decoded,
``raw_path`` as sent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import pytest

from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes, request_attributes
from apiserver.authz.sar import Decision
from apiserver.serving.access import AccessControlMiddleware
from apiserver.serving.path_names import check_path_names

API = "/apis/notifier.x-k8s.io/v1alpha1"
GROUP = "notifier.x-k8s.io"
USER = UserInfo("alice", groups=["system:authenticated"])


@dataclass
class FakeAuthenticator:
    def strip_identity_headers(self, headers: list[tuple[bytes, bytes]]
                               ) -> list[tuple[bytes, bytes]]:
        return list(headers)

    async def authenticate(self, headers: Any, cert_der: bytes | None) -> UserInfo:
        return USER


@dataclass
class FakeAuthorizer:
    asked: list[RequestAttributes] = field(default_factory=list)

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append(attributes)
        return Decision(True, "")


@dataclass
class App:
    paths: list[str] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    asked: list[RequestAttributes]
    reached: list[str]


async def call(method: str, raw_path: str, query: str = "") -> Answer:
    """Send one request with this raw (percent-encoded) path through the middleware."""
    authorizer, app = FakeAuthorizer(), App()
    middleware = AccessControlMiddleware(app, authenticator=FakeAuthenticator(),  # type: ignore[arg-type]
                                         authorizer=authorizer)
    scope = {"type": "http", "method": method, "path": unquote(raw_path),
             "raw_path": raw_path.encode("latin-1"), "query_string": query.encode(),
             "headers": [], "client": ("127.0.0.1", 1), "extensions": {}}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(status, json.loads(body), authorizer.asked, app.paths)


# Every resource path the API serves, with {ns} and {name} to fill in.
RESOURCE_PATHS = [
    ("POST", API + "/namespaces/{ns}/pods/{name}/notify", "pods", ""),
    ("GET", API + "/namespaces/{ns}/podnotifiers/{name}", "podnotifiers", GROUP),
    ("DELETE", API + "/namespaces/{ns}/podnotifiers/{name}", "podnotifiers", GROUP),
    ("GET", API + "/namespaces/{ns}/notifications/{name}", "notifications", GROUP),
    ("DELETE", API + "/namespaces/{ns}/notifications/{name}", "notifications", GROUP),
]
COLLECTION_PATHS = [
    ("GET", API + "/namespaces/{ns}/podnotifiers"),
    ("DELETE", API + "/namespaces/{ns}/podnotifiers"),
    ("GET", API + "/namespaces/{ns}/notifications"),
    ("POST", API + "/namespaces/{ns}/notifications"),
]

HOSTILE_NAMES = [
    # (as sent in the path, as decoded, as the message quotes it)
    ("ss-1%3Fx", "ss-1?x", '"ss-1?x"'),
    ("ss-1%23x", "ss-1#x", '"ss-1#x"'),
    ("ss-1%25", "ss-1%", '"ss-1%"'),
    ("ss-1%3Fwatch%3Dtrue", "ss-1?watch=true", '"ss-1?watch=true"'),
    ("Upper", "Upper", '"Upper"'),
    ("a_b", "a_b", '"a_b"'),
    ("-a", "-a", '"-a"'),
    ("a.", "a.", '"a."'),
    ("a%20b", "a b", '"a b"'),
    ("a%0Ab", "a\nb", '"a\\nb"'),
    ("a%00", "a\x00", '"a\\x00"'),
    ("%1b%5B31m", "\x1b[31m", '"\\x1b[31m"'),
    ("a%22b", 'a"b', '"a\\"b"'),
    ("%C3%A9", "é", '"é"'),
    ("%E2%80%AE", "\u202e", '"\\u202e"'),
    ("x" * 254, "x" * 254, '"' + "x" * 254 + '"'),
]
VALID_NAMES = ["ss-1", "db-7f9c-0", "a", "a.b.c", "1-2", "x" * 253]
DOT_SEGMENTS = ["..", "%2e%2e", "%2E%2E", ".%2e", ".", "%2e", ""]


def fill(path: str, ns: str = "prod", name: str = "ss-1") -> str:
    return path.replace("{ns}", ns).replace("{name}", name)


@pytest.mark.parametrize(("method", "path", "resource", "group"), RESOURCE_PATHS)
@pytest.mark.parametrize(("sent", "decoded", "shown"), HOSTILE_NAMES)
async def test_a_name_no_object_can_have_is_404_before_authorization(
        method: str, path: str, resource: str, group: str, sent: str, decoded: str,
        shown: str) -> None:
    answer = await call(method, fill(path, name=sent))

    assert answer.status == 404
    assert answer.body["reason"] == "NotFound"
    qualified = f"{resource}.{group}" if group else resource
    assert answer.body["message"] == f"{qualified} {shown} not found"
    assert answer.body["details"]["kind"] == resource
    assert answer.asked == [] and answer.reached == []
    # The message holds no raw control character (and no lone surrogate).
    assert all(char.isprintable() for char in answer.body["message"])


@pytest.mark.parametrize(("method", "path", "resource", "group"), RESOURCE_PATHS)
@pytest.mark.parametrize("name", VALID_NAMES)
async def test_a_valid_name_is_authorized_and_served(
        method: str, path: str, resource: str, group: str, name: str) -> None:
    answer = await call(method, fill(path, name=name))

    assert answer.status == 200
    assert [a.name for a in answer.asked] == [name]
    assert answer.reached == [fill(path, name=name)]


@pytest.mark.parametrize(("method", "path"),
                         [(m, p) for m, p, _, _ in RESOURCE_PATHS] + COLLECTION_PATHS)
@pytest.mark.parametrize(("sent", "shown"), [
    ("Prod", '"Prod"'), ("a.b", '"a.b"'), ("a%3Fb", '"a?b"'), ("x" * 64, '"' + "x" * 64 + '"'),
    ("a%0A", '"a\\n"'),
])
async def test_a_namespace_that_cannot_exist_is_404(method: str, path: str, sent: str,
                                                    shown: str) -> None:
    answer = await call(method, fill(path, ns=sent))

    assert answer.status == 404
    assert answer.body["message"] == f"namespaces {shown} not found"
    assert answer.asked == [] and answer.reached == []


def _dot_cases() -> list[tuple[str, str, str, str]]:
    """(method, path, which segment, value): the namespace of every path, and the name of
    every path that has one (an empty trailing name is the collection's own path)."""
    cases = []
    for method, path in [(m, p) for m, p, _, _ in RESOURCE_PATHS] + COLLECTION_PATHS:
        for dots in DOT_SEGMENTS:
            cases.append((method, path, "ns", dots))
            if "{name}" in path and (dots or not path.endswith("{name}")):
                cases.append((method, path, "name", dots))
    return cases


@pytest.mark.parametrize(("method", "path", "where", "dots"), _dot_cases())
async def test_dot_and_empty_segments_are_404(method: str, path: str, where: str,
                                              dots: str) -> None:
    """A Notification in the namespace ``..`` must never list the pods of every namespace;
    a pod ``..`` must never read the namespace with the server's identity."""
    answer = await call(method, fill(path, **{where: dots}))

    assert answer.status == 404, answer.body
    assert answer.body["reason"] == "NotFound"
    assert answer.asked == [] and answer.reached == []


@pytest.mark.parametrize("sent", ["a%2Fb", "%2F", "ss-1%2F..", "pods%2Fss-1"])
async def test_an_encoded_slash_is_404(sent: str) -> None:
    """The router reads the decoded path: ``pods%2Fss-1/notify`` would be authorized as the
    resource ``pods/ss-1`` and routed as pods/notify of ss-1."""
    for raw in (API + f"/namespaces/prod/pods/{sent}/notify",
                API + f"/namespaces/prod/{sent}/notify"):
        answer = await call("POST", raw)
        assert answer.status == 404, (raw, answer.body)
        assert answer.asked == [] and answer.reached == []


async def test_a_selector_name_is_not_a_path_name() -> None:
    """``fieldSelector=metadata.name=<x>`` with a name no object has lists nothing, as in
    kube-apiserver; it is not refused."""
    answer = await call("GET", API + "/namespaces/prod/podnotifiers",
                        "fieldSelector=metadata.name%3DUpper")
    assert answer.status == 200
    assert [(a.verb, a.name) for a in answer.asked] == [("list", "Upper")]


async def test_non_resource_paths_are_not_checked() -> None:
    answer = await call("GET", "/openapi/v2")
    assert answer.status == 200
    assert answer.asked[0].resource_request is False


async def test_check_without_raw_path_still_checks_names() -> None:
    attributes = request_attributes("POST", API + "/namespaces/prod/pods/a?b/notify")
    with pytest.raises(Exception, match=r'pods "a\?b" not found'):
        check_path_names(attributes)


def test_the_encoded_forms_used_here_decode_as_uvicorn_decodes() -> None:
    """The scopes above are what uvicorn builds: it percent-decodes the raw path as UTF-8."""
    assert unquote("%2e%2e") == ".."
    assert quote("ss-1?x", safe="") == "ss-1%3Fx"
