"""Issue 9, items 5 and 6: each input that made the server answer 500 (or decode leniently),
sent to the whole server in-process (``InProcessServer``: build_app with every real component).

Each answer must be the 4xx ``metav1.Status`` named here, its message encodable and free of
control characters and surrogates, nothing stored, and the server must answer normally after.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from apiserver.api import json_input
from apiserver.api.decoding import Body, FieldValidation, decode
from apiserver.api.types import PodNotifier
from apiserver.api.warning_headers import warning_header
from apiserver.errors import BadRequest, quoted
from apiserver.notifier.declarations import InvalidNotifiers, parse_notifiers
from apiserver.registry.resources import NOTIFICATIONS, PODNOTIFIERS
from tests.unit.conftest import Answer, InProcessServer, strings

API = "/apis/notifier.x-k8s.io/v1alpha1"
NS = f"{API}/namespaces/default"
NOTIFY = f"{NS}/pods/db-0/notify"
NOTIFICATIONS_PATH = f"{NS}/notifications"
PODNOTIFIERS_PATH = f"{NS}/podnotifiers"
DEEP = "[" * 50_000
HUGE = "9" * 5000


def pod_notifier(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
            "spec": {"notifier": "quiesce", **spec}}


def notification(metadata: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": "n1"} if metadata is None else metadata,
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "notifier": "quiesce", **spec}}


@pytest.fixture(scope="module")
def server(in_process_server: InProcessServer) -> InProcessServer:
    """The server with one record and one finished Notification stored (to delete)."""
    in_process_server.create_finished(PODNOTIFIERS, {
        **pod_notifier(), "metadata": {"name": "kept", "namespace": "default"}})
    in_process_server.create_finished(NOTIFICATIONS, {
        **notification(), "metadata": {"name": "kept", "namespace": "default"}})
    return in_process_server


def refused(server: InProcessServer, code: int, method: str, target: str, body: bytes = b"",
            **headers: str) -> dict[str, Any]:
    """Send the request; assert it is answered ``code`` with a Status, that nothing was stored
    and that the server still serves; return the Status."""
    before = server.resource_version()
    answer = server.request(method, target, body=body, headers=headers)
    status = status_of(answer)
    assert answer.status == code, status
    assert status["code"] == code
    assert server.resource_version() == before
    assert server.request("GET", PODNOTIFIERS_PATH).status == 200
    return status


def status_of(answer: Answer) -> dict[str, Any]:
    """The Status of an error answer; its message must be safe to print."""
    assert answer.header_values("content-type") == ["application/json"], answer
    status = json.loads(answer.body)
    assert status["kind"] == "Status" and status["apiVersion"] == "v1", status
    assert status["message"].isprintable(), status["message"]
    return status


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def token(document: str) -> str:
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


# Deep nesting: RecursionError in every decoder.


@pytest.mark.parametrize(("method", "target"), [
    ("POST", NOTIFY), ("POST", NOTIFICATIONS_PATH), ("DELETE", f"{PODNOTIFIERS_PATH}/kept"),
    ("DELETE", f"{NOTIFICATIONS_PATH}/kept"), ("DELETE", PODNOTIFIERS_PATH)])
def test_deeply_nested_bodies_are_400_before_decoding(server, method, target) -> None:
    status = refused(server, 400, method, target, DEEP.encode())
    assert "nested 50000 levels deep; at most 32" in status["message"]


def test_nesting_inside_a_valid_envelope_is_counted(server) -> None:
    body = json.dumps(pod_notifier(x=json.loads("[" * 40 + "]" * 40)))
    assert "nested 42 levels deep" in refused(server, 400, "POST", NOTIFY, body.encode())[
        "message"]


def test_a_deeply_nested_continue_token_is_400(server) -> None:
    status = refused(server, 400, "GET", f"{PODNOTIFIERS_PATH}?limit=1&continue={token(DEEP)}")
    assert status["message"] == "the continue token is malformed; list again without it"


def test_brackets_in_strings_do_not_count() -> None:
    assert json_input.nesting_depth('{"a": "[[[[{{{{", "b": [["\\"]]]]"]]}') == 3


# Encodings: Python's json.loads(bytes) reads UTF-16 and UTF-32; Go's decoder does not.


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
@pytest.mark.parametrize(("method", "target", "document"), [
    ("POST", NOTIFY, pod_notifier()), ("POST", NOTIFICATIONS_PATH, notification()),
    ("DELETE", f"{PODNOTIFIERS_PATH}/kept", {"kind": "DeleteOptions"})])
def test_bodies_that_are_not_utf8_are_400(server, encoding, method, target, document) -> None:
    status = refused(server, 400, method, target, json.dumps(document).encode(encoding))
    assert "is not UTF-8" in status["message"]


def test_invalid_utf8_is_400(server) -> None:
    body = raw(pod_notifier()).replace(b"quiesce", b"qui\xe9sce")
    assert "is not UTF-8: byte" in refused(server, 400, "POST", NOTIFY, body)["message"]


# Lone surrogates: the message echoed them and could not be encoded (500).


SURROGATE = "\ud800"


@pytest.mark.parametrize(("document", "where"), [
    (notification({"name": f"a{SURROGATE}"}), "the value at metadata.name"),
    (notification({"name": "n", "labels": {f"k{SURROGATE}": "v"}}),
     'the field name at metadata.labels."k\\ud800"'),
    (notification({"name": "n", "labels": {"k": SURROGATE}}), "the value at metadata.labels.k"),
    (notification(selector={"matchExpressions": [
        {"key": SURROGATE, "operator": "Exists"}]}),
     "the value at spec.selector.matchExpressions[0].key"),
    (notification(**{f"x{SURROGATE}": 1}), 'the field name at spec."x\\ud800"'),
    (notification({"name": "n", "annotations": {SURROGATE: "v"}}),
     'the field name at metadata.annotations."\\ud800"'),
    (notification(notifier=f"\udc00{SURROGATE}"), "the value at spec.notifier"),
])
def test_lone_surrogates_are_400_naming_the_field(server, document, where) -> None:
    body = json.dumps(document).encode()  # ensure_ascii: the surrogates as \\ud800 escapes
    status = refused(server, 400, "POST", NOTIFICATIONS_PATH, body)
    assert status["message"].startswith(f"the request body is not valid Unicode: {where} holds "
                                        "a lone UTF-16 surrogate")


def test_a_surrogate_pair_is_a_character(server) -> None:
    body = json.dumps(notification({"name": "n", "labels": {"k": "\U0001f600"}})).encode()
    status = refused(server, 422, "POST", NOTIFICATIONS_PATH, body)
    assert status["details"]["causes"][0]["field"] == "metadata.labels[k]"


def test_a_surrogate_in_a_continue_token_is_400(server) -> None:
    forged = token('{"rv": 1, "start": ["default", "\\ud800"]}')
    refused(server, 400, "GET", f"{PODNOTIFIERS_PATH}?limit=1&continue={forged}")


@pytest.mark.parametrize("document", [
    '{"rv": true, "start": ["default", "a"]}', '{"rv": 1, "start": {"a": 1, "b": 2}}',
    '{"rv": 99999999999999999999, "start": ["default", "a"]}', '{"rv": 1e400, "start": []}',
    '{"rv": NaN, "start": ["default", "a"]}', '"x"', "[1]"])
def test_forged_continue_tokens_are_400(server, document) -> None:
    refused(server, 400, "GET", f"{PODNOTIFIERS_PATH}?limit=1&continue={token(document)}")


def test_a_very_long_continue_token_is_400(server) -> None:
    refused(server, 400, "GET", f"{PODNOTIFIERS_PATH}?limit=1&continue={'A' * 100_000}")


# Numbers: the 4300-digit limit, float overflow, NaN and Infinity.


def test_a_huge_integer_in_a_body_is_422(server) -> None:
    body = json.dumps(pod_notifier()).replace('"quiesce"', f'"quiesce", "timeoutSeconds": {HUGE}')
    status = refused(server, 422, "POST", NOTIFY, body.encode())
    [cause] = status["details"]["causes"]
    assert cause["field"] == "spec.timeoutSeconds"
    assert cause["message"] == "Invalid value: Infinity: must be a whole number"


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "9223372036854775808", HUGE])
def test_out_of_range_names_are_422_and_not_echoed_as_the_name(server, literal) -> None:
    body = json.dumps(notification({"name": "x"})).replace('"x"', literal)
    status = refused(server, 422, "POST", NOTIFICATIONS_PATH, body.encode())
    assert "name" not in status["details"]
    assert status["details"]["causes"][0]["field"] == "metadata.name"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(server, literal) -> None:
    body = json.dumps(notification({"name": "x"})).replace('"x"', literal)
    status = refused(server, 400, "POST", NOTIFICATIONS_PATH, body.encode())
    assert f"{literal.lstrip('-')} is not a JSON number" in status["message"]


@pytest.mark.parametrize("query", [
    f"watch=true&resourceVersion={HUGE}", f"resourceVersion={HUGE}&watch=1",
    "watch=true&resourceVersion=9223372036854775808", f"limit={HUGE}",
    "limit=9223372036854775808", f"watch=true&timeoutSeconds={'9' * 400}",
    "watch=true&timeoutSeconds=1e400", "limit=1_0", "limit=%EF%BC%91", "timeoutSeconds=+-1"])
def test_out_of_range_query_integers_are_400(server, query) -> None:
    status = refused(server, 400, "GET", f"{PODNOTIFIERS_PATH}?{query}")
    assert len(status["message"]) < 300


def test_largest_query_integers_are_served(server) -> None:
    answer = server.request("GET", f"{PODNOTIFIERS_PATH}?limit=9223372036854775807"
                                   "&timeoutSeconds=9223372036854775807")
    assert answer.status == 200
    answer = server.request("GET", f"{PODNOTIFIERS_PATH}?watch=true"
                                   "&timeoutSeconds=9223372036854775807")
    assert answer.status == 200


def test_a_huge_integer_in_the_annotation_is_a_field_error() -> None:
    annotation = ('{"db": [{"name": "quiesce", "action": {"exec": {"command": ["sync"]}}, '
                  f'"timeoutSeconds": {HUGE}}}]}}')
    with pytest.raises(InvalidNotifiers) as raised:
        parse_notifiers(annotation)
    assert [error.field for error in raised.value.errors] == [
        "metadata.annotations[notifier.x-k8s.io/notifiers].db[0].timeoutSeconds"]


def test_a_surrogate_in_an_annotation_key_is_escaped_in_messages() -> None:
    with pytest.raises(InvalidNotifiers) as raised:
        parse_notifiers('{"\\ud800": []}')
    for error in raised.value.errors:
        assert str(error).isprintable() and "\\ud800" in str(error)


# Duplicate and unknown fields follow fieldValidation (Strict by default).


DUPLICATE = (b'{"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification", '
             b'"metadata": {"name": "n1"}, "spec": {"selector": {"matchLabels": {"app": "db"}}, '
             b'"notifier": "BAD NAME", "notifier": "quiesce"}}')


@pytest.mark.parametrize("query", ["", "?fieldValidation=Strict", "?fieldValidation="])
def test_duplicate_fields_are_400_under_strict(server, query) -> None:
    status = refused(server, 400, "POST", f"{NOTIFICATIONS_PATH}{query}", DUPLICATE)
    assert status["message"] == 'strict decoding error: duplicate field "spec.notifier"'
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid",
                                            "message": 'duplicate field "spec.notifier"',
                                            "field": "spec.notifier"}]


def test_duplicate_fields_are_a_warning_under_warn(server) -> None:
    before = server.resource_version()
    answer = server.request("POST", f"{NOTIFICATIONS_PATH}?fieldValidation=Warn&dryRun=All",
                            body=DUPLICATE)
    assert answer.status == 201, answer.body
    assert json.loads(answer.body)["spec"]["notifier"] == "quiesce"  # the last wins
    assert answer.header_values("warning") == ['299 - "duplicate field \\"spec.notifier\\""']
    assert server.resource_version() == before


def test_duplicate_fields_are_accepted_under_ignore(server) -> None:
    answer = server.request("POST", f"{NOTIFICATIONS_PATH}?fieldValidation=Ignore&dryRun=All",
                            body=DUPLICATE)
    assert answer.status == 201, answer.body
    assert answer.header_values("warning") == []


def test_unknown_fields_are_dropped_with_a_warning_under_warn(server) -> None:
    document = notification({"name": "n1", "uid": "mine"}, colour="blue")
    answer = server.request("POST", f"{NOTIFICATIONS_PATH}?fieldValidation=Warn&dryRun=All",
                            body=raw(document))
    assert answer.status == 201, answer.body
    created = json.loads(answer.body)
    assert "colour" not in created["spec"] and created["metadata"].get("uid") != "mine"
    assert answer.header_values("warning") == ['299 - "unknown field \\"metadata.uid\\""',
                                               '299 - "unknown field \\"spec.colour\\""']


def test_unknown_fields_are_dropped_silently_under_ignore() -> None:
    decoded = decode(PodNotifier, Body(pod_notifier(colour="blue")), namespace="prod",
                     limits={"max_timeout_seconds": 60}, field_validation=FieldValidation.IGNORE)
    assert decoded.obj is not None and decoded.warnings == ()


def test_unknown_fields_are_400_under_strict(server) -> None:
    status = refused(server, 400, "POST", NOTIFY, raw(pod_notifier(colour="blue")))
    assert status["message"] == 'strict decoding error: unknown field "spec.colour"'


def test_an_unknown_field_value_is_still_checked_under_warn(server) -> None:
    refused(server, 422, "POST", f"{NOTIFY}?fieldValidation=Warn",
            raw(pod_notifier(colour="blue", timeoutSeconds=0)))


@pytest.mark.parametrize("value", ["strict", "Bogus", "%1b%5B31m"])
def test_an_unsupported_field_validation_is_422(server, value) -> None:
    status = refused(server, 422, "POST", f"{NOTIFY}?fieldValidation={value}", raw(pod_notifier()))
    assert status["message"].startswith('CreateOptions.meta.k8s.io "" is invalid: fieldValidation:'
                                        " Unsupported value: ")
    assert status["message"].endswith('supported values: "", "Ignore", "Strict", "Warn"')


@pytest.mark.parametrize("value", [[], [1], "", 0, False, "x"])
@pytest.mark.parametrize("key", ["metadata", "spec"])
def test_metadata_and_spec_must_be_objects(server, key, value) -> None:
    document = notification()
    document[key] = value
    status = refused(server, 400, "POST", NOTIFICATIONS_PATH, raw(document))
    assert status["message"] == f"{key} must be a JSON object"


# Nothing user-supplied is echoed unescaped.


@pytest.mark.parametrize(("code", "method", "target", "body"), [
    (400, "POST", NOTIFY, raw(pod_notifier(podName="a\x1b[31mred"))),
    (400, "POST", NOTIFICATIONS_PATH, raw({**notification(), "kind": "\x1b[2J"})),
    (400, "POST", NOTIFICATIONS_PATH, raw(notification({"name": "n", "namespace": "\x07"}))),
    (422, "POST", NOTIFICATIONS_PATH, raw(notification({"name": "a\nb"}))),
    (422, "POST", NOTIFICATIONS_PATH, raw(notification({"name": "n", "labels": {"\x1b": "v"}}))),
    (400, "DELETE", f"{PODNOTIFIERS_PATH}/kept", raw({"kind": "\x1b"})),
    (422, "DELETE", f"{PODNOTIFIERS_PATH}/kept", raw({"dryRun": ["\x1b[31m"]})),
    (409, "DELETE", f"{PODNOTIFIERS_PATH}/kept", raw({"preconditions": {"uid": "\x1b"}})),
    (400, "GET", f"{PODNOTIFIERS_PATH}?limit=%1b%5B31m", b""),
    (400, "GET", f"{PODNOTIFIERS_PATH}?watch=%1b", b""),
    (400, "GET", f"{PODNOTIFIERS_PATH}?watch=1&resourceVersion=%1b", b""),
])
def test_control_characters_are_escaped_in_messages(server, code, method, target, body) -> None:
    status = refused(server, code, method, target, body)
    assert all(text.isprintable() for text in strings(status)), status


@pytest.mark.parametrize("document", [
    {"kind": "DeleteOptions", "preconditions": []}, {"dryRun": "All"},
    {"gracePeriodSeconds": "5"}, {"gracePeriodSeconds": True}, {"gracePeriodSeconds": 1e400},
    {"orphanDependents": "yes"}, {"propagationPolicy": 1}, {"preconditions": {"uid": 5}},
    {"apiVersion": {}}])
def test_delete_options_of_the_wrong_type_are_400(server, document) -> None:
    refused(server, 400, "DELETE", f"{PODNOTIFIERS_PATH}/kept", raw(document))


def test_delete_options_with_duplicate_fields_are_read_as_go_does(server) -> None:
    """kube-apiserver does not decode DeleteOptions strictly: the last value wins."""
    body = b'{"dryRun": ["Nope"], "dryRun": ["All"]}'
    answer = server.request("DELETE", f"{PODNOTIFIERS_PATH}/kept", body=body)
    assert answer.status == 200, answer.body


# The pieces.


def test_warning_headers_are_printable_ascii() -> None:
    assert warning_header('unknown field "spec.\u00e9\\x\n"') == (
        '299 - "unknown field \\"spec.\\u00e9\\\\x\\u000a\\""')


def test_quoted_keeps_ordinary_text_and_escapes_the_rest() -> None:
    assert quoted("db-0") == '"db-0"'
    assert quoted("a\x1bb\ud800") == '"a\\x1bb\\ud800"'


def test_integers_past_64_bits_read_as_floats() -> None:
    document = json_input.read(f'[{2**63 - 1}, {2**63}, {-(2**63)}, {HUGE}]', what="x")
    assert document.value == [2**63 - 1, float(2**63), -(2**63), float("inf")]


def test_duplicates_are_reported_by_path() -> None:
    document = json_input.read('{"a": {"b": [{"c": 1, "c": 2}]}, "a": {"d": 1, "d": 2}}',
                               what="x")
    assert document.value == {"a": {"d": 2}}
    assert document.duplicates == ("a", "a.d")  # not those in a value a duplicate replaced


def test_a_byte_order_mark_is_refused() -> None:
    with pytest.raises(BadRequest):
        json_input.read(b"\xef\xbb\xbf{}", what="x")
