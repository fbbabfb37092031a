from __future__ import annotations

import pytest

from apiserver.authz.attributes import RequestAttributes, request_attributes

G = "notifier.x-k8s.io"
NS = f"/apis/{G}/v1alpha1/namespaces/ns"


def resource(verb, resource, name="", subresource="", namespace="ns", group=G,
             version="v1alpha1", path=""):
    return RequestAttributes(verb=verb, path=path, resource_request=True, api_group=group,
                             api_version=version, namespace=namespace, resource=resource,
                             subresource=subresource, name=name)


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("POST", f"{NS}/pods/p1/notify", "", resource("create", "pods", "p1", "notify")),
    ("GET", f"{NS}/podnotifiers/x", "", resource("get", "podnotifiers", "x")),
    ("GET", f"{NS}/podnotifiers", "", resource("list", "podnotifiers")),
    ("GET", f"{NS}/podnotifiers", "watch=true", resource("watch", "podnotifiers")),
    ("GET", f"{NS}/podnotifiers", "watch=1&limit=5", resource("watch", "podnotifiers")),
    ("GET", f"{NS}/podnotifiers", "watch=false", resource("list", "podnotifiers")),
    ("GET", f"{NS}/podnotifiers", "fieldSelector=metadata.name%3Dx&watch=true",
     resource("watch", "podnotifiers", "x")),
    ("GET", f"{NS}/podnotifiers", "fieldSelector=metadata.name!%3Dx",
     resource("list", "podnotifiers")),
    ("GET", f"/apis/{G}/v1alpha1/podnotifiers", "",
     resource("list", "podnotifiers", namespace="")),
    ("PUT", f"{NS}/notifications/n", "", resource("update", "notifications", "n")),
    ("PATCH", f"{NS}/notifications/n", "", resource("patch", "notifications", "n")),
    ("DELETE", f"{NS}/notifications/n", "", resource("delete", "notifications", "n")),
    ("DELETE", f"{NS}/podnotifiers", "", resource("deletecollection", "podnotifiers")),
    ("GET", "/api/v1/namespaces/ns", "",
     resource("get", "namespaces", "ns", group="", version="v1")),
    ("GET", "/api/v1/namespaces/ns/status", "",
     resource("get", "namespaces", "ns", "status", group="", version="v1")),
    ("GET", "/api/v1/namespaces/ns/pods", "", resource("list", "pods", group="", version="v1")),
])
def test_resource_requests(method, path, query, expected):
    got = request_attributes(method, path, query)
    assert got == RequestAttributes(**{**vars(expected), "path": path})


@pytest.mark.parametrize(("method", "path", "verb"), [
    ("GET", "/apis", "get"),
    ("GET", f"/apis/{G}", "get"),
    ("GET", f"/apis/{G}/v1alpha1", "get"),
    ("GET", "/openapi/v2", "get"),
    ("GET", "/openapi/v3/apis/notifier.x-k8s.io/v1alpha1", "get"),
    ("GET", "/healthz", "get"),
    ("POST", "/", "post"),
    ("HEAD", "/version", "head"),
])
def test_non_resource_requests(method, path, verb):
    assert request_attributes(method, path) == RequestAttributes(verb=verb, path=path)


def test_for_resource_builds_a_check_for_server_actions():
    attributes = RequestAttributes.for_resource("create", group="", version="v1",
                                                resource="pods", subresource="exec",
                                                namespace="ns", name="p")
    assert attributes.resource_request
    assert (attributes.resource, attributes.subresource, attributes.name) == ("pods", "exec", "p")
