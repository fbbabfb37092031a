"""PATCH on podnotifiers and notifications through the real app on a real SQLite store:
patch types, immutability, preconditions, dry run, server-side apply (managed fields,
conflicts, apply-create with its authorization), and the 405s that say what to do instead."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from apiserver import errors
from apiserver.api.patch import PatchType
from apiserver.authn.user import UserInfo
from apiserver.authz.attributes import RequestAttributes
from apiserver.authz.sar import Decision
from apiserver.handlers import notifications, podnotifiers
from apiserver.handlers.body import MAX_BODY_BYTES
from apiserver.handlers.patch import Patch, PatchOptions, decided
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.store import Object, ObjectStore
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness

API = "/apis/notifier.x-k8s.io/v1alpha1"
RECORDS = f"{API}/namespaces/ns/podnotifiers"
NOTIFICATIONS_PATH = f"{API}/namespaces/ns/notifications"
MERGE = {"content-type": "application/merge-patch+json"}
JSON_PATCH = {"content-type": "application/json-patch+json"}
STRATEGIC = {"content-type": "application/strategic-merge-patch+json"}
APPLY = {"content-type": "application/apply-patch+yaml"}


class Access:
    """Allows everything except the (verb, resource) pairs in ``denied``; records each ask."""

    def __init__(self) -> None:
        self.denied: set[tuple[str, str]] = set()
        self.asked: list[RequestAttributes] = []

    def strip_identity_headers(self, headers: list) -> list:
        return list(headers)

    async def authenticate(self, headers: Any, cert: bytes | None) -> UserInfo:
        return UserInfo("alice", uid="u-alice", groups=["system:authenticated"])

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append(attributes)
        resource = "/".join(filter(None, (attributes.resource, attributes.subresource)))
        return Decision((attributes.verb, resource) not in self.denied, "no RBAC rule")


class OnePod:
    """The pod list of kube-apiserver: one pod, which declares quiesce."""

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        return {"items": [{"metadata": {"name": "db-0", "uid": "uid-db-0", "annotations": {
            "notifier.x-k8s.io/notifiers": '{"db": [{"name": "quiesce", "action": '
                                           '{"signal": "SIGHUP"}}]}'}}}], "metadata": {}}


class Fanout:
    def __init__(self) -> None:
        self.begun: list[str] = []

    async def begin(self, notification: dict[str, Any], pods: list) -> None:
        self.begun.append(notification["metadata"]["name"])

    async def deleted(self, uid: str) -> None:
        pass


def record(name: str = "r1") -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "metadata": {"namespace": "ns", "name": name,
                         "labels": {"notifier.x-k8s.io/pod": "web-0"}},
            "spec": {"podName": "web-0", "notifier": "quiesce"},
            "status": {"phase": "Succeeded"}}


NOTIFICATION_YAML = """\
apiVersion: notifier.x-k8s.io/v1alpha1
kind: Notification
metadata:
  name: n1
  labels:
    team: a
  annotations:
    note: first
spec:
  selector:
    matchLabels:
      app: db
  notifier: quiesce
