"""The pods/notify handler's request reading: query options and the JSON body (415, 413)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from starlette.requests import Request

from apiserver.api.status import status_body
from apiserver.errors import APIError
from apiserver.handlers.body import MAX_BODY_BYTES, read_object
from apiserver.handlers.notify import MAX_WAIT_SECONDS, query_options


def http_request(query: str = "", content_type: str | None = "application/json",
                 chunks: Sequence[bytes] = (b"{}",)) -> tuple[Request, list[int]]:
    """A Starlette request whose body arrives in `chunks`; the list counts chunks read."""
    headers = [(b"content-type", content_type.encode())] if content_type is not None else []
    pending, read = list(chunks), []

    async def receive() -> dict[str, Any]:
        if not pending:
            return {"type": "http.request", "body": b"", "more_body": False}
        chunk = pending.pop(0)
        read.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    scope = {"type": "http", "method": "POST", "path": "/notify", "raw_path": b"/notify",
             "query_string": query.encode(), "headers": headers, "http_version": "1.1",
             "scheme": "https", "server": ("test", 443), "client": ("client", 1)}
    return Request(scope, receive), read


def bad_request(query: str) -> dict[str, Any]:
    with pytest.raises(APIError) as caught:
        query_options(http_request(query)[0])
    assert caught.value.code == 400
    assert status_body(caught.value)["reason"] == "BadRequest"
    return status_body(caught.value)


# query_options


@pytest.mark.parametrize(("query", "expected"), [
    ("", (False, 0)),
    ("dryRun=All", (True, 0)),
    ("dryRun=All&dryRun=All", (True, 0)),
    ("waitSeconds=0", (False, 0)),
    ("waitSeconds=30", (False, 30)),
    (f"waitSeconds={MAX_WAIT_SECONDS}&dryRun=All", (True, MAX_WAIT_SECONDS)),
])
def test_query_options(query: str, expected: tuple[bool, int]) -> None:
    assert query_options(http_request(query)[0]) == expected


@pytest.mark.parametrize("query", ["dryRun=all", "dryRun=true", "dryRun=All&dryRun=None",
                                   "dryRun="])
def test_dry_run_other_than_all(query: str) -> None:
    assert "use dryRun=All" in bad_request(query)["message"]


@pytest.mark.parametrize("value", ["-1", str(MAX_WAIT_SECONDS + 1), "1.5", "ten", ""])
def test_wait_seconds_out_of_bounds(value: str) -> None:
    message = bad_request(f"waitSeconds={value}")["message"]
    assert message.startswith(f"waitSeconds: invalid value {value!r}: use a whole number from "
                              f"0 to {MAX_WAIT_SECONDS}")


# read_object


@pytest.mark.parametrize("content_type", [
    None, "application/json", "application/json; charset=utf-8", "Application/JSON"])
async def test_json_body(content_type: str | None) -> None:
    obj = {"kind": "PodNotifier", "spec": {"notifier": "quiesce"}}
    request, _ = http_request(content_type=content_type, chunks=[json.dumps(obj).encode()])
    assert (await read_object(request)).members == obj


async def test_body_in_several_chunks() -> None:
    request, read = http_request(chunks=[b'{"kind": ', b'"PodNotifier"', b"}"])
    assert (await read_object(request)).members == {"kind": "PodNotifier"}
    assert read == [9, 13, 1]


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/vnd.kubernetes.protobuf", "application/merge-patch+json"])
async def test_other_media_type_is_415(content_type: str) -> None:
    request, read = http_request(content_type=content_type)
    with pytest.raises(APIError) as caught:
        await read_object(request)
    assert caught.value.code == 415
    assert status_body(caught.value)["reason"] == "UnsupportedMediaType"
    assert status_body(caught.value)["message"].endswith("accepted media types include: "
                                                   "application/json, application/yaml")
    assert read == []


async def test_body_of_exactly_the_limit_is_read() -> None:
    padding = MAX_BODY_BYTES - len(b'{"pad": ""}')
    raw = b'{"pad": "' + b"x" * padding + b'"}'
    assert len(raw) == MAX_BODY_BYTES
    request, _ = http_request(chunks=[raw[:1000], raw[1000:]])
    assert len((await read_object(request)).members["pad"]) == padding


async def test_body_over_the_limit_is_413_without_reading_the_rest() -> None:
    chunk = b" " * (256 * 1024)
    request, read = http_request(chunks=[chunk] * 4 + [b" "] + [chunk] * 10)
    with pytest.raises(APIError) as caught:
        await read_object(request)
    assert caught.value.code == 413
    assert status_body(caught.value)["reason"] == "RequestEntityTooLarge"
    assert f"larger than {MAX_BODY_BYTES} bytes" in status_body(caught.value)["message"]
    assert len(read) == 5


@pytest.mark.parametrize(("raw", "message"), [
    (b"not json", "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
])
async def test_body_not_a_json_object_is_400(raw: bytes, message: str) -> None:
    request, _ = http_request(content_type=None, chunks=[raw])
    with pytest.raises(APIError) as caught:
        await read_object(request)
    assert caught.value.code == 400
    assert message in status_body(caught.value)["message"]


async def test_a_yaml_body_is_read_as_its_json() -> None:
    """kube-apiserver reads YAML wherever it reads JSON; the same guards then apply."""
    raw = b"apiVersion: notifier.x-k8s.io/v1alpha1\nkind: PodNotifier\nspec:\n  notifier: q\n"
    request, _ = http_request(content_type="application/yaml", chunks=(raw,))
    assert (await read_object(request)).members == {
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "spec": {"notifier": "q"}}
