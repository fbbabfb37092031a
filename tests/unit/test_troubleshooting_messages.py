"""Every message docs/troubleshooting.md quotes is one the server produces.

The 401, 403 and 503 answers of its "403 and 401 answers" section are built here by the code
that builds them (the access middleware's denial, the trust rules, the release handler, the
authenticator, the fail-closed answers), with the page's example values; the page quotes
exactly that set. The log messages its tables quote are the authenticator's failures (built by
calling it) or string constants of the source (read with ast, so implicitly joined literals
count as one)."""

from __future__ import annotations

import ast
import re
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from apiserver.api import status
from apiserver.authn.authenticator import AuthenticationFailed, Authenticator
from apiserver.authn.trust import TrustNotReadable, TrustStore, check_readable
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.handlers import podnotifiers
from apiserver.kube import KubeRejected, KubeUnavailable
from apiserver.notifier.declarations import ANNOTATION
from apiserver.notifier.errors import Untrusted
from apiserver.notifier.holds import HoldReleases
from apiserver.notifier.trust import TrustRules
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from certs.authority import issue
from localcluster.layout import REPO_ROOT

PAGE = REPO_ROOT / "docs/troubleshooting.md"
GROUP = "notifier.x-k8s.io"
USER = UserInfo("backup-bot", groups=["system:authenticated"])
NAMESPACE, POD, RECORD = "prod", "db-0", "db-0-lock-x7k2p"
OWNER_UID = "7d1e5c1e-0000-4000-8000-000000000001"


def _section(heading: str) -> str:
    """The page's text from the heading `heading` to the next heading of its level or above."""
    text = PAGE.read_text()
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    following = re.compile(rf"^#{{1,{len(level)}}} ", re.M)
    end = following.search(text, start + len(heading) + 2)
    return text[start:end.start() if end else len(text)]


def quoted_answers() -> set[str]:
    """The messages of the ```text blocks of the answers section."""
    section = _section("## 403 and 401 answers")
    return {block.strip() for block in re.findall(r"```text\n(.*?)```", section, re.S)}


def quoted_log_messages(heading: str) -> list[str]:
    """The code spans of the first cell of each table row (not a header) that starts with one."""
    lines = _section(heading).splitlines()
    spans = []
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if line.startswith("| `") and not following.startswith("|---"):
            spans += re.findall(r"`([^`]+)`", line.split(" | ")[0])
    return spans


class Deny:
    """An authorizer that denies everything, as RBAC does (no reason)."""

    async def authorize(self, user: UserInfo, attributes: Any) -> Decision:
        return Decision(False)


class Unreachable:
    async def authorize(self, user: UserInfo, attributes: Any) -> Decision:
        raise KubeUnavailable("connection refused")


class As:
    """An authenticator that authenticates every request as `user`."""

    def __init__(self, user: UserInfo) -> None:
        self.user = user

    def strip_identity_headers(self, headers: list) -> list:
        return list(headers)

    async def authenticate(self, headers: Any, cert: bytes | None) -> UserInfo:
        return self.user


class Owner:
    """The pod's StatefulSet `db`, with `uid`, the selector app=db and a template declaring
    `declared`."""

    def __init__(self, uid: str, declared: str) -> None:
        self.uid, self.declared = uid, declared

    async def owner(self, group: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "namespace": namespace, "uid": self.uid},
                "spec": {"selector": {"matchLabels": {"app": "db"}},
                         "template": {"metadata": {"annotations": {ANNOTATION: self.declared}}}}}


def _pod(controller_uid: str | None, app: str = "db") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": POD, "namespace": NAMESPACE, "labels": {"app": app},
                                "annotations": {ANNOTATION: '{"db": []}'}}
    if controller_uid is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                        "name": "db", "uid": controller_uid,
                                        "controller": True}]
    return {"metadata": metadata}


async def _untrusted(owner: Owner, pod: dict[str, Any]) -> str:
    decision = await TrustRules(owner, Deny()).decide(USER, pod)
    assert not decision.trusted
    return Untrusted(POD, decision.message).message


async def _answer(app: Any, method: str, path: str) -> str:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://notifier.test") as c:
        return str((await c.request(method, path)).json()["message"])


def _app(authenticator: Any, authorizer: Any, router: APIRouter | None = None) -> Any:
    return create_app(authenticator=authenticator, authorizer=authorizer,
                      readiness=Readiness(), resource_router=router or APIRouter())


