"""Issue 9, item 7: property-based tests of hostile input against every endpoint of the whole
server in-process (``InProcessServer``: build_app, every real component, a fake kube-apiserver,
SQLite in a temporary directory).

Strategies generate hostile bodies (valid documents with one hostile change: deep nesting, lone
surrogates, huge numbers, NaN and Infinity, duplicate and unknown fields, a wrong type at any
field, another encoding), the same and YAML's own hostile forms as YAML (issue 20: integers past
64 bits in every form YAML writes them, explicit tags on values they do not fit, aliases, several
documents, block and flow style), hostile patches of every patch type (JSON patches of hostile
operations, pointers and values, copies that grow the object; merge patches; apply
configurations), hostile paths (names with ``%``, ``?``, ``#``, dot segments, unicode,
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
    return {str: "string", int: "integer", list: "array", type(None): "null"}[type(value)]


HOSTILE_TEXT = ["%", "%2e%2e", "..", ".", "?", "#", "a/b", "\\", "\x00", "\x1b[31m", "\u2028",
                "\ufeff", "\U0001f600", "ü", "名前", "\ud800", "\udfff", "a" * 300, " ", "",
                "$patch", "$\u202e\x1b"]
surrogates = st.characters(categories=["Cs"])
"""One surrogate, alone (two could make a pair: a character)."""
hostile_strings = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40),
                            st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), surrogates,
                                      st.text(max_size=5)))
huge_literals = st.sampled_from([
    "9" * 5000, "-" + "9" * 5000, "1e400", "-1e400", "9223372036854775808",
    "-9223372036854775809", "1" + "0" * 400, "1.5", "0.0", "-0", "1e-400"])


def wrong_types(kind: str) -> st.SearchStrategy[Any]:
    """Values that are not of ``kind`` (and not null, which an optional field accepts, unless
    ``kind`` is null: a merge patch's removal)."""
    not_of_kind: dict[str, st.SearchStrategy[Any]] = {
        "string": st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(),
                            st.just([]), st.just(Obj(()))),
        "integer": st.one_of(hostile_strings, st.floats(allow_nan=False), st.booleans(),
                             huge_literals.map(Raw), st.just([1])),
        "boolean": st.one_of(hostile_strings, st.integers(), st.just(Obj(()))),
        "array": st.one_of(hostile_strings, st.integers(), st.just(Obj((("a", 1),)))),
        "object": st.one_of(hostile_strings, st.integers(), st.booleans(), st.just([]),
                            st.just([Obj(())])),
        "null": st.one_of(hostile_strings, st.integers(), st.just(Obj(()))),
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
          *, escaped: bool = True, headers: dict[str, str] | None = None) -> Answer:
    """The properties every hostile request must have; with ``escaped``, that the message holds
    no unsafe character."""
    before = server.resource_version()
    answer = server.request(method, target, body=body, headers=headers)
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



# YAML bodies (issue 20): the documents above, and YAML's own hostile forms, written as YAML.


YAML_HUGE = ["9" * 5000, "-" + "9" * 5000, "0x" + "f" * 5000, "-0b" + "1" * 20_000,
             "0" + "7" * 5000, "1" + ":59" * 5000, "1" + ":59" * 5000 + ".5", "1.5e+400",
             "9223372036854775808", "0x8000000000000000", "-0x8000000000000001"]
"""Integers (and floats) past 64 bits in every form YAML 1.1 writes them: each was a 500."""
YAML_SCALARS = ["!!int abc", "!!int 1.5", "!!float x", "!!bool maybe", "!!null x", "!!str 1",
                "!!int '0x10'", "!!binary aGk=", "!!timestamp 2001-01-01", "!custom x", "! 1",
                "yes", "Off", "~", "0o17", "0x_", "0b_", "1:30", ".5", "1.", "-.5", ".inf",
                "-.Inf", ".NaN", "2001-01-01", "'quoted'", '"\\ud800"', '"\\x00"', "<<",
                "=", "!!merge <<"]


def write_yaml(value: Any, indent: str = "") -> str:
    """``value`` in YAML's block style (flow style for what is empty or a literal)."""
    if isinstance(value, Obj) and value.members:
        lines = []
        for key, item in value.members:
            nested = isinstance(item, Obj | list) and bool(item.members if isinstance(item, Obj)
                                                           else item)
            lines.append(f"{indent}{json.dumps(key)}:" + (
                "\n" + write_yaml(item, indent + "  ") if nested else f" {write(item)}\n"))
        return "".join(lines)
    if isinstance(value, list) and value:
        return "".join(f"{indent}-\n{write_yaml(item, indent + '  ')}"
                       if isinstance(item, Obj | list) and item not in ([], Obj(()))
                       else f"{indent}- {write(item)}\n" for item in value)
    return f"{indent}{write(value)}\n"


@st.composite
def hostile_yaml_bodies(draw: st.DrawFn, document: dict[str, Any]) -> tuple[bytes, bool]:
    """(a YAML body, whether it must be refused: an integer past 64 bits where any field is,
    which no field takes). The JSON changes of ``hostile_bodies`` are YAML too (flow style)."""
    tree = node(document)
    located = paths(tree)
    scalars = [path for path, item in located if kind_of(item) not in ("object", "array")]
    change = draw(st.sampled_from(["json", "huge", "scalar", "alias", "documents", "deep"]))
    if change == "json":
        return draw(hostile_bodies(document)), False
    if change in ("huge", "scalar"):
        literals = YAML_HUGE if change == "huge" else YAML_SCALARS
        tree = replaced(tree, draw(st.sampled_from(scalars)), Raw(draw(st.sampled_from(literals))))
    elif change == "alias":
        first, second = draw(st.lists(st.sampled_from(scalars), min_size=2, max_size=2,
                                      unique=True))
        tree = replaced(replaced(tree, first, Raw("&x 1")), second, Raw("*x"))
    elif change == "deep":
        depth = draw(st.integers(MAX_DEPTH + 1, 3000))
        tree = replaced(tree, draw(st.sampled_from(scalars)), Raw("[" * depth + "]" * depth))
    text = write_yaml(tree) if draw(st.booleans()) else write(tree)
    if change == "documents":
        text += "\n---\n" + text
    return text.encode(), change == "huge"


