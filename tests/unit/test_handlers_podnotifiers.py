"""The podnotifiers endpoints on a real SQLite store: get, list, selectors, pages, delete,
deletecollection, content negotiation (Table, PartialObjectMetadata, 406) and watch.

The app is the real one (create_app: its Status error handlers and access middleware) with an
allow-all authenticator and authorizer. Watches run through a real uvicorn (h11) server,
since httpx's ASGITransport buffers a whole response before returning it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI

from apiserver.handlers import podnotifiers
from apiserver.handlers.watch_response import Watches
from apiserver.registry.resources import PODNOTIFIERS
from apiserver.registry.sqlite_database import SqliteDatabase
from apiserver.registry.sqlite_store import SqliteObjectStore
from apiserver.registry.watch import Watch
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll
from tests.support.stores import watch_closed

API = "/apis/notifier.x-k8s.io/v1alpha1"
NS = f"{API}/namespaces/ns/podnotifiers"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
KUBECTL_GET = f"{TABLE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
EVENT_WAIT = 5.0


class TrackedStore(SqliteObjectStore):
    """Records the watches it hands out, to check that each one is released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watches: list[Watch] = []

    async def watch(self, *args: Any, **kwargs: Any) -> Watch:
        watch = await super().watch(*args, **kwargs)
        self.watches.append(watch)
        return watch


def record(name: str, *, namespace: str = "ns", pod: str = "web-0", notifier: str = "quiesce",
           phase: str = "Pending", labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "notifier.x-k8s.io/v1alpha1",
        "kind": "PodNotifier",
        "metadata": {"namespace": namespace, "name": name,
                     "labels": {"notifier.x-k8s.io/pod": pod, **(labels or {})}},
        "spec": {"podName": pod, "notifier": notifier},
        "status": {"phase": phase},
    }


def set_phase(phase: str):
    def mutate(obj: dict) -> dict:
        obj["status"]["phase"] = phase
        return obj

    return mutate


@pytest.fixture
def event_retention() -> int:
    return 10


@pytest.fixture
def store(database: SqliteDatabase) -> TrackedStore:
    return TrackedStore(database, PODNOTIFIERS)


@pytest.fixture
def watches() -> Watches:
    return Watches()


def make_app(store: TrackedStore, watches: Watches) -> FastAPI:
    router = APIRouter()
    router.include_router(podnotifiers.router(store, watches))
    return create_app(authenticator=AllowAll(), authorizer=AllowAll(), readiness=Readiness(),
                      resource_router=router)  # type: ignore[arg-type]


@pytest.fixture
def app(store: TrackedStore, watches: Watches) -> FastAPI:
    return make_app(store, watches)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://notifier.test") as c:
        yield c