"""


@pytest.fixture
def records(database: SqliteDatabase) -> SqliteObjectStore:
    return SqliteObjectStore(database, PODNOTIFIERS)


@pytest.fixture
def stored_notifications(database: SqliteDatabase) -> SqliteObjectStore:
    return SqliteObjectStore(database, NOTIFICATIONS)


@pytest.fixture
def access() -> Access:
    return Access()


@pytest.fixture
def fanout() -> Fanout:
    return Fanout()


@contextlib.asynccontextmanager
async def serving(records: ObjectStore, stored_notifications: ObjectStore, access: Access,
                  fanout: Fanout) -> AsyncIterator[httpx.AsyncClient]:
    router = APIRouter()
    router.include_router(podnotifiers.router(records, Watches()))
    router.include_router(notifications.router(
        stored_notifications, fanout, OnePod(), access, Watches(),  # type: ignore[arg-type]
        max_parallelism=10, max_timeout_seconds=60, max_hold_seconds=3600))
    app: FastAPI = create_app(authenticator=access, authorizer=access,  # type: ignore[arg-type]
                              readiness=Readiness(), resource_router=router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://notifier.test") as c:
        yield c


@pytest.fixture
async def client(records: SqliteObjectStore, stored_notifications: SqliteObjectStore,
                 access: Access, fanout: Fanout) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(records, stored_notifications, access, fanout) as c:
        yield c


@pytest.fixture
async def stored(records: SqliteObjectStore) -> dict[str, Any]:
    return await records.create(record())


async def patch(client: httpx.AsyncClient, body: Any, headers: dict[str, str],
                path: str = f"{RECORDS}/r1", **params: str) -> httpx.Response:
    content = body if isinstance(body, str | bytes) else json.dumps(body)
    return await client.patch(path, content=content, headers=headers, params=params)


def status_of(response: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == reason and body["code"] == code
    return body


async def test_merge_patch_sets_labels_and_records_the_manager(client, stored, records):
    response = await patch(client, {"metadata": {"labels": {"tier": "db"},
                                                 "annotations": {"note": "x"}}}, MERGE,
                           fieldManager="kubectl-label")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "PodNotifier"
    assert body["metadata"]["labels"] == {"notifier.x-k8s.io/pod": "web-0", "tier": "db"}
    assert body["metadata"]["annotations"] == {"note": "x"}
    assert int(body["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    (entry,) = body["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl-label" and entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:metadata": {"f:annotations": {"f:note": {}},
                                                "f:labels": {"f:tier": {}}}}
    assert await records.get("ns", "r1") == body


async def test_the_default_manager_is_the_user_agent_product(client, stored):
    response = await client.patch(f"{RECORDS}/r1", headers={**MERGE, "user-agent": "curl/8.0"},
                                  content=json.dumps({"metadata": {"labels": {"a": "b"}}}))
    assert response.json()["metadata"]["managedFields"][0]["manager"] == "curl"


async def test_json_patch_and_strategic_merge_patch(client, stored):
    response = await patch(client, [{"op": "add", "path": "/metadata/annotations",
                                     "value": {"a": "1"}},
                                    {"op": "test", "path": "/spec/notifier",
                                     "value": "quiesce"}], JSON_PATCH)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["annotations"] == {"a": "1"}
    response = await patch(client, {"metadata": {"labels": {"b": "2"},
                                                 "$setElementOrder/finalizers": []}}, STRATEGIC)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"]["b"] == "2"


async def test_a_failed_json_patch_test_is_422_and_changes_nothing(client, stored, records):
    response = await patch(client, [{"op": "add", "path": "/metadata/labels/x", "value": "1"},
                                    {"op": "test", "path": "/spec/notifier", "value": "reload"}],
                           JSON_PATCH)
    assert "test failed" in status_of(response, 422, "Invalid")["message"]
    assert await records.get("ns", "r1") == stored


@pytest.mark.parametrize(("body", "field"), [
    ({"spec": {"notifier": "reload"}}, "spec.notifier"),
    ({"status": {"phase": "Failed"}}, "status.phase"),
    ({"metadata": {"finalizers": ["x"]}}, "metadata.finalizers"),
    ({"metadata": {"labels": {"notifier.x-k8s.io/pod": "web-1"}}},
     "metadata.labels[notifier.x-k8s.io/pod]"),
])
async def test_other_fields_are_immutable_naming_the_field(client, stored, records, body, field):
    status = status_of(await patch(client, body, MERGE), 422, "Invalid")
    assert [cause["field"] for cause in status["details"]["causes"]] == [field]
    assert status["details"]["name"] == "r1" and status["details"]["kind"] == "PodNotifier"
    assert await records.get("ns", "r1") == stored


async def test_resource_version_in_the_patch_is_a_precondition(client, stored, records):
    version = stored["metadata"]["resourceVersion"]
    stale = {"metadata": {"resourceVersion": str(int(version) - 1), "labels": {"a": "1"}}}
    status = status_of(await patch(client, stale, MERGE), 409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert await records.get("ns", "r1") == stored
    fresh = {"metadata": {"resourceVersion": version, "labels": {"a": "1"}}}
    response = await patch(client, fresh, MERGE)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["resourceVersion"] != version
    status = status_of(await patch(client, {"metadata": {"uid": "other"}}, MERGE), 409,
                       "Conflict")
    assert "Precondition failed: UID" in status["message"]


async def test_dry_run_answers_the_result_and_stores_nothing(client, stored, records):
    response = await patch(client, {"metadata": {"labels": {"a": "1"}}}, MERGE, dryRun="All")
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"]["a"] == "1"
    assert await records.get("ns", "r1") == stored
    status = status_of(await patch(client, {}, MERGE, dryRun="Some"), 422, "Invalid")
    assert 'supported values: "All"' in status["message"]


async def test_an_unchanged_object_is_not_written(client, stored):
    response = await patch(client, {"metadata": {"labels": {"notifier.x-k8s.io/pod": "web-0"}}},
                           MERGE)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


async def test_a_missing_object_is_404(client):
    status = status_of(await patch(client, {"metadata": {"labels": {"a": "1"}}}, MERGE), 404,
                       "NotFound")
    assert status["message"] == 'podnotifiers.notifier.x-k8s.io "r1" not found'


async def test_unsupported_media_types_are_415_listing_the_supported(client, stored):
    status = status_of(await patch(client, {}, {"content-type": "application/json"}), 415,
                       "UnsupportedMediaType")
    for media_type in ("application/json-patch+json", "application/merge-patch+json",
                       "application/strategic-merge-patch+json", "application/apply-patch+yaml"):
        assert media_type in status["message"]


async def test_a_large_body_is_413(client, stored):
    body = {"metadata": {"annotations": {"a": "x" * MAX_BODY_BYTES}}}
    status_of(await patch(client, body, MERGE), 413, "RequestEntityTooLarge")


async def test_patch_options_are_checked(client, stored):
    status = status_of(await patch(client, "kind: PodNotifier", APPLY), 422, "Invalid")
    assert status["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                                 "Required value: is required for apply patch")
    assert status["details"] == {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
        {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
         "field": "fieldManager"}]}
    status = status_of(await patch(client, {}, MERGE, force="true"), 422, "Invalid")
    assert "force: Forbidden: may not be specified for non-apply patch" in status["message"]


def applied(labels: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
                       "metadata": {"name": "r1", "labels": labels},
                       "spec": {"notifier": "quiesce"}})


async def test_server_side_apply_owns_removes_and_conflicts(client, stored):
    response = await patch(client, applied({"a": "1", "b": "2"}), APPLY, fieldManager="me")
    assert response.status_code == 200, response.text
    meta = response.json()["metadata"]
    assert meta["labels"] == {"notifier.x-k8s.io/pod": "web-0", "a": "1", "b": "2"}
    (entry,) = meta["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("me", "Apply")
    response = await patch(client, applied({"a": "1"}), APPLY, fieldManager="me")
    assert response.json()["metadata"]["labels"] == {"notifier.x-k8s.io/pod": "web-0", "a": "1"}
    await patch(client, {"metadata": {"labels": {"a": "9"}}}, MERGE, fieldManager="kubectl-label")
    status = status_of(await patch(client, applied({"a": "1"}), APPLY, fieldManager="me"), 409,
                       "Conflict")
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                            "message": 'conflict with "kubectl-label" using '
                                                       "notifier.x-k8s.io/v1alpha1",
                                            "field": ".metadata.labels.a"}]
    response = await patch(client, applied({"a": "1"}), APPLY, fieldManager="me", force="true")
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"]["a"] == "1"


async def test_apply_cannot_change_the_spec(client, stored):
    body = applied({}).replace('"quiesce"', '"reload"')
    status = status_of(await patch(client, body, APPLY, fieldManager="me"), 422, "Invalid")
    assert [cause["field"] for cause in status["details"]["causes"]] == ["spec.notifier"]


@pytest.mark.parametrize(("config", "wording"), [
    ({"apiVersion": "v1", "kind": "PodNotifier"}, "must be a PodNotifier"),
    ({"metadata": {"name": "other"}}, "does not match the name on the URL"),
    ({"metadata": {"namespace": "other"}}, "does not match the namespace"),
    ({"metadata": {"managedFields": []}}, "managedFields must be nil"),
])
async def test_apply_configurations_must_name_this_object(client, stored, config, wording):
    body = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier", **config}
    status = status_of(await patch(client, body, APPLY, fieldManager="me"), 400, "BadRequest")
    assert wording in status["message"]


async def test_apply_of_a_missing_record_is_405_saying_how_records_are_made(client):
    status = status_of(await patch(client, applied({}), APPLY, fieldManager="me"), 405,
                       "MethodNotAllowed")
    assert "/pods/POD/notify" in status["message"]


async def test_post_and_put_are_405_saying_what_to_do(client, stored):
    status = status_of(await client.post(RECORDS, json=record("r2")), 405, "MethodNotAllowed")
    assert "created by running a notifier" in status["message"]
    assert "kubectl notify POD NOTIFIER" in status["message"]
    for path in (f"{RECORDS}/r1", f"{NOTIFICATIONS_PATH}/n1"):
        status = status_of(await client.put(path, json=record()), 405, "MethodNotAllowed")
        assert "PUT (update) is not served" in status["message"]
        assert "kubectl label" in status["message"]


async def test_apply_creates_a_missing_notification_through_create(client, access, fanout,
                                                                   stored_notifications):
    response = await patch(client, NOTIFICATION_YAML, APPLY, f"{NOTIFICATIONS_PATH}/n1",
                           fieldManager="kubectl")
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["spec"]["requestedBy"]["username"] == "alice"
    assert created["metadata"]["labels"] == {"team": "a"}
    assert created["metadata"]["annotations"] == {"note": "first"}
    (entry,) = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert entry["fieldsV1"] == {"f:metadata": {"f:annotations": {"f:note": {}},
                                                "f:labels": {"f:team": {}}}}
    assert fanout.begun == ["n1"]
    asked = [(a.verb, a.resource, a.subresource) for a in access.asked]
    assert asked == [("patch", "notifications", ""), ("create", "notifications", ""),
                     ("create", "pods", "notify")]
    # The same configuration again changes nothing.
    again = await patch(client, NOTIFICATION_YAML, APPLY, f"{NOTIFICATIONS_PATH}/n1",
                        fieldManager="kubectl")
    assert again.status_code == 200, again.text
    assert again.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert await stored_notifications.get("ns", "n1") == created


async def test_apply_create_needs_create_permission(client, access, stored_notifications):
    access.denied.add(("create", "notifications"))
    status = status_of(await patch(client, NOTIFICATION_YAML, APPLY, f"{NOTIFICATIONS_PATH}/n1",
                                   fieldManager="kubectl"), 403, "Forbidden")
    assert 'User "alice" cannot create resource "notifications"' in status["message"]
    assert (await stored_notifications.list("ns")).items == []


async def test_apply_create_dry_run_stores_nothing(client, fanout, stored_notifications):
    response = await patch(client, NOTIFICATION_YAML, APPLY, f"{NOTIFICATIONS_PATH}/n1",
                           fieldManager="kubectl", dryRun="All")
    assert response.status_code == 201, response.text
    assert response.json()["metadata"]["name"] == "n1"
    assert fanout.begun == []
    assert (await stored_notifications.list("ns")).items == []


async def test_merge_patch_of_a_missing_notification_is_404(client):
    status_of(await patch(client, {"metadata": {"labels": {"a": "b"}}}, MERGE,
                          f"{NOTIFICATIONS_PATH}/n1"), 404, "NotFound")


async def test_cleared_server_fields_are_kept_and_nulls_in_apply_mean_not_given(client, stored):
    response = await patch(client, {"metadata": {"creationTimestamp": None,
                                                 "labels": {"a": "1"}}}, MERGE)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["creationTimestamp"] == stored["metadata"][
        "creationTimestamp"]
    body = json.loads(applied({"b": "2"}))
    body["metadata"]["creationTimestamp"] = None
    body["status"] = None
    response = await patch(client, json.dumps(body), APPLY, fieldManager="me")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == stored["status"]
    changed = {"metadata": {"creationTimestamp": "2000-01-01T00:00:00Z"}}
    status = status_of(await patch(client, changed, MERGE), 422, "Invalid")
    assert [cause["field"] for cause in status["details"]["causes"]] == [
        "metadata.creationTimestamp"]


async def test_apply_create_takes_the_name_from_the_url(client):
    config = NOTIFICATION_YAML.replace("  name: n1\n", "")
    response = await patch(client, config, APPLY, f"{NOTIFICATIONS_PATH}/from-url",
                           fieldManager="kubectl")
    assert response.status_code == 201, response.text
    assert response.json()["metadata"]["name"] == "from-url"


class OnTheLoop:
    """The SQLite store, but its atomic update runs ``mutate`` on the event loop, as the
    Kubernetes store does (on its cached object)."""

    def __init__(self, inner: SqliteObjectStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def guaranteed_update(self, namespace: str, name: str,
                                mutate: Callable[[Object], Object]) -> Object:
        desired = mutate(await self._inner.get(namespace, name))
        return await self._inner.guaranteed_update(namespace, name, lambda _: desired)


@pytest.fixture
def applied_in(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads Patch.apply_to runs in."""
    threads: list[threading.Thread] = []
    apply_to = Patch.apply_to

    def recorded(self: Patch, current: Object) -> Object:
        threads.append(threading.current_thread())
        return apply_to(self, current)

    monkeypatch.setattr(Patch, "apply_to", recorded)
    return threads


