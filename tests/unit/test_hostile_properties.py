"""Issue 9, item 7: property-based tests of hostile input against every endpoint of the whole
server in-process (``InProcessServer``: build_app, every real component, a fake kube-apiserver,
SQLite in a temporary directory).

Strategies generate hostile bodies (valid documents with one hostile change: deep nesting, lone
surrogates, huge numbers, NaN and Infinity, duplicate and unknown fields, a wrong type at any
field, another encoding), hostile paths (names with ``%``, ``?``, ``#``, dot segments, unicode,
very long) and hostile query strings (every parameter the server reads, repeated, with hostile
values). Every answer must be below 500, an error must be a JSON ``metav1.Status`` whose code is
the answer's, nothing may be stored (the database's resourceVersion does not move) and the
server must answer a normal request after.

Examples per test: the hypothesis profile of tests/unit/conftest.py.
"""

from __future__ import annotations

import base64
import json
import unicodedata
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver.api.query import SINGLE_VALUED
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from tests.unit.conftest import Answer, InProcessServer, strings

API = "/apis/notifier.x-k8s.io/v1alpha1"
NS = f"{API}/namespaces/default"
NOTIFY = f"{NS}/pods/db-0/notify"
NOTIFICATIONS_PATH = f"{NS}/notifications"
PODNOTIFIERS_PATH = f"{NS}/podnotifiers"
MAX_DEPTH = 32

pytestmark = pytest.mark.filterwarnings(
    # The server's thread draws jitter from `random` while hypothesis generates an example.
    "ignore:Do not use the `random` module inside strategies")
fixtures = settings(suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

POD_NOTIFIER: dict[str, Any] = {
    "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
    "metadata": {"name": "run-1", "namespace": "default", "labels": {"team": "db"}},
    "spec": {"podName": "db-0", "notifier": "quiesce", "containers": ["db"],
             "timeoutSeconds": 60, "ttlSecondsAfterFinished": 100},
}
NOTIFICATION: dict[str, Any] = {
    "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
    "metadata": {"name": "fan-1", "namespace": "default", "labels": {"team": "db"},
                 "annotations": {"note": "x"}},
    "spec": {"selector": {"matchLabels": {"app": "db"},
                          "matchExpressions": [{"key": "tier", "operator": "In",
                                                "values": ["a", "b"]}]},
             "notifier": "quiesce", "policy": "PreExistingPods", "failurePolicy": "Abort",
             "parallelism": 2, "containers": ["db"], "rollback": {"notifier": "unquiesce"},
             "timeoutSeconds": 60, "activeDeadlineSeconds": 600},
}
DELETE_OPTIONS: dict[str, Any] = {
    "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
    "propagationPolicy": "Background", "orphanDependents": False, "dryRun": ["All"],
    "preconditions": {"uid": "not-the-uid", "resourceVersion": "1"},
}
"""Valid, but its uid precondition fails: whatever a mutation leaves valid deletes nothing."""


@pytest.fixture(scope="module")
def server(in_process_server: InProcessServer) -> InProcessServer:
    """The server with a record and a finished Notification named "kept" (to delete)."""
    in_process_server.create_finished(PODNOTIFIERS, {
        **POD_NOTIFIER, "metadata": {"name": "kept", "namespace": "default"}})
    in_process_server.create_finished(NOTIFICATIONS, {
        **NOTIFICATION, "metadata": {"name": "kept", "namespace": "default"}})
    return in_process_server


# JSON with what json.dumps cannot write: duplicate keys, raw literals (NaN, 5000 digits).


@dataclass(frozen=True)
class Raw:
    """A literal written as is."""

    text: str


@dataclass(frozen=True)
class Obj:
    """An object whose members may repeat a key."""

    members: tuple[tuple[str, Any], ...]


def node(value: Any) -> Any:
    if isinstance(value, dict):
        return Obj(tuple((key, node(item)) for key, item in value.items()))
    if isinstance(value, list):
        return [node(item) for item in value]
    return value


def write(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(key)}:{write(item)}"
                              for key, item in value.members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write(item) for item in value) + "]"
    return json.dumps(value)  # ensure_ascii: a lone surrogate is written as a \\udXXX escape