DRY_RUN = "?dryRun=All"
"""Every YAML body and patch is sent as a dry run: a YAML change may leave a valid object
(``parallelism: 0x2``), which must be answered, and not stored."""


@fixtures
@given(request=st.one_of(
    st.tuples(st.just(NOTIFY), hostile_yaml_bodies(POD_NOTIFIER)),
    st.tuples(st.just(NOTIFICATIONS_PATH), hostile_yaml_bodies(NOTIFICATION)),
    st.tuples(st.just(f"{PODNOTIFIERS_PATH}/kept/release"), hostile_yaml_bodies(NOTIFICATION))),
    media_type=st.sampled_from(["application/yaml", "application/yaml; charset=utf-8"]))
def test_hostile_yaml_bodies(server, request, media_type) -> None:
    path, (body, refused) = request
    answer = check(server, "POST", f"{path}{DRY_RUN}", body, headers={"content-type": media_type})
    if refused:
        assert 400 <= answer.status < 500, answer


# Patches (issue 20)


STORED_PATHS = [path for path, _ in paths(node({**NOTIFICATION,
                                               "status": {"phase": "Succeeded"}}))]
"""Where a patch of the stored Notification "kept" may point."""
HOSTILE_TOKENS = ["-", "0", "01", "9" * 5000, "\u00b2", "\u0661", "~0", "~1", "~2", "~", "",
                  "..", "\x00", "\ud800", "a" * 300]


@st.composite
def pointers(draw: st.DrawFn) -> str:
    """A JSON pointer: to a member of the stored object, or with a hostile token, or not a
    pointer at all."""
    tokens = [str(token) for token in draw(st.sampled_from(STORED_PATHS))]
    if draw(st.booleans()):
        tokens.append(draw(st.one_of(st.sampled_from(HOSTILE_TOKENS), hostile_strings)))
    pointer = "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)
    return draw(st.sampled_from([pointer, pointer, pointer.lstrip("/"), pointer + "/"]))


patch_values = st.one_of(
    hostile_strings, st.integers(), st.booleans(), st.none(), st.just({"a": "b"}),
    st.just([1, "a"]), huge_literals.map(Raw), st.integers(MAX_DEPTH - 3, 200).map(deep),
    st.sampled_from(["NaN", "Infinity"]).map(Raw))


@st.composite
def json_patch_operations(draw: st.DrawFn) -> Any:
    """A JSON patch of hostile operations: any op, pointer and value, members missing or of a
    wrong type, repeated copies of the object into itself."""
    operations = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.one_of(st.sampled_from(["add", "remove", "replace", "move", "copy",
                                             "test"]), hostile_strings, st.integers()))
        members: list[tuple[str, Any]] = [("op", op), ("path", draw(pointers()))]
        if draw(st.booleans()):
            members.append(("from", draw(st.one_of(pointers(), st.integers(), st.none()))))
        if draw(st.booleans()):
            members.append(("value", draw(patch_values)))
        if draw(st.booleans()):
            members.append(draw(st.sampled_from(members)))  # a key given twice
        operations.append(Obj(tuple(members)))
    if draw(st.booleans()):
        source = draw(st.sampled_from(["", "/metadata", "/spec"]))
        operations += [Obj((("op", "copy"), ("from", source), ("path", f"/metadata/c{index}")))
                       for index in range(draw(st.integers(1, 24)))]
    return draw(st.sampled_from([operations, operations, operations[0], "not a list", 1]))


PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
APPLY_CONFIG = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
                "metadata": {"name": "kept", "labels": {"team": "db"}, "annotations": {"a": "b"}}}
MERGE_PATCH = {"metadata": {"labels": {"team": "db", "$setElementOrder/labels": [{"team": 1}]},
                            "annotations": {"a": None}}, "spec": {"parallelism": 3}}


@st.composite
def hostile_patches(draw: st.DrawFn) -> tuple[str, bytes]:
    """(the patch's media type, its body)."""
    kind = draw(st.sampled_from([PATCH, PATCH, MERGE, STRATEGIC, APPLY, APPLY]))
    if kind == PATCH:
        operations = draw(json_patch_operations())
        return kind, (write(operations) if not isinstance(operations, str)
                      else operations).encode()
    if kind == APPLY:
        return kind, draw(hostile_yaml_bodies(APPLY_CONFIG))[0]
    return kind, draw(hostile_bodies(MERGE_PATCH))


@fixtures
@given(patch=hostile_patches(),
       target=st.sampled_from([f"{NOTIFICATIONS_PATH}/kept", f"{PODNOTIFIERS_PATH}/kept",
                               f"{NOTIFICATIONS_PATH}/missing"]))
def test_hostile_patches(server, patch, target) -> None:
    media_type, body = patch
    answer = check(server, "PATCH", f"{target}{DRY_RUN}&fieldManager=test", body,
                   headers={"content-type": media_type})
    assert answer.status != 201 or target.endswith("/missing"), answer


def test_a_json_patch_of_too_many_operations_is_413(server) -> None:
    operations = [{"op": "test", "path": "/kind", "value": "Notification"}] * 10_001
    answer = check(server, "PATCH", f"{NOTIFICATIONS_PATH}/kept", json.dumps(operations).encode(),
                   headers={"content-type": PATCH})
    assert answer.status == 413, answer


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