@pytest.mark.parametrize("dry_run", [{}, {"dryRun": "All"}])
async def test_a_patch_is_applied_off_the_event_loop(records, stored_notifications, access,
                                                     fanout, stored, applied_in, dry_run):
    """Issue 20: applying a patch costs up to its bounds (10000 operations), and the Kubernetes
    store runs an update's mutate on the event loop: it is decided in a worker thread first,
    and the update takes that outcome."""
    operations = [{"op": "add", "path": f"/metadata/labels/l{index}", "value": "v"}
                  for index in range(100)]
    async with serving(OnTheLoop(records), stored_notifications, access, fanout) as c:
        response = await patch(c, operations, JSON_PATCH, **dry_run)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"]["l99"] == "v"
    assert applied_in and threading.current_thread() not in applied_in


def label_patch(key: str, value: str = "v") -> Patch:
    return Patch(PODNOTIFIERS, PatchType.MERGE, {"metadata": {"labels": {key: value}}},
                 PatchOptions(dry_run=False, field_manager="test", force=False),
                 "2026-01-01T00:00:00Z")


async def test_after_another_write_the_update_applies_the_patch_anew(records, stored):
    mutate = await decided(label_patch("a"), records, "ns", "r1")
    await records.guaranteed_update("ns", "r1", await decided(label_patch("b"), records, "ns",
                                                              "r1"))
    labels = (await records.guaranteed_update("ns", "r1", mutate))["metadata"]["labels"]
    assert labels["a"] == labels["b"] == "v"


async def test_a_decided_outcome_is_handed_out_once_a_decided_error_each_time(records, stored,
                                                                            applied_in):
    mutate = await decided(label_patch("a"), records, "ns", "r1")
    current = await records.get("ns", "r1")
    assert mutate(current)["metadata"]["labels"]["a"] == "v"
    assert len(applied_in) == 1
    assert mutate(current)["metadata"]["labels"]["a"] == "v"
    assert len(applied_in) == 2
    refused = await decided(label_patch("notifier.x-k8s.io/pod", "web-1"), records, "ns", "r1")
    for _ in range(2):
        with pytest.raises(errors.Invalid):
            refused(current)
    assert len(applied_in) == 3