Path = tuple[str | int, ...]


def paths(value: Any, at: Path = ()) -> list[tuple[Path, Any]]:
    """Every (path, value) of the document, the document itself first."""
    found = [(at, value)]
    if isinstance(value, Obj):
        for key, item in value.members:
            found += paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*at, index))
    return found


def replaced(value: Any, at: Path, new: Any) -> Any:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, Obj):
        return Obj(tuple((key, replaced(item, rest, new) if key == head else item)
                         for key, item in value.members))
    return [replaced(item, rest, new) if index == head else item
            for index, item in enumerate(value)]


MAPS = ("labels", "annotations", "matchLabels")
"""Objects whose keys are data: a new key is no unknown field (though a label key is checked)."""


def kind_of(value: Any) -> str:
    if isinstance(value, Obj):
        return "object"
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "integer", list: "array"}[type(value)]


HOSTILE_TEXT = ["%", "%2e%2e", "..", ".", "?", "#", "a/b", "\\", "\x00", "\x1b[31m", "\u2028",
                "\ufeff", "\U0001f600", "ü", "名前", "\ud800", "\udfff", "a" * 300, " ", ""]
surrogates = st.characters(categories=["Cs"])
"""One surrogate, alone (two could make a pair: a character)."""
hostile_strings = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40),
                            st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), surrogates,
                                      st.text(max_size=5)))
huge_literals = st.sampled_from([
    "9" * 5000, "-" + "9" * 5000, "1e400", "-1e400", "9223372036854775808",
    "-9223372036854775809", "1" + "0" * 400, "1.5", "0.0", "-0", "1e-400"])


def wrong_types(kind: str) -> st.SearchStrategy[Any]:
    """Values that are not of ``kind`` (and not null, which an optional field accepts)."""
    not_of_kind: dict[str, st.SearchStrategy[Any]] = {
        "string": st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(),
                            st.just([]), st.just(Obj(()))),
        "integer": st.one_of(hostile_strings, st.floats(allow_nan=False), st.booleans(),
                             huge_literals.map(Raw), st.just([1])),
        "boolean": st.one_of(hostile_strings, st.integers(), st.just(Obj(()))),
        "array": st.one_of(hostile_strings, st.integers(), st.just(Obj((("a", 1),)))),
        "object": st.one_of(hostile_strings, st.integers(), st.booleans(), st.just([]),
                            st.just([Obj(())])),
    }
    return not_of_kind[kind]


def deep(depth: int) -> Raw:
    """Objects and arrays nested ``depth`` levels, alternately."""
    opening = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return Raw(f"{opening}1{closing}")