@pytest.fixture
async def served(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(app) as client:
        yield client


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app served by uvicorn (h11, like the server) on a free local port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="h11", ws="none", lifespan="off", log_config=None,
                            access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        yield c
    server.should_exit = True
    await task


def assert_status(response: httpx.Response, code: int, reason: str) -> dict:
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == code and body["reason"] == reason
    return body


def names(body: dict) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


# get


async def test_get_answers_the_typed_object(client: httpx.AsyncClient,
                                            store: TrackedStore) -> None:
    stored = record("a")
    del stored["apiVersion"], stored["kind"]  # the store keeps what it is given
    created = await store.create(stored)

    response = await client.get(f"{NS}/a")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["apiVersion"] == "notifier.x-k8s.io/v1alpha1" and body["kind"] == "PodNotifier"
    assert body["metadata"] == created["metadata"]
    assert body["spec"] == created["spec"]


async def test_get_missing_is_not_found_status(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{NS}/nope")

    body = assert_status(response, 404, "NotFound")
    assert body["message"] == 'podnotifiers.notifier.x-k8s.io "nope" not found'
    assert body["details"] == {"name": "nope", "group": "notifier.x-k8s.io",
                               "kind": "podnotifiers"}


async def test_get_in_another_namespace_is_not_found(client: httpx.AsyncClient,
                                                     store: TrackedStore) -> None:
    await store.create(record("a", namespace="other"))

    assert (await client.get(f"{NS}/a")).status_code == 404
    assert (await client.get(f"{API}/namespaces/other/podnotifiers/a")).status_code == 200


# list


async def test_list_in_a_namespace(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("b"))
    await store.create(record("a"))
    await store.create(record("c", namespace="other"))
    last = await store.guaranteed_update("ns", "a", set_phase("Running"))

    response = await client.get(NS)

    assert response.status_code == 200
    body = response.json()
    assert body["apiVersion"] == "notifier.x-k8s.io/v1alpha1"
    assert body["kind"] == "PodNotifierList"
    assert body["metadata"] == {"resourceVersion": last["metadata"]["resourceVersion"]}
    assert names(body) == ["a", "b"]
    assert all(item["kind"] == "PodNotifier" and item["apiVersion"] ==
               "notifier.x-k8s.io/v1alpha1" for item in body["items"])
    assert body["items"][0]["status"]["phase"] == "Running"


async def test_list_all_namespaces(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a", namespace="x"))
    await store.create(record("a", namespace="ns"))

    body = (await client.get(f"{API}/podnotifiers")).json()

    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]] == [
        ("ns", "a"), ("x", "a")]


async def test_empty_list_has_items_and_version(client: httpx.AsyncClient) -> None:
    body = (await client.get(NS)).json()

    assert body["items"] == []
    assert body["metadata"]["resourceVersion"] == "0"


@pytest.mark.parametrize(("selector", "expected"), [
    ("labelSelector=team%3Dblue", ["a", "c"]),
    ("labelSelector=team%21%3Dblue", ["b"]),
    ("labelSelector=team+in+(blue,red)", ["a", "b", "c"]),
    ("labelSelector=%21team", []),
    ("fieldSelector=spec.podName%3Dweb-1", ["b", "c"]),
    ("fieldSelector=spec.notifier%3Dreload", ["c"]),
    ("fieldSelector=status.phase%3DSucceeded", ["a"]),
    ("fieldSelector=status.phase%21%3DSucceeded", ["b", "c"]),
    ("fieldSelector=metadata.name%3Db", ["b"]),
    ("fieldSelector=metadata.namespace%3Dns", ["a", "b", "c"]),
    ("fieldSelector=spec.podName%3Dweb-1,spec.notifier%3Dquiesce"
     "&labelSelector=team%3Dred", ["b"]),
])
async def test_list_selectors(client: httpx.AsyncClient, store: TrackedStore, selector: str,
                              expected: list[str]) -> None:
    await store.create(record("a", phase="Succeeded", labels={"team": "blue"}))
    await store.create(record("b", pod="web-1", labels={"team": "red"}))
    await store.create(record("c", pod="web-1", notifier="reload", labels={"team": "blue"}))

    response = await client.get(f"{NS}?{selector}")

    assert response.status_code == 200, response.text
    assert names(response.json()) == expected


async def test_bad_label_selector_is_400_naming_the_field(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{NS}?labelSelector=a+b")

    body = assert_status(response, 400, "BadRequest")
    assert body["details"]["causes"][0]["field"] == "labelSelector"


async def test_unknown_field_selector_is_400_naming_the_field(client: httpx.AsyncClient
                                                              ) -> None:
    response = await client.get(f"{NS}?fieldSelector=spec.containers%3Ddb")

    body = assert_status(response, 400, "BadRequest")
    assert body["details"]["causes"][0]["field"] == "fieldSelector"
    assert '"spec.containers" is not a known field selector' in body["message"]


@pytest.mark.parametrize("query", ["limit=x", "limit=-1", "watch=maybe", "timeoutSeconds=1.5"])
async def test_malformed_parameters_are_400(client: httpx.AsyncClient, query: str) -> None:
    assert_status(await client.get(f"{NS}?{query}"), 400, "BadRequest")


async def test_pages_come_from_one_snapshot(client: httpx.AsyncClient,
                                            store: TrackedStore) -> None:
    for name in "abcde":
        await store.create(record(name))

    first = (await client.get(f"{NS}?limit=2")).json()
    await store.create(record("bb"))
    await store.delete("ns", "d")
    second = (await client.get(f"{NS}?limit=2&continue={first['metadata']['continue']}")).json()
    third = (await client.get(f"{NS}?limit=2&continue={second['metadata']['continue']}")).json()

    assert names(first) == ["a", "b"] and names(second) == ["c", "d"] and names(third) == ["e"]
    assert "continue" not in third["metadata"]
    versions = {page["metadata"]["resourceVersion"] for page in (first, second, third)}
    assert versions == {"5"}


async def test_malformed_continue_token_is_400(client: httpx.AsyncClient) -> None:
    assert_status(await client.get(f"{NS}?limit=1&continue=garbage"), 400, "BadRequest")


# delete


async def test_delete_answers_success_status_like_kube(client: httpx.AsyncClient,
                                                       store: TrackedStore) -> None:
    created = await store.create(record("a"))

    response = await client.delete(f"{NS}/a")

    assert response.status_code == 200
    assert response.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": "a", "group": "notifier.x-k8s.io", "kind": "podnotifiers",
                    "uid": created["metadata"]["uid"]}}
    assert (await client.get(f"{NS}/a")).status_code == 404


