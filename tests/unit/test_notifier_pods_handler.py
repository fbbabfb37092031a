"""The pods routes of notifier.x-k8s.io in the whole server (build_app, in process): answers
in JSON and as a Table, and the 4xx of what is not served (watch, resourceVersion, bad
tokens and selectors)."""

from __future__ import annotations

import json

import pytest

API = "/apis/notifier.x-k8s.io/v1alpha1"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def test_get_and_list_answer_notifier_pods(in_process_server):
    got = in_process_server.request("GET", f"{API}/namespaces/default/pods/db-0")
    assert got.status == 200, got.body
    found = json.loads(got.body)
    assert (found["kind"], found["metadata"]["name"], found["containers"]) == (
        "NotifierPod", "db-0", [])
    listed = in_process_server.request("GET", f"{API}/pods")
    assert listed.status == 200, listed.body
    document = json.loads(listed.body)
    assert document["kind"] == "NotifierPodList"
    assert [item["metadata"]["name"] for item in document["items"]] == ["db-0"]
    table = json.loads(in_process_server.request(
        "GET", f"{API}/namespaces/default/pods", headers={"accept": TABLE}).body)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Notifiers", "Allowed", "Age", "Containers", "Access"]
    assert table["rows"][0]["cells"][:3] == ["db-0", "<none>", "<none>"]


@pytest.mark.parametrize(("query", "code", "words"), [
    ("watch=true", 405, "watch is not served"),
    ("resourceVersion=5", 400, "resourceVersion"),
    ("resourceVersionMatch=Exact&resourceVersion=0", 400, "resourceVersionMatch"),
    ("continue=bm90LWpzb24", 400, "continue token is malformed"),
    ("labelSelector=a%20in%20(", 400, "unable to parse requirement"),
    ("fieldSelector=spec.nodeName%3Dx", 400, "not a known field selector"),
    ("limit=-1", 400, "limit"),
])
def test_what_is_not_served_is_a_clear_4xx(in_process_server, query, code, words):
    answer = in_process_server.request("GET", f"{API}/namespaces/default/pods?{query}")
    assert answer.status == code, answer.body
    status = json.loads(answer.body)
    assert status["kind"] == "Status" and words in status["message"], status
