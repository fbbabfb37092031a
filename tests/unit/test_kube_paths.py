"""kube-apiserver paths: names are escaped into exactly one segment, dot segments are refused,
and the client sends nothing to a path whose query, fragment or dot segments would change the
object it names. Also each caller that puts a name into a path (the pod and owner caches, the
Notification's scope listing, pods/exec, the trust ConfigMap) sends the escaped path."""

from __future__ import annotations

import ssl

import httpx
import pytest

from apiserver.authn.trust import TrustStore, TrustWatcher
from apiserver.errors import quoted
from apiserver.fanout.selection import pods_in_scope
from apiserver.kube import Connection, KubeClient, paths
from apiserver.kube.paths import UnsafeSegment
from apiserver.notifier.exec_stream import exec_url
from apiserver.notifier.podcache import OwnerTemplates, PodCache

HOSTILE = ["ss-1?x", "ss-1#x", "a/b", "a%2e", "%2e%2e", "a b", "a\nb", "é", "?", "#"]


@pytest.mark.parametrize("name", HOSTILE + ["ss-1", "a.b", "..."])
def test_a_segment_is_one_segment_that_decodes_to_the_name(name: str) -> None:
    escaped = paths.segment(name)
    assert not any(char in escaped for char in "/?#")
    assert httpx.URL(f"https://k.test/api/v1/namespaces/ns/pods/{escaped}").path \
        == f"/api/v1/namespaces/ns/pods/{name}"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_dot_and_empty_segments_are_refused(name: str) -> None:
    with pytest.raises(UnsafeSegment, match="cannot be a name in a kube-apiserver URL") as caught:
        paths.segment(name)
    assert caught.value.code == 400


def test_namespaced_paths() -> None:
    assert paths.namespaced(paths.CORE, "prod", "pods") == "/api/v1/namespaces/prod/pods"
    assert paths.namespaced(paths.CORE, "prod", "pods", "ss-1?x", "exec") \
        == "/api/v1/namespaces/prod/pods/ss-1%3Fx/exec"
    assert paths.namespaced("/apis/apps/v1", "a#b", "replicasets", "r/s") \
        == "/apis/apps/v1/namespaces/a%23b/replicasets/r%2Fs"
    for namespace, name in [("..", "x"), ("prod", ".."), ("", "x"), ("prod", ".")]:
        with pytest.raises(UnsafeSegment):
            paths.namespaced(paths.CORE, namespace, "pods", name)


@pytest.mark.parametrize("path", [
    "/api/v1/namespaces/prod/pods/ss-1?x", "/api/v1/namespaces/prod/pods/ss-1#x",
    "/api/v1/namespaces/prod/pods/..", "/api/v1/namespaces/prod/pods/.",
    "/api/v1/namespaces/prod/pods/%2e%2e", "/api/v1/namespaces//pods", "api/v1/pods",
    "/api/v1/namespaces/prod/pods/",
])
def test_check_refuses_paths_that_name_another_url(path: str) -> None:
    with pytest.raises(UnsafeSegment, match="the server acts only on the URL it validated"):
        paths.check(path)


def test_check_accepts_built_paths() -> None:
    for name in HOSTILE:
        paths.check(paths.namespaced(paths.CORE, "prod", "pods", name))
    paths.check("/api/v1/pods")


def test_quoted_escapes_as_go_does() -> None:
    assert quoted("ss-1?x") == '"ss-1?x"'
    assert quoted('a"b\\c') == '"a\\"b\\\\c"'
    assert quoted("a\nb\t\r\x00\x7f") == '"a\\nb\\t\\r\\x00\\x7f"'
    assert quoted("\ud800é\u202e\U000e0001") == '"\\ud800é\\u202e\\U000e0001"'
    quoted("\ud800").encode("utf-8")  # no lone surrogate left


class Recorder:
    """kube-apiserver answering 404 to GETs of objects and empty lists, recording raw paths."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.raw_path)
        if request.url.params.get("labelSelector") is not None:
            return httpx.Response(200, json={"metadata": {}, "items": []})
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))


@pytest.mark.parametrize("path", ["/api/v1/namespaces/prod/pods/ss-1?x",
                                  "/api/v1/namespaces/prod/pods/.."])
async def test_the_client_sends_nothing_to_an_unsafe_path(path: str) -> None:
    kube = Recorder()
    client = kube.client()
    try:
        with pytest.raises(UnsafeSegment):
            await client.get(path)
        with pytest.raises(UnsafeSegment):
            await client.post(path, {})
        with pytest.raises(UnsafeSegment):
            async for _ in client.watch(path, {"timeoutSeconds": "1"}):
                pass
    finally:
        await client.aclose()
    assert kube.sent == []


async def test_pod_and_owner_reads_escape_the_name() -> None:
    kube = Recorder()
    client = kube.client()
    try:
        assert await PodCache(client).pod("prod", "ss-1?x") is None
        assert await OwnerTemplates(client).owner("apps", "ReplicaSet", "prod", "rs#1") is None
        with pytest.raises(UnsafeSegment):
            await PodCache(client).pod("prod", "..")
        with pytest.raises(UnsafeSegment):
            await OwnerTemplates(client).owner("apps", "ReplicaSet", "prod", ".")
    finally:
        await client.aclose()
    assert kube.sent == [b"/api/v1/namespaces/prod/pods/ss-1%3Fx",
                         b"/apis/apps/v1/namespaces/prod/replicasets/rs%231"]


async def test_scope_listing_never_lists_every_namespace() -> None:
    """pods_in_scope of the namespace ``..`` would list /api/v1/pods: refused, nothing sent."""
    kube = Recorder()
    client = kube.client()
    try:
        with pytest.raises(UnsafeSegment):
            await pods_in_scope(client, "..", "app=db")
        assert await pods_in_scope(client, "a?b", "app=db") == []
    finally:
        await client.aclose()
    assert kube.sent == [b"/api/v1/namespaces/a%3Fb/pods?labelSelector=app%3Ddb&limit=500"]


def test_exec_url_escapes_and_refuses_dot_segments() -> None:
    url = httpx.URL(exec_url("https://kube.test/prefix", "prod", "ss-1?x", "app", ["true"]))
    assert url.raw_path.startswith(b"/prefix/api/v1/namespaces/prod/pods/ss-1%3Fx/exec?")
    assert url.params["container"] == "app"
    with pytest.raises(UnsafeSegment):
        exec_url("https://kube.test", "prod", "..", "app", ["true"])


def test_trust_configmap_path_is_escaped() -> None:
    kube = Recorder().client()
    watcher = TrustWatcher(kube, TrustStore(), namespace="kube-system", name="x")
    assert watcher.informer._path == "/api/v1/namespaces/kube-system/configmaps"
    with pytest.raises(UnsafeSegment):
        TrustWatcher(kube, TrustStore(), namespace="..")