async def test_delete_missing_is_404(client: httpx.AsyncClient) -> None:
    body = assert_status(await client.delete(f"{NS}/a"), 404, "NotFound")
    assert body["message"] == 'podnotifiers.notifier.x-k8s.io "a" not found'


async def test_storage_failure_is_a_503_status(served: httpx.AsyncClient, store: TrackedStore,
                                              database: SqliteDatabase) -> None:
    """Issue 8 bug 5: a failing disk answered 500 and then closed connections."""
    await store.create(record("a"))
    await database.run(lambda c: c.execute("PRAGMA query_only = ON"))  # every write fails

    first = await served.delete(f"{NS}/a")
    second = await served.delete(f"{NS}/a")  # the same connection still answers
    await database.run(lambda c: c.execute("PRAGMA query_only = OFF"))
    third = await served.delete(f"{NS}/a")

    for response in (first, second):
        body = assert_status(response, 503, "ServiceUnavailable")
        assert body["message"].startswith("storage failed: could not write ")
        assert "make --data-dir" in body["message"]
        assert response.headers["retry-after"] == "5"
    assert third.status_code == 200
    assert database.writable


async def test_delete_with_kubectl_body(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a"))

    response = await client.request(
        "DELETE", f"{NS}/a", headers={"content-type": "application/json"},
        content=json.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                            "propagationPolicy": "Background"}))

    assert response.status_code == 200 and response.json()["status"] == "Success"


@pytest.mark.parametrize("field", ["uid", "resourceVersion"])
async def test_delete_precondition_mismatch_is_conflict(client: httpx.AsyncClient,
                                                        store: TrackedStore, field: str) -> None:
    await store.create(record("a"))

    response = await client.request(
        "DELETE", f"{NS}/a", json={"kind": "DeleteOptions", "apiVersion": "v1",
                                   "preconditions": {field: "12345"}})

    body = assert_status(response, 409, "Conflict")
    assert body["message"].startswith(
        'Operation cannot be fulfilled on podnotifiers.notifier.x-k8s.io "a"')
    assert (await client.get(f"{NS}/a")).status_code == 200