@st.composite
def hostile_bodies(draw: st.DrawFn, document: dict[str, Any]) -> bytes:
    """``document`` with one hostile change, encoded. Each change makes a create body invalid
    under fieldValidation=Strict (DeleteOptions are read leniently, as kube-apiserver reads
    them: DELETE_OPTIONS' failing precondition keeps a still valid one from deleting)."""
    tree = node(document)
    located = paths(tree)
    at, value = draw(st.sampled_from(located))
    objects = [(path, item) for path, item in located if isinstance(item, Obj)]
    structs = [(path, item) for path, item in objects if not path or path[-1] not in MAPS]
    change = draw(st.sampled_from(["wrong type", "surrogate", "deep", "constant", "huge",
                                   "unknown field", "duplicate", "surrogate key", "encoding",
                                   "not utf-8"]))
    if change == "wrong type":
        tree = replaced(tree, at, draw(wrong_types(kind_of(value))))
    elif change == "surrogate":
        tree = replaced(tree, at, draw(surrogates))
    elif change == "deep":
        tree = replaced(tree, at, deep(draw(st.integers(MAX_DEPTH + 1, 3000))))
    elif change == "constant":
        tree = replaced(tree, at, Raw(draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))))
    elif change == "huge":
        at = draw(st.sampled_from([path for path, item in located
                                   if kind_of(item) != "object"] or [at]))
        tree = replaced(tree, at, Raw(draw(huge_literals)))
    elif change in ("unknown field", "duplicate", "surrogate key"):
        where, members = draw(st.sampled_from(structs if change == "unknown field" else objects))
        existing = [key for key, _ in members.members]
        if change == "unknown field" or not existing:
            key = draw(hostile_strings.filter(lambda key: key not in existing))
        elif change == "duplicate":
            key = draw(st.sampled_from(existing))
        else:
            key = draw(st.sampled_from(existing)) + draw(surrogates)
        added = draw(st.one_of(st.just(dict(members.members).get(key, 1)), hostile_strings))
        tree = replaced(tree, where, Obj((*members.members, (key, added))))
    text = write(tree)
    if change == "encoding":
        return text.encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be",
                                                 "utf-32", "utf-32-le"])))
    if change == "not utf-8":
        cut = draw(st.integers(0, len(text)))
        return text[:cut].encode() + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80",
                                                           b"\xc0\xaf"])) + text[cut:].encode()
    return text.encode()


UNSAFE = ("Cc", "Cs", "Cf", "Zl", "Zp")
"""Unicode categories a message must not hold raw: controls, surrogates, format characters
(bidirectional overrides among them) and line and paragraph separators."""


def check(server: InProcessServer, method: str, target: str | bytes, body: bytes = b"",
          *, escaped: bool = True) -> Answer:
    """The properties every hostile request must have; with ``escaped``, that the message holds
    no unsafe character."""
    before = server.resource_version()
    answer = server.request(method, target, body=body)
    assert answer.status < 500, (answer, body[:300])
    if answer.status >= 400:
        assert answer.header_values("content-type") == ["application/json"], answer
        status = json.loads(answer.body)
        assert status["kind"] == "Status" and status["code"] == answer.status, status
        texts = strings(status)
        "".join(texts).encode()
        assert not escaped or not any(unicodedata.category(character) in UNSAFE
                                      for text in texts for character in text), status
    assert server.resource_version() == before, (answer, body)
    healthy = server.request("GET", f"{PODNOTIFIERS_PATH}?limit=1")
    assert healthy.status == 200 and json.loads(healthy.body)["kind"] == "PodNotifierList"
    return answer


# Bodies


@fixtures
@given(body=hostile_bodies(POD_NOTIFIER))
def test_hostile_notify_bodies(server, body) -> None:
    answer = check(server, "POST", NOTIFY, body)
    assert 400 <= answer.status < 500, answer


@fixtures
@given(body=hostile_bodies(NOTIFICATION))
def test_hostile_notification_bodies(server, body) -> None:
    answer = check(server, "POST", NOTIFICATIONS_PATH, body)
    assert 400 <= answer.status < 500, answer


@fixtures
@given(body=hostile_bodies(DELETE_OPTIONS),
       target=st.sampled_from([f"{PODNOTIFIERS_PATH}/kept", f"{NOTIFICATIONS_PATH}/kept",
                               f"{PODNOTIFIERS_PATH}?labelSelector=none%3Dmatches"]))
def test_hostile_delete_options(server, body, target) -> None:
    """A hostile body that still reads as a dry run may succeed; nothing is deleted either way
    (`check` sees the store unchanged)."""
    answer = check(server, "DELETE", target, body)
    assert answer.status < 500, answer


