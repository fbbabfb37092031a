"""The http action: its declaration (every refusal names its field), and its requests sent to
a real HTTP server on loopback (no mock of the HTTP client): success, a non-2xx, a redirect
not followed, a refused connection, a timeout, a bounded answer, HTTPS without verification,
and the record entry the runner stores."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from apiserver.api.field_errors import CauseReason, FieldError
from apiserver.notifier import records
from apiserver.notifier.declarations import (
    ANNOTATION_PATH,
    InvalidNotifiers,
    Notifier,
    container_ports,
    parse_notifiers,
)
from apiserver.notifier.http_action import HttpReason, PodRequests, target
from apiserver.notifier.http_declaration import MAX_BODY_BYTES, HttpAction
from certs.authority import new_ca
from tests.support.pod_http import Answer, PodHttpServer

HTTP_PATH = f"{ANNOTATION_PATH}.web[0].action.http"
PORTS = {"web": {"web": 9090, "metrics": 9091}}


def declare(http: dict[str, Any], **notifier: Any) -> str:
    return json.dumps({"web": [{"name": "reload", "action": {"http": http}, **notifier}]})


def errors_of(annotation: str, **kwargs: Any) -> list[FieldError]:
    try:
        parse_notifiers(annotation, **kwargs)
    except InvalidNotifiers as invalid:
        return invalid.errors
    return []


def only_error(annotation: str, **kwargs: Any) -> FieldError:
    errors = errors_of(annotation, containers=PORTS, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


# The declaration


def test_an_http_action_with_its_defaults_and_a_named_port_resolved() -> None:
    parsed = parse_notifiers(declare({"method": "POST", "port": "web"}), containers=PORTS)
    assert parsed["web"] == (Notifier("reload", 30, HttpAction("POST", 9090, "/", "HTTP")),)


def test_every_field_of_an_http_action() -> None:
    parsed = parse_notifiers(declare({
        "method": "PUT", "port": 8443, "path": "/_flush?wait=true", "scheme": "HTTPS",
        "httpHeaders": [{"name": "X-Token", "value": "a b"}, {"name": "X-Empty", "value": ""}],
        "body": '{"flush": true}'}, timeoutSeconds=5), containers=PORTS)
    assert parsed["web"] == (Notifier("reload", 5, HttpAction(
        "PUT", 8443, "/_flush?wait=true", "HTTPS", (("X-Token", "a b"), ("X-Empty", "")),
        '{"flush": true}')),)


def test_a_port_name_the_container_does_not_declare_is_refused() -> None:
    error = only_error(declare({"method": "POST", "port": "admin"}))
    assert (error.field, error.reason) == (f"{HTTP_PATH}.port", CauseReason.NOT_SUPPORTED)
    assert '"metrics", "web"' in error.message and "no port of this name" in error.message


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_a_port_out_of_range_is_refused(port: int) -> None:
    error = only_error(declare({"method": "POST", "port": port}))
    assert error.field == f"{HTTP_PATH}.port"
    assert "between 1 and 65535" in error.message


@pytest.mark.parametrize("port", ["Web", "a" * 16, "80", "-web", True, 1.5])
def test_a_port_that_is_neither_a_number_nor_a_port_name_is_refused(port: Any) -> None:
    assert only_error(declare({"method": "POST", "port": port})).field == f"{HTTP_PATH}.port"


@pytest.mark.parametrize("method", ["DELETE", "post", "", None])
def test_a_method_outside_the_list_is_refused(method: Any) -> None:
    error = only_error(declare({"method": method, "port": 80}))
    assert error.field == f"{HTTP_PATH}.method"
    assert "GET" in error.message and "PUT" in error.message


@pytest.mark.parametrize(("header", "where"), [
    ({"name": "Bad Header", "value": "x"}, ".name"),
    ({"name": "X-A", "value": "one\r\nX-Injected: two"}, ".value"),
    ({"name": "X-A", "value": " padded"}, ".value"),
    ({"name": "X-A", "value": "caf\u00e9"}, ".value"),
    ({"name": "Host", "value": "example.com"}, ".name"),
    ({"name": "proxy-authorization", "value": "x"}, ".name"),
    ({"name": "Content-Length", "value": "5"}, ".name"),
    ({"name": "X-A"}, ".value"),
])
def test_a_header_that_is_not_a_valid_http_header_is_refused(header: dict[str, str],
                                                              where: str) -> None:
    error = only_error(declare({"method": "POST", "port": 80, "httpHeaders": [header]}))
    assert error.field == f"{HTTP_PATH}.httpHeaders[0]{where}"


def test_too_many_headers_are_refused() -> None:
    headers = [{"name": f"X-{i}", "value": "v"} for i in range(33)]
    error = only_error(declare({"method": "POST", "port": 80, "httpHeaders": headers}))
    assert error.field == f"{HTTP_PATH}.httpHeaders" and "at most 32" in error.message


def test_a_body_over_its_bound_is_refused() -> None:
    error = only_error(declare({"method": "POST", "port": 80, "body": "x" * (MAX_BODY_BYTES + 1)}))
    assert error.field == f"{HTTP_PATH}.body" and f"no more than {MAX_BODY_BYTES}" in error.message


def test_a_get_with_a_body_is_refused() -> None:
    error = only_error(declare({"method": "GET", "port": 80, "body": "x"}))
    assert error.field == f"{HTTP_PATH}.body"


@pytest.mark.parametrize("path", ["reload", "/a b", "/a#b", "/caf\u00e9", "/" + "a" * 2048])
def test_a_path_that_is_not_an_absolute_path_is_refused(path: str) -> None:
    assert only_error(declare({"method": "POST", "port": 80, "path": path})).field == (
        f"{HTTP_PATH}.path")


def test_there_is_no_host_field() -> None:
    error = only_error(declare({"method": "POST", "port": 80, "host": "10.0.0.1"}))
    assert (error.field, error.reason) == (f"{HTTP_PATH}.host", CauseReason.NOT_SUPPORTED)
    assert '"path"' in error.message


def test_an_http_notifier_cannot_be_held_nor_given_a_grace_period() -> None:
    held = only_error(declare({"method": "POST", "port": 80}, hold={"maxHoldSeconds": 60}))
    assert held.field == f"{ANNOTATION_PATH}.web[0].hold"
    assert "http notifier cannot be held" in held.message
    grace = only_error(declare({"method": "POST", "port": 80}, terminationGracePeriodSeconds=3))
    assert grace.field == f"{ANNOTATION_PATH}.web[0].terminationGracePeriodSeconds"


def test_http_is_exclusive_with_exec_and_signal() -> None:
    annotation = json.dumps({"web": [{"name": "reload", "action": {
        "signal": "SIGHUP", "http": {"method": "POST", "port": 80}}}]})
    error = only_error(annotation)
    assert error.field == f"{ANNOTATION_PATH}.web[0].action"
    assert "signal and http are exclusive" in error.message


def test_container_ports_reads_the_named_ports() -> None:
    pod = {"spec": {"containers": [
        {"name": "web", "ports": [{"name": "web", "containerPort": 9090}, {"containerPort": 1}]},
        {"name": "side"}]}}
    assert container_ports(pod) == {"web": {"web": 9090}, "side": {}}


def test_the_target_is_the_pod_ip_and_nothing_else() -> None:
    url = target("127.244.0.7", HttpAction("POST", 8080, "//other.example/x"))
    assert (url.host, url.port, url.raw_path) == ("127.244.0.7", 8080, b"//other.example/x")
    url = target("127.244.0.7", HttpAction("POST", 80, "/@other.example:80/x"))
    assert (url.host, url.port) == ("127.244.0.7", None)  # 80, the default
    assert str(target("::1", HttpAction("GET", 8443, "/a?b=c", "HTTPS"))) == (
        "https://[::1]:8443/a?b=c")
    with pytest.raises(ValueError):
        target("db.example", HttpAction("GET", 80))


# The requests


@pytest.fixture
async def requests() -> AsyncIterator[PodRequests]:
    sender = PodRequests()
    yield sender
    await sender.aclose()


async def test_a_2xx_succeeds_with_its_status_code_and_body(requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(204, b"")) as server:
        result = await requests("127.0.0.1", HttpAction(
            "POST", server.port, "/-/reload?x=1", headers=(("X-Token", "t"),), body="{}"),
            timeout_seconds=5, head_bytes=100)
    assert (result.reason, result.status_code) == (HttpReason.COMPLETED, 204)
    (received,) = server.requests
    assert (received.method, received.path, received.body) == ("POST", "/-/reload?x=1", b"{}")
    assert received.headers["x-token"] == "t"
    assert received.headers["host"] == f"127.0.0.1:{server.port}"
    assert received.headers["user-agent"] == "container-notifier"


async def test_a_non_2xx_fails_and_a_redirect_is_not_followed(requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(503, b"draining")) as server:
        failed = await requests("127.0.0.1", HttpAction("GET", server.port, "/x"),
                                timeout_seconds=5, head_bytes=100)
        server.answer = Answer(302, b"", headers={"Location": "http://127.0.0.1:1/elsewhere"})
        redirected = await requests("127.0.0.1", HttpAction("GET", server.port, "/x"),
                                    timeout_seconds=5, head_bytes=100)
    assert (failed.reason, failed.status_code, failed.body) == (
        HttpReason.NON_SUCCESS_STATUS_CODE, 503, b"draining")
    assert "answered 503" in failed.message
    assert (redirected.reason, redirected.status_code) == (
        HttpReason.NON_SUCCESS_STATUS_CODE, 302)
    assert "redirects are not followed" in redirected.message
    assert server.count() == 2


async def test_the_answer_is_kept_bounded(requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(200, b"a" * 100_000)) as server:
        result = await requests("127.0.0.1", HttpAction("GET", server.port),
                                timeout_seconds=5, head_bytes=64)
    assert (result.body, result.body_truncated) == (b"a" * 64, True)


async def test_a_refused_connection_fails_as_such(requests: PodRequests) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await requests("127.0.0.1", HttpAction("POST", port), timeout_seconds=5,
                            head_bytes=64)
    assert (result.reason, result.status_code) == (HttpReason.CONNECTION_REFUSED, None)
    assert f"port {port}" in result.message


async def test_an_answer_later_than_the_timeout_fails_timeout(requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(delay_seconds=3)) as server:
        result = await requests("127.0.0.1", HttpAction("POST", server.port),
                                timeout_seconds=1, head_bytes=64)
    assert result.reason is HttpReason.TIMEOUT
    assert server.count() == 1  # sent once, not retried


async def test_a_pod_without_an_ip_sends_nothing(requests: PodRequests) -> None:
    result = await requests("", HttpAction("POST", 80), timeout_seconds=1, head_bytes=64)
    assert result.reason is HttpReason.REQUEST_FAILED and "no IP address" in result.message


async def test_a_port_name_left_unresolved_is_worded_as_such_and_sends_nothing(
        requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1") as server:
        result = await requests("127.0.0.1", HttpAction("POST", "web"), timeout_seconds=1,
                                head_bytes=64)
        assert server.count() == 0
    assert result.reason is HttpReason.REQUEST_FAILED
    assert "port 'web' names no port of the container" in result.message
    assert "IP address" not in result.message


async def test_https_is_not_verified(requests: PodRequests, tmp_path: Path) -> None:
    new_ca("a pod's own certificate").write(tmp_path / "tls.crt", tmp_path / "tls.key")
    with PodHttpServer("127.0.0.1", tls=(tmp_path / "tls.crt", tmp_path / "tls.key")) as server:
        result = await requests("127.0.0.1", HttpAction("GET", server.port, scheme="HTTPS"),
                                timeout_seconds=5, head_bytes=64)
        plain = await requests("127.0.0.1", HttpAction("GET", server.port, scheme="HTTP"),
                               timeout_seconds=5, head_bytes=64)
    assert (result.reason, result.status_code, result.body) == (
        HttpReason.COMPLETED, 200, b"ok\n")
    assert plain.reason is HttpReason.REQUEST_FAILED  # HTTP to a TLS port: no valid answer


async def test_the_record_entry_of_a_request(requests: PodRequests) -> None:
    with PodHttpServer("127.0.0.1", answer=Answer(500, b"boom")) as server:
        result = await requests("127.0.0.1", HttpAction("POST", server.port),
                                timeout_seconds=5, head_bytes=64)
    entry = records.http_result("web", "cid", result)
    assert {key: entry[key] for key in ("phase", "reason", "statusCode", "responseBody",
                                        "responseBodyTruncated", "containerID")} == {
        "phase": "Failed", "reason": "NonSuccessStatusCode", "statusCode": 500,
        "responseBody": "boom", "responseBodyTruncated": False, "containerID": "cid"}
    assert records.outcome(entry) == "HTTP status 500"
    assert "exitCode" not in entry and "stdout" not in entry


def test_an_undeclared_port_name_is_reported_with_every_other_problem() -> None:
    annotation = json.dumps({"web": [
        {"name": "a", "action": {"http": {"method": "POST", "port": "admin"}}},
        {"name": "b", "action": {"http": {"method": "POST", "port": 70000}}}]})
    fields = [error.field for error in errors_of(annotation, containers=PORTS)]
    assert sorted(fields) == [f"{ANNOTATION_PATH}.web[0].action.http.port",
                              f"{ANNOTATION_PATH}.web[1].action.http.port"]