async def test_delete_with_matching_preconditions(client: httpx.AsyncClient,
                                                  store: TrackedStore) -> None:
    created = await store.create(record("a"))
    meta = created["metadata"]

    response = await client.request("DELETE", f"{NS}/a", json={"preconditions": {
        "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}})

    assert response.status_code == 200
    assert (await client.get(f"{NS}/a")).status_code == 404


@pytest.mark.parametrize("how", ["query", "body"])
async def test_delete_dry_run_keeps_the_object(client: httpx.AsyncClient, store: TrackedStore,
                                               how: str) -> None:
    await store.create(record("a"))
    if how == "query":
        response = await client.delete(f"{NS}/a?dryRun=All")
    else:
        response = await client.request("DELETE", f"{NS}/a", json={"dryRun": ["All"]})

    assert response.status_code == 200 and response.json()["status"] == "Success"
    assert (await client.get(f"{NS}/a")).status_code == 200


async def test_delete_dry_run_checks_preconditions(client: httpx.AsyncClient,
                                                   store: TrackedStore) -> None:
    await store.create(record("a"))

    response = await client.request("DELETE", f"{NS}/a?dryRun=All",
                                    json={"preconditions": {"uid": "other"}})

    assert_status(response, 409, "Conflict")


@pytest.mark.parametrize(("content", "code", "reason"), [
    ("{not json", 400, "BadRequest"),
    ("[1]", 400, "BadRequest"),
    ('{"kind": "Pod"}', 400, "BadRequest"),
    ('{"preconditions": "x"}', 400, "BadRequest"),
    ('{"dryRun": ["Some"]}', 422, "Invalid"),
])
async def test_bad_delete_options(client: httpx.AsyncClient, store: TrackedStore, content: str,
                                  code: int, reason: str) -> None:
    await store.create(record("a"))

    response = await client.request("DELETE", f"{NS}/a", content=content,
                                    headers={"content-type": "application/json"})

    assert_status(response, code, reason)
    assert (await client.get(f"{NS}/a")).status_code == 200


async def test_protobuf_delete_options_are_415(client: httpx.AsyncClient,
                                               store: TrackedStore) -> None:
    await store.create(record("a"))

    response = await client.request("DELETE", f"{NS}/a", content=b"\x6b\x38\x73\x00",
                                    headers={"content-type": PROTOBUF})

    assert_status(response, 415, "UnsupportedMediaType")


# deletecollection


async def test_deletecollection_answers_the_deleted_list(client: httpx.AsyncClient,
                                                         store: TrackedStore) -> None:
    await store.create(record("a", labels={"team": "blue"}))
    await store.create(record("b", labels={"team": "red"}))
    await store.create(record("c", labels={"team": "blue"}))
    await store.create(record("d", namespace="other", labels={"team": "blue"}))

    response = await client.delete(f"{NS}?labelSelector=team%3Dblue")

    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "PodNotifierList"
    assert body["apiVersion"] == "notifier.x-k8s.io/v1alpha1"
    assert names(body) == ["a", "c"]
    assert all(item["kind"] == "PodNotifier" for item in body["items"])
    assert body["metadata"]["resourceVersion"] == "6"
    assert names((await client.get(NS)).json()) == ["b"]
    assert names((await client.get(f"{API}/namespaces/other/podnotifiers")).json()) == ["d"]


async def test_deletecollection_with_field_selector(client: httpx.AsyncClient,
                                                    store: TrackedStore) -> None:
    await store.create(record("a", phase="Succeeded"))
    await store.create(record("b", phase="Running"))

    body = (await client.delete(f"{NS}?fieldSelector=status.phase%3DSucceeded")).json()

    assert names(body) == ["a"]
    assert names((await client.get(NS)).json()) == ["b"]


async def test_deletecollection_dry_run(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a"))

    body = (await client.delete(f"{NS}?dryRun=All")).json()

    assert names(body) == ["a"]
    assert names((await client.get(NS)).json()) == ["a"]


async def test_deletecollection_bad_selector_deletes_nothing(client: httpx.AsyncClient,
                                                             store: TrackedStore) -> None:
    await store.create(record("a"))

    assert_status(await client.delete(f"{NS}?fieldSelector=spec.x%3D1"), 400, "BadRequest")
    assert names((await client.get(NS)).json()) == ["a"]


# content negotiation


async def test_protobuf_only_is_406(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a"))

    for path in (NS, f"{NS}/a"):
        response = await client.get(path, headers={"accept": PROTOBUF})
        body = assert_status(response, 406, "NotAcceptable")
        assert "application/json" in body["message"]
    assert (await client.get(NS, headers={"accept": f"{PROTOBUF}, application/json"})
            ).json()["kind"] == "PodNotifierList"


async def test_406_before_deleting(client: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a"))

    assert_status(await client.delete(f"{NS}/a", headers={"accept": PROTOBUF}), 406,
                  "NotAcceptable")
    assert (await client.get(f"{NS}/a")).status_code == 200


async def test_table_list_for_kubectl_get(client: httpx.AsyncClient,
                                          store: TrackedStore) -> None:
    await store.create(record("a", phase="Succeeded"))
    await store.create(record("b", pod="web-1", notifier="reload"))

    response = await client.get(NS, headers={"accept": KUBECTL_GET})

    assert response.status_code == 200
    table = response.json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "2"}
    assert [c["name"] for c in table["columnDefinitions"]][:7] == [
        "Name", "Pod", "Notifier", "Phase", "Exit", "Duration", "Age"]
    assert [row["cells"][:6] for row in table["rows"]] == [
        ["a", "web-0", "quiesce", "Succeeded", "-", ""],
        ["b", "web-1", "reload", "Pending", "-", ""]]
    assert table["rows"][0]["cells"][6].endswith("s")  # age, e.g. 0s
    partial = table["rows"][0]["object"]
    assert partial["kind"] == "PartialObjectMetadata"
    assert partial["apiVersion"] == "meta.k8s.io/v1"
    assert partial["metadata"]["name"] == "a" and partial["metadata"]["namespace"] == "ns"
    assert "spec" not in partial


async def test_table_pages_carry_the_continue_token(client: httpx.AsyncClient,
                                                    store: TrackedStore) -> None:
    await store.create(record("a"))
    await store.create(record("b"))

    table = (await client.get(f"{NS}?limit=1", headers={"accept": TABLE})).json()

    assert len(table["rows"]) == 1 and table["metadata"]["continue"]


async def test_table_include_object(client: httpx.AsyncClient, store: TrackedStore) -> None:
    stored = record("a")
    del stored["kind"]
    await store.create(stored)

    whole = (await client.get(f"{NS}?includeObject=Object", headers={"accept": TABLE})).json()
    none = (await client.get(f"{NS}?includeObject=None", headers={"accept": TABLE})).json()
    bad = await client.get(f"{NS}?includeObject=All", headers={"accept": TABLE})

    assert whole["rows"][0]["object"]["kind"] == "PodNotifier"
    assert whole["rows"][0]["object"]["spec"]["notifier"] == "quiesce"
    assert none["rows"][0]["object"] is None
    assert_status(bad, 400, "BadRequest")


async def test_table_get(client: httpx.AsyncClient, store: TrackedStore) -> None:
    created = await store.create(record("a"))

    table = (await client.get(f"{NS}/a", headers={"accept": KUBECTL_GET})).json()

    assert table["kind"] == "Table"
    assert table["metadata"] == {"resourceVersion": created["metadata"]["resourceVersion"]}
    assert len(table["rows"]) == 1 and table["rows"][0]["cells"][0] == "a"


async def test_partial_object_metadata_for_the_metadata_client(client: httpx.AsyncClient,
                                                               store: TrackedStore) -> None:
    await store.create(record("a"))
    accept_list = ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;"
                   "g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;"
                   "g=meta.k8s.io;v=v1,application/json")
    accept_one = accept_list.replace("PartialObjectMetadataList", "PartialObjectMetadata")

    listed = (await client.get(NS, headers={"accept": accept_list})).json()
    one = (await client.get(f"{NS}/a", headers={"accept": accept_one})).json()
    # A list kind on a get does not fit: the plain JSON fallback is used.
    mismatched = (await client.get(f"{NS}/a", headers={"accept": accept_list})).json()

    assert listed["kind"] == "PartialObjectMetadataList"
    assert listed["apiVersion"] == "meta.k8s.io/v1"
    assert listed["items"][0]["kind"] == "PartialObjectMetadata"
    assert "spec" not in listed["items"][0] and listed["metadata"]["resourceVersion"] == "1"
    assert one["kind"] == "PartialObjectMetadata" and one["metadata"]["name"] == "a"
    assert mismatched["kind"] == "PodNotifier"


# watch


async def read_event(lines: AsyncIterator[str]) -> dict:
    return json.loads(await asyncio.wait_for(anext(lines), EVENT_WAIT))


async def test_watch_streams_events_in_order_as_they_happen(served: httpx.AsyncClient,
                                                            store: TrackedStore) -> None:
    await store.create(record("a"))
    listed = (await served.get(NS)).json()

    async with served.stream(
            "GET", f"{NS}?watch=true&resourceVersion={listed['metadata']['resourceVersion']}"
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert "content-length" not in response.headers
        lines = response.aiter_lines()
        # Each change arrives while the stream stays open: nothing is buffered.
        await store.create(record("b"))
        added = await read_event(lines)
        await store.guaranteed_update("ns", "b", set_phase("Running"))
        modified = await read_event(lines)
        await store.delete("ns", "a")
        deleted = await read_event(lines)

    assert [added["type"], modified["type"], deleted["type"]] == ["ADDED", "MODIFIED", "DELETED"]
    assert added["object"]["metadata"]["name"] == "b"
    assert added["object"]["kind"] == "PodNotifier"
    assert added["object"]["apiVersion"] == "notifier.x-k8s.io/v1alpha1"
    assert modified["object"]["status"]["phase"] == "Running"
    assert deleted["object"]["metadata"]["name"] == "a"
    versions = [int(e["object"]["metadata"]["resourceVersion"])
                for e in (added, modified, deleted)]
    assert versions == [2, 3, 4]


async def test_watch_without_version_starts_with_current_objects(served: httpx.AsyncClient,
                                                                 store: TrackedStore) -> None:
    await store.create(record("a"))
    await store.create(record("b", namespace="other"))

    async with served.stream("GET", f"{NS}?watch=1") as response:
        lines = response.aiter_lines()
        first = await read_event(lines)
        await store.create(record("c"))
        second = await read_event(lines)

    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "c")


async def test_watch_resumes_after_a_resource_version(served: httpx.AsyncClient,
                                                      store: TrackedStore) -> None:
    await store.create(record("a"))
    await store.create(record("b"))
    await store.guaranteed_update("ns", "a", set_phase("Succeeded"))

    response = await served.get(f"{NS}?watch=true&resourceVersion=1&timeoutSeconds=1")

    events = [json.loads(line) for line in response.text.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"), ("MODIFIED", "a")]


async def test_watch_selectors(served: httpx.AsyncClient, store: TrackedStore) -> None:
    await store.create(record("a", labels={"team": "blue"}))
    await store.create(record("b", labels={"team": "red"}))
    await store.create(record("c", labels={"team": "blue"}, pod="web-1"))

    response = await served.get(
        f"{API}/podnotifiers?watch=true&timeoutSeconds=1&labelSelector=team%3Dblue"
        "&fieldSelector=spec.podName%3Dweb-0")

    events = [json.loads(line) for line in response.text.splitlines()]
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]


async def test_watch_bad_selector_is_400_before_streaming(served: httpx.AsyncClient,
                                                          store: TrackedStore) -> None:
    response = await served.get(f"{NS}?watch=true&fieldSelector=spec.x%3D1")

    assert_status(response, 400, "BadRequest")
    assert store.watches == []


async def test_watch_malformed_version_is_400(served: httpx.AsyncClient) -> None:
    assert_status(await served.get(f"{NS}?watch=true&resourceVersion=abc"), 400, "BadRequest")


async def test_too_old_version_is_an_error_event_with_410(served: httpx.AsyncClient,
                                                          store: TrackedStore) -> None:
    for index in range(15):  # the database keeps the last 10 versions
        await store.create(record(f"r{index}"))

    response = await served.get(f"{NS}?watch=true&resourceVersion=2")

    assert response.status_code == 200
    events = [json.loads(line) for line in response.text.splitlines()]
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    error = events[0]["object"]
    assert error["kind"] == "Status" and error["apiVersion"] == "v1"
    assert (error["status"], error["code"], error["reason"]) == ("Failure", 410, "Expired")
    assert error["message"].startswith("too old resource version: 2")


async def test_too_new_version_is_an_error_event(served: httpx.AsyncClient) -> None:
    response = await served.get(f"{NS}?watch=true&resourceVersion=99")

    events = [json.loads(line) for line in response.text.splitlines()]
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 504


async def test_watch_ends_after_timeout_seconds(served: httpx.AsyncClient,
                                                store: TrackedStore) -> None:
    started = asyncio.get_running_loop().time()

    response = await served.get(f"{NS}?watch=true&timeoutSeconds=1")

    elapsed = asyncio.get_running_loop().time() - started
    assert response.status_code == 200 and response.text == ""
    assert 0.9 <= elapsed < 4
    assert await watch_closed(store.watches[0])


async def test_client_disconnect_releases_the_store_watch(served: httpx.AsyncClient,
                                                          store: TrackedStore) -> None:
    await store.create(record("a"))
    async with served.stream("GET", f"{NS}?watch=true") as response:
        lines = response.aiter_lines()
        await read_event(lines)
        assert not await watch_closed(store.watches[0])

    for _ in range(100):
        if await watch_closed(store.watches[0]):
            break
    assert await watch_closed(store.watches[0])


async def test_stopping_watches_ends_open_streams_cleanly(served: httpx.AsyncClient,
                                                          store: TrackedStore, watches: Watches
                                                          ) -> None:
    await store.create(record("a"))
    async with served.stream("GET", f"{NS}?watch=true") as response:
        lines = response.aiter_lines()
        await read_event(lines)
        watches.stop()
        rest = [line async for line in lines]  # ends without a protocol error

    assert rest == []
    assert await watch_closed(store.watches[0])


async def test_a_watch_opened_after_stop_ends_at_once(served: httpx.AsyncClient,
                                                     store: TrackedStore, watches: Watches
                                                     ) -> None:
    await store.create(record("a"))
    watches.stop()

    response = await asyncio.wait_for(served.get(f"{NS}?watch=true"), EVENT_WAIT)

    assert response.status_code == 200 and response.text == ""
    assert await watch_closed(store.watches[0])


async def test_store_close_ends_watches(served: httpx.AsyncClient, store: TrackedStore) -> None:
    async with served.stream("GET", f"{NS}?watch=true") as response:
        lines = response.aiter_lines()
        await store.create(record("a"))
        await read_event(lines)
        store.close()
        rest = [line async for line in lines]

    assert rest == []


async def test_watch_as_table_sends_headers_once(served: httpx.AsyncClient,
                                                 store: TrackedStore) -> None:
    await store.create(record("a"))
    async with served.stream("GET", f"{NS}?watch=true", headers={"accept": KUBECTL_GET}
                             ) as response:
        lines = response.aiter_lines()
        first = await read_event(lines)
        await store.guaranteed_update("ns", "a", set_phase("Running"))
        second = await read_event(lines)

    for event in (first, second):
        assert event["object"]["kind"] == "Table"
        assert len(event["object"]["rows"]) == 1
        assert event["object"]["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert [c["name"] for c in first["object"]["columnDefinitions"]][0] == "Name"
    assert second["object"]["columnDefinitions"] is None
    assert second["type"] == "MODIFIED"
    assert second["object"]["rows"][0]["cells"][3] == "Running"
    assert second["object"]["metadata"]["resourceVersion"] == "2"


async def test_watch_as_partial_object_metadata(served: httpx.AsyncClient,
                                                store: TrackedStore) -> None:
    await store.create(record("a"))
    accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

    response = await served.get(f"{NS}?watch=true&timeoutSeconds=1", headers={"accept": accept})

    event = json.loads(response.text.splitlines()[0])
    assert event["object"]["kind"] == "PartialObjectMetadata"
    assert event["object"]["metadata"]["name"] == "a"


async def test_watch_list_ends_initial_events_with_a_bookmark(served: httpx.AsyncClient,
                                                              store: TrackedStore) -> None:
    await store.create(record("a"))
    await store.create(record("b"))
    query = ("watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
             "&resourceVersionMatch=NotOlderThan")
    async with served.stream("GET", f"{NS}?{query}") as response:
        lines = response.aiter_lines()
        initial = [await read_event(lines) for _ in range(3)]
        await store.create(record("c"))
        later = await read_event(lines)

    assert [(e["type"], e["object"]["metadata"].get("name")) for e in initial] == [
        ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None)]
    bookmark = initial[2]["object"]
    assert bookmark["kind"] == "PodNotifier"
    assert bookmark["metadata"] == {"resourceVersion": "2",
                                    "annotations": {"k8s.io/initial-events-end": "true"}}
    assert (later["type"], later["object"]["metadata"]["name"]) == ("ADDED", "c")


async def test_falling_behind_is_an_error_event(database: SqliteDatabase) -> None:
    slow = TrackedStore(database, PODNOTIFIERS, max_queued_events=2)
    for name in "abcd":
        await slow.create(record(name))
    async with serving(make_app(slow, Watches())) as served, served.stream(
            "GET", f"{NS}?watch=true&resourceVersion=4") as response:
        lines = response.aiter_lines()
        while not slow.watches:
            await asyncio.sleep(0.01)
        await slow.delete_collection("ns")  # four changes at once: the queue overflows
        events = [json.loads(line) async for line in lines]

    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"