@fixtures
@given(document=st.one_of(
    hostile_bodies({"rv": 1, "start": ["default", "kept"]}),
    st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_hostile_continue_tokens(server, document) -> None:
    token = quote(base64.urlsafe_b64encode(document).decode().rstrip("="))
    check(server, "GET", f"{PODNOTIFIERS_PATH}?limit=1&continue={token}")


# Query strings


QUERY_PARAMETERS = sorted(SINGLE_VALUED | {"dryRun"})
QUERY_VALUES = ["", "0", "1", "-1", "true", "false", "All", "Strict", "Warn", "Ignore",
                "9" * 5000, "1e400", "NaN", "9223372036854775808", "1_0", "+-1",
                "metadata.name=kept", "metadata.name", "a in (b", "!", "==", "x,", "%", "%zz",
                "%ED%A0%80", "%FF", "%00", "%1b", "#", "?", "&", "=", "..", "a" * 2000]


@st.composite
def hostile_queries(draw: st.DrawFn) -> str:
    """Parameters the server reads (repeats allowed), each with a hostile value, written raw or
    percent-encoded."""
    pairs = draw(st.lists(st.tuples(
        st.sampled_from(QUERY_PARAMETERS),
        st.one_of(st.sampled_from(QUERY_VALUES), hostile_strings)), min_size=1, max_size=6))
    encoded = draw(st.booleans())
    return "&".join(f"{name}={quote(value.encode('utf-8', 'surrogatepass'), safe=safe)}"
                    for name, value in pairs for safe in ["" if encoded else "%"])


READS = [f"{API}/podnotifiers", PODNOTIFIERS_PATH, f"{PODNOTIFIERS_PATH}/kept",
         f"{API}/notifications", NOTIFICATIONS_PATH, f"{NOTIFICATIONS_PATH}/kept", "/apis",
         "/apis/notifier.x-k8s.io", API, "/openapi/v2", "/openapi/v3",
         "/openapi/v3/apis/notifier.x-k8s.io/v1alpha1", "/healthz", "/livez", "/readyz",
         "/metrics"]


@fixtures
@given(target=st.sampled_from(READS), query=hostile_queries())
def test_hostile_queries_on_reads(server, target, query) -> None:
    check(server, "GET", f"{target}?{query}")


INVALID_NOTIFICATION = json.dumps({**NOTIFICATION, "spec": {"notifier": "quiesce"}}).encode()
"""Without a selector: 422 once the query passes, so nothing is created."""


@fixtures
@given(write=st.sampled_from([
    ("POST", NOTIFY, json.dumps(POD_NOTIFIER).encode()),  # db-0 declares no notifier: 404
    ("POST", NOTIFICATIONS_PATH, INVALID_NOTIFICATION),
    ("DELETE", f"{PODNOTIFIERS_PATH}/kept", json.dumps(DELETE_OPTIONS).encode()),
    ("DELETE", f"{NOTIFICATIONS_PATH}/kept", json.dumps(DELETE_OPTIONS).encode()),
    ("DELETE", f"{PODNOTIFIERS_PATH}?labelSelector=none%3Dmatches", b""),
]), query=hostile_queries())
def test_hostile_queries_on_writes(server, write, query) -> None:
    method, target, body = write
    check(server, method, f"{target}{'&' if '?' in target else '?'}{query}", body)


# Paths


@st.composite
def hostile_names(draw: st.DrawFn) -> str:
    """A path segment: a hostile name, percent-encoded whole, or with ``%``, ``?``, ``#``,
    ``/`` and dots left raw (as a client on a socket may send them)."""
    name = draw(st.one_of(hostile_strings, st.sampled_from(["kept", "db-0", "default", "A",
                                                            "-a", "a" * 254])))
    safe = draw(st.sampled_from(["", "%?#/.", "%", "?#"]))
    return quote(name.encode("utf-8", "surrogatepass"), safe=safe)


TEMPLATES = [
    ("POST", f"{API}/namespaces/{{ns}}/pods/{{name}}/notify"),
    ("POST", f"{API}/namespaces/{{ns}}/notifications"),
    ("GET", f"{API}/namespaces/{{ns}}/notifications/{{name}}"),
    ("DELETE", f"{API}/namespaces/{{ns}}/notifications/{{name}}"),
    ("GET", f"{API}/namespaces/{{ns}}/podnotifiers"),
    ("GET", f"{API}/namespaces/{{ns}}/podnotifiers/{{name}}"),
    ("DELETE", f"{API}/namespaces/{{ns}}/podnotifiers/{{name}}"),
    ("DELETE", f"{API}/namespaces/{{ns}}/podnotifiers"),
    ("GET", f"{API}/namespaces/{{ns}}/notifications"),
    ("GET", f"{API}/{{name}}"), ("GET", "/apis/{name}"), ("GET", "/openapi/v3/{name}"),
    ("PUT", f"{API}/namespaces/{{ns}}/podnotifiers/{{name}}"),
    ("PATCH", f"{API}/namespaces/{{ns}}/notifications/{{name}}"),
]
BODIES = [INVALID_NOTIFICATION, json.dumps(POD_NOTIFIER).encode(),
          json.dumps(DELETE_OPTIONS).encode(), b""]
"""None can create anything: a Notification without selector, a PodNotifier for a pod that
declares nothing (or that does not exist), DeleteOptions whose precondition fails."""


@fixtures
@given(template=st.sampled_from(TEMPLATES), ns=hostile_names(), name=hostile_names(),
       suffix=st.sampled_from(["", "/", "//", "/..", "/.", "/x", "?watch=true", "?limit=1"]),
       body=st.sampled_from(BODIES))
def test_hostile_paths(server, template, ns, name, suffix, body) -> None:
    method, path = template
    target = path.format(ns=ns, name=name) + suffix
    if method == "DELETE" and target.partition("?")[0].rstrip("/").endswith("/podnotifiers"):
        target += "&" if "?" in target else "?"
        target += "labelSelector=none%3Dmatches"
    # Names in the path are validated (and escaped in messages) by serving/access.py; here:
    # never a 5xx, a Status, nothing stored, the server healthy.
    check(server, method, target, body, escaped=False)


# Headers


HEADER_VALUES = ["", "*/*", "application/json", "application/json;as=Table;v=v1;g=meta.k8s.io",
                 "application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json",
                 "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                 "application/yaml", "application/vnd.kubernetes.protobuf", "text/html;q=x",
                 "application/json;q=0", "a/b;c", ";;;", ",,,", "application/json; charset=utf-16",
                 "Bearer", "Bearer ", "Bearer good", "Basic Zm9vOmJhcg==", "\xff\xfe", "x" * 8000]
header_values = st.one_of(st.sampled_from(HEADER_VALUES),
                          st.text(st.characters(min_codepoint=32, max_codepoint=255),
                                  max_size=60))


@fixtures
@given(request=st.sampled_from([
    ("GET", f"{PODNOTIFIERS_PATH}/kept", b""), ("GET", f"{API}/notifications", b""),
    ("GET", f"{PODNOTIFIERS_PATH}?watch=true", b""),
    ("POST", NOTIFY, json.dumps(POD_NOTIFIER).encode()),
    ("POST", NOTIFICATIONS_PATH, INVALID_NOTIFICATION),
    ("DELETE", f"{NOTIFICATIONS_PATH}/kept", json.dumps(DELETE_OPTIONS).encode())]),
    headers=st.dictionaries(st.sampled_from(["accept", "content-type", "authorization",
                                             "x-remote-user", "x-remote-group",
                                             "impersonate-user", "content-encoding"]),
                            header_values, max_size=3))
def test_hostile_headers(server, request, headers) -> None:
    method, target, body = request
    before = server.resource_version()
    answer = server.request(method, target, body=body, headers=headers,
                            token="authorization" not in headers)
    assert answer.status < 500, (answer, headers)
    if answer.status >= 400:
        status = json.loads(answer.body)
        assert status["kind"] == "Status" and status["code"] == answer.status, status
    assert server.resource_version() == before
