from __future__ import annotations

import pytest

from apiserver.api.discovery import (
    aggregated_discovery,
    api_group,
    api_group_list,
    api_resource_list,
    wants_aggregated_discovery,
)

V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def test_api_resource_list():
    document = api_resource_list()
    assert document["kind"] == "APIResourceList"
    assert document["groupVersion"] == "notifier.x-k8s.io/v1alpha1"
    by_name = {r["name"]: r for r in document["resources"]}
    assert by_name["pods/notify"] == {"name": "pods/notify", "singularName": "",
                                      "namespaced": True, "kind": "PodNotifier",
                                      "verbs": ["create"]}
    assert by_name["pods"] == {"name": "pods", "singularName": "pod", "namespaced": True,
                               "kind": "NotifierPod", "verbs": ["get", "list"]}
    assert by_name["podnotifiers"]["kind"] == "PodNotifier"
    assert sorted(by_name["podnotifiers"]["verbs"]) == [
        "delete", "deletecollection", "get", "list", "patch", "watch"]
    assert by_name["podnotifiers"]["shortNames"] == ["pnot"]
    assert by_name["notifications"]["kind"] == "Notification"
    assert by_name["notifications"]["shortNames"] == ["notif"]
    assert sorted(by_name["notifications"]["verbs"]) == [
        "create", "delete", "deletecollection", "get", "list", "patch", "watch"]
    assert all(r["namespaced"] for r in document["resources"])


def test_group_documents():
    entry = {"groupVersion": "notifier.x-k8s.io/v1alpha1", "version": "v1alpha1"}
    assert api_group() == {"kind": "APIGroup", "apiVersion": "v1", "name": "notifier.x-k8s.io",
                           "versions": [entry], "preferredVersion": entry}
    assert api_group_list()["groups"] == [
        {"name": "notifier.x-k8s.io", "versions": [entry], "preferredVersion": entry}]


def test_aggregated_discovery_nests_the_subresource_under_the_read_only_pods():
    document = aggregated_discovery()
    assert (document["kind"], document["apiVersion"]) == (
        "APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    [group] = document["items"]
    assert group["metadata"]["name"] == "notifier.x-k8s.io"
    [version] = group["versions"]
    assert version["version"] == "v1alpha1"
    resources = {r["resource"]: r for r in version["resources"]}
    assert set(resources) == {"notifications", "podnotifiers", "pods"}
    assert resources["pods"]["subresources"] == [{
        "subresource": "notify",
        "responseKind": {"group": "", "version": "", "kind": "PodNotifier"},
        "verbs": ["create"]}]
    assert resources["pods"]["responseKind"] == {"group": "", "version": "", "kind": "NotifierPod"}
    assert resources["pods"]["verbs"] == ["get", "list"]
    assert resources["pods"]["singularResource"] == "pod"
    assert "shortNames" not in resources["pods"], "po is the core pods' short name"
    assert resources["podnotifiers"]["responseKind"]["kind"] == "PodNotifier"
    assert resources["podnotifiers"]["scope"] == "Namespaced"
    assert resources["podnotifiers"]["singularResource"] == "podnotifier"


@pytest.mark.parametrize(("accept", "expected"), [
    (None, False),
    ("application/json", False),
    ("*/*", False),
    (V2, True),
    (f"{V2},application/json", True),
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
     "application/json", False),
    (f"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;"
     f"as=APIGroupDiscoveryList,{V2},application/json", True),
    (f"application/json;q=0.9,{V2}", True),
    (f"{V2};q=0.5,application/json", False),
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", None),
    ("application/yaml", None),
])
def test_accept_negotiation(accept, expected):
    assert wants_aggregated_discovery(accept) is expected
