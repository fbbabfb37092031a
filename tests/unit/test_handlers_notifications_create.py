"""Creating a Notification that would notify nothing is refused (issue 11, "no silent no-op"):
an empty PreExistingPods scope, or a scope in which no pod declares the notifier, is a 422 that
says what the selected pods declare, and nothing is stored or begun. A scope in which some pod
declares it is created; an empty AllPods scope is created with WaitingForPods True."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from apiserver.handlers import notifications
from apiserver.handlers.watch_response import Watches
from apiserver.notifier.declarations import ANNOTATION
from apiserver.registry.resources import NOTIFICATIONS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll

PATH = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/prod/notifications"
DB_NOTIFIERS = {"db": [{"name": "quiesce", "action": {"exec": {"command": ["true"]}}},
                       {"name": "unquiesce", "action": {"signal": "SIGHUP"}}]}


def pod(name: str, labels: dict[str, str], declared: dict[str, Any] | None = None,
        terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "prod", "name": name, "uid": f"uid-{name}",
                            "labels": labels}
    if declared is not None:
        meta["annotations"] = {ANNOTATION: json.dumps(declared)}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@dataclass
class Pods:
    """kube-apiserver's pod list: the pods whose labels include the selector's (matchLabels
    only, enough here); records each selector asked."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        assert path == "/api/v1/namespaces/prod/pods"
        selector = (params or {}).get("labelSelector", "")
        self.asked.append(selector)
        wanted = dict(part.split("=") for part in selector.split(",") if part)
        return {"items": [p for p in self.pods
                          if wanted.items() <= p["metadata"]["labels"].items()],
                "metadata": {}}


@dataclass
class Fanout:
    begun: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)

    async def begin(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        self.begun.append((notification["metadata"]["name"], pods))

    async def deleted(self, uid: str) -> None:
        pass


@dataclass
class Served:
    client: httpx.AsyncClient
    store: SqliteObjectStore
    kube: Pods
    fanout: Fanout

    async def create(self, notifier: str, selector: dict[str, str], query: str = "",
                     **spec: Any) -> httpx.Response:
        return await self.client.post(f"{PATH}{query}", json={
            "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "snap"},
            "spec": {"selector": {"matchLabels": selector}, "notifier": notifier, **spec}})

    async def stored(self) -> list[dict[str, Any]]:
        return (await self.store.list("prod")).items


@pytest.fixture
async def served(database: SqliteDatabase) -> AsyncIterator[Served]:
    store, kube, fanout, access = SqliteObjectStore(database, NOTIFICATIONS), Pods(), Fanout(), (
        AllowAll())
    router = APIRouter()
    router.include_router(notifications.router(  # type: ignore[arg-type]
        store, fanout, kube, access, Watches(), max_parallelism=10, max_timeout_seconds=60,
        max_hold_seconds=3600))
    app = create_app(authenticator=access, authorizer=access,  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://notifier.test") as client:
        yield Served(client, store, kube, fanout)


def only_cause(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 422, answer.text
    status = answer.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    assert status["details"]["name"] == "snap"
    (cause,) = status["details"]["causes"]
    assert status["message"] == (f'Notification.notifier.x-k8s.io "snap" is invalid: '
                                 f"{cause['field']}: {cause['message']}")
    return cause


async def test_a_misspelled_notifier_is_refused_naming_what_is_declared(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS),
                        pod("db-1", {"app": "db"}, {"db": [
                            {"name": "flush", "action": {"signal": "SIGUSR1"}}]})]
    cause = only_cause(await served.create("quiesse", {"app": "db"}))
    assert cause == {
        "reason": "FieldValueInvalid", "field": "spec.notifier",
        "message": 'Invalid value: "quiesse": no pod selected by app=db declares it; they '
                   f"declare: flush, quiesce, unquiesce (in their {ANNOTATION} annotation)"}
    assert await served.stored() == []
    assert served.fanout.begun == []


async def test_pods_that_declare_nothing_are_said_to(served: Served) -> None:
    served.kube.pods = [pod("web-0", {"app": "web"})]
    cause = only_cause(await served.create("quiesce", {"app": "web"}, policy="AllPods"))
    assert cause["field"] == "spec.notifier"
    assert "they declare no notifier" in cause["message"]
    assert await served.stored() == []


async def test_a_selector_that_matches_nothing_is_refused(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    cause = only_cause(await served.create("quiesce", {"app": "dbb"}))
    assert cause["field"] == "spec.selector"
    assert cause["message"].startswith(
        'Invalid value: "app=dbb": selects no pod in namespace "prod"')
    assert "policy AllPods" in cause["message"]
    assert served.kube.asked == ["app=dbb"]
    assert await served.stored() == []
    assert served.fanout.begun == []


async def test_terminating_pods_do_not_make_a_scope(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS, terminating=True)]
    assert only_cause(await served.create("quiesce", {"app": "db"}))["field"] == "spec.selector"


async def test_a_dry_run_is_refused_alike(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    cause = only_cause(await served.create("quiesse", {"app": "db"}, query="?dryRun=All"))
    assert cause["field"] == "spec.notifier"


async def test_a_dry_run_makes_the_stores_checks_too(served: Served) -> None:
    """The size cap and a taken name: 413 and 409 for a dry run as for the create."""
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS)]
    labels = {f"label-{i:04}": "v" * 63 for i in range(3600)}  # about 280 KB

    async def big(query: str) -> httpx.Response:
        return await served.client.post(f"{PATH}{query}", json={
            "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "big", "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "quiesce"}})

    dry, real = await big("?dryRun=All"), await big("")
    assert (dry.status_code, real.status_code) == (413, 413)
    assert dry.json() == real.json()
    assert dry.json()["message"].startswith(
        'notifications.notifier.x-k8s.io "big" is too large: ')
    assert (await served.create("quiesce", {"app": "db"})).status_code == 201
    taken = await served.create("quiesce", {"app": "db"}, query="?dryRun=All")
    assert taken.status_code == 409 and taken.json()["reason"] == "AlreadyExists", taken.text
    assert [obj["metadata"]["name"] for obj in await served.stored()] == ["snap"]
    assert [name for name, _ in served.fanout.begun] == ["snap"]


async def test_a_scope_where_some_pod_declares_it_is_created_whole(served: Served) -> None:
    served.kube.pods = [pod("db-0", {"app": "db"}, DB_NOTIFIERS), pod("cache", {"app": "db"})]
    answer = await served.create("quiesce", {"app": "db"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["status"]["counts"]["total"] == 2
    assert "conditions" not in answer.json()["status"]
    assert served.fanout.begun == [("snap", [("db-0", "uid-db-0"), ("cache", "uid-cache")])]
    assert len(await served.stored()) == 1


async def test_a_declaration_that_does_not_validate_still_counts(served: Served) -> None:
    """It names the notifier: the pod's run fails loudly (InvalidDeclaration), not silently."""
    served.kube.pods = [pod("db-0", {"app": "db"}, {"db": [{"name": "quiesce"}]})]
    assert (await served.create("quiesce", {"app": "db"})).status_code == 201


async def test_an_empty_all_pods_start_is_created_waiting(served: Served) -> None:
    answer = await served.create("quiesce", {"app": "db"}, policy="AllPods")
    assert answer.status_code == 201, answer.text
    (condition,) = answer.json()["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "WaitingForPods", "True", "NoPodsSelected")
    assert condition["message"] == ('no pod in namespace "prod" matches app=db yet; pods are '
                                    "notified as they start running")
    (stored,) = await served.stored()
    assert stored["status"]["conditions"] == [condition]
    assert served.fanout.begun == [("snap", [])]