async def _release_denied(database: SqliteDatabase) -> str:
    store = SqliteObjectStore(database, PODNOTIFIERS)
    await store.create({
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "PodNotifier",
        "metadata": {"namespace": NAMESPACE, "name": RECORD},
        "spec": {"podName": POD, "notifier": "lock"},
        "status": {"phase": "Held", "maxHoldSeconds": 60,
                   "containers": [{"name": "db", "phase": "Held"}]}})
    router = APIRouter()
    router.include_router(podnotifiers.release_router(store, HoldReleases(store), Deny()))
    allow_request = _AllowOnly("podnotifiers")
    return await _answer(_app(As(USER), allow_request, router), "POST",
                         f"/apis/{GROUP}/v1alpha1/namespaces/{NAMESPACE}/podnotifiers/"
                         f"{RECORD}/release")


class _AllowOnly:
    """Allows requests for `resource` (the access middleware's check), denies the rest."""

    def __init__(self, resource: str) -> None:
        self.resource = resource

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        return Decision(attributes.resource == self.resource)


def _notify(name: str) -> RequestAttributes:
    return RequestAttributes.for_resource("create", group=GROUP, version="v1alpha1",
                                          resource="pods", subresource="notify",
                                          namespace=NAMESPACE, name=name)


async def produced_answers(database: SqliteDatabase) -> set[str]:
    """Each answer the page documents, as the server builds it for the page's examples."""
    api = f"/apis/{GROUP}/v1alpha1"
    template = '{"db": [{"name": "quiesce"}]}'
    return {
        status.forbidden_request(USER.name, _notify(POD)).message,
        status.forbidden_request(USER.name, _notify("")).message,
        await _untrusted(Owner(OWNER_UID, template), _pod(None)),
        await _untrusted(Owner(OWNER_UID, template), _pod(OWNER_UID)),
        await _untrusted(Owner(OWNER_UID, template), _pod("made-up")),
        await _untrusted(Owner(OWNER_UID, template), _pod(OWNER_UID, app="web")),
        await _release_denied(database),
        await _answer(_app(As(USER), Unreachable()), "GET", api),
        status.unauthorized().message,
    }


class _NoTokens:
    """A TokenReviewer that authenticates no token, without asking kube-apiserver."""

    async def review(self, token: str) -> UserInfo | None:
        return None


async def test_every_answer_quoted_is_one_the_server_builds(database: SqliteDatabase) -> None:
    assert quoted_answers() == await produced_answers(database)


def _source_strings() -> set[str]:
    """Every string constant of the server's source (f-strings: their literal parts)."""
    found = set()
    for path in (REPO_ROOT / "apiserver").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


async def _authentication_failures(pki: Any) -> list[str]:
    """What the authenticator says (and the access middleware logs) for each failure."""
    trust = TrustStore()
    trust.update(pki.trust())
    authenticator = Authenticator(trust, _NoTokens())
    server_only = issue(pki.client_ca, "bob", server=True)
    failures = []
    for headers, pair in (([(b"authorization", b"Bearer nope")], None),
                          ([], pki.stranger), ([], server_only),
                          ([(b"x-remote-user", b"x")], pki.front_proxy_wrong_cn)):
        with pytest.raises(AuthenticationFailed) as failed:
            await authenticator.authenticate(headers, pki.der(pair) if pair else None)
        failures.append(str(failed.value))
    expired = Authenticator(trust, _NoTokens(),
                            clock=lambda: pki.alice.cert.not_valid_after_utc.replace(
                                year=pki.alice.cert.not_valid_after_utc.year + 1))
    with pytest.raises(AuthenticationFailed) as failed:
        await expired.authenticate([], pki.der(pki.alice))
    return [*failures, str(failed.value)]


async def test_every_authentication_failure_quoted_is_one_the_authenticator_logs(
        pki: Any) -> None:
    failures = await _authentication_failures(pki)
    quoted = quoted_log_messages("### Credentials that do not authenticate")
    assert quoted
    for span in quoted:
        assert any(span in failure for failure in failures), (span, failures)


class _Refusing:
    """A kube client that kube-apiserver answers 403 for the trust ConfigMap."""

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        raise KubeRejected(403, {"reason": "Forbidden", "message": "configmaps is forbidden"})


async def test_every_trust_problem_quoted_is_one_the_server_logs_or_answers() -> None:
    with pytest.raises(TrustNotReadable) as refused:
        await check_readable(_Refusing())  # type: ignore[arg-type]
    not_loaded = await _answer(_app(Authenticator(TrustStore(), _NoTokens()), Deny()), "GET",
                               f"/apis/{GROUP}/v1alpha1")
    known = [*_source_strings(), str(refused.value), not_loaded]
    quoted = quoted_log_messages("## Trust material")
    assert len(quoted) >= 6
    for span in quoted:
        assert any(span in text for text in known), span
