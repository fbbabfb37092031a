"""The authorization bypasses of issue 9, each tried as it was found: real users with client
certificates and real RBAC, through kube-apiserver's aggregator and straight to the server's own
port (as the same user, through its front proxy).

- Repeated query parameters: the authorizer and the handler must read one value.
- Names in the path: the name authorized must be the object acted on (``ss-1%3Fx``, ``%23``,
  dot segments, a Notification in the namespace ``..``).
- Trust rule 1 by identity: an ownerReference with a real owner's kind and name but another
  UID, or with its real UID on a pod its selector does not match, does not make that owner
  vouch for the pod.

Side effects are counted on the host: kwok runs notifier commands on this machine, so a command
that appends a line to a file in the test's directory shows whether, and how often, it ran.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from localcluster import plane
from tests.support.extension import (
    RawAnswer,
    cluster_pair,
    direct,
    proxied_as,
    raw_direct,
    raw_via_aggregator,
    scrape,
)
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    ANNOTATION,
    API,
    body,
    declare,
    exec_notifier,
    notification,
    notify,
    notify_path,
    records,
    wait_finished,
)

pytestmark = pytest.mark.cluster

GROUP = "notifier.x-k8s.io"
STARTED = "container_notifier_podnotifiers_started_total"
SERVER_IDENTITY = "system:serviceaccount"
"""The server acts with its ServiceAccount's identity; no answer to a caller may name it."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def marking(marker: Path) -> dict[str, str]:
    """Pod annotations declaring the notifier ``mark``, which appends a line to `marker`."""
    return declare(app=[exec_notifier("mark", f"echo ran >> {marker}")])


def runs(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def granted(cluster: Cluster, user: User, check: Any, what: str) -> None:
    """Wait until `check(client)` is true for `user` through the aggregator (a new RoleBinding
    takes a moment to reach kube-apiserver's authorizer)."""
    def ok() -> bool:
        with cluster.client_for(user) as kube:
            return bool(check(kube))
    wait_until(ok, what, timeout=15)


def both_ways(cluster: Cluster, user: User, method: str, path: str, body: Any = None
              ) -> dict[str, RawAnswer]:
    """The answers to `path`, sent byte for byte through the aggregator and to the server."""
    return {"aggregator": raw_via_aggregator(cluster, user, method, path, body),
            "direct": raw_direct(cluster, user, method, path, body)}


# Repeated query parameters


def test_a_repeated_field_selector_is_400_and_lists_nothing(
        cluster: Cluster, namespace: str) -> None:
    """A user allowed to list one record by name appends an empty second fieldSelector: the
    authorizer must not see one selector and the handler another."""
    pod = cluster.create_pod(namespace, "db", annotations=declare(
        app=[exec_notifier("noop", "true")]))["metadata"]["name"]
    with cluster.admin() as kube:
        assert notify(kube, namespace, pod, "noop").status_code == 201
    assert records(cluster, namespace), "a record to be listed by mistake"

    user = cluster.user(unique("one-name"))
    cluster.grant(namespace, user, [{"apiGroups": [GROUP], "resources": ["podnotifiers"],
                                     "verbs": ["list"], "resourceNames": ["only-this"]}])
    path = f"{API}/namespaces/{namespace}/podnotifiers"
    one = [("fieldSelector", "metadata.name=only-this")]
    repeated = [*one, ("fieldSelector", "")]
    granted(cluster, user, lambda kube: kube.get(path, params=one).status_code == 200,
            "the RoleBinding to take effect")

    with cluster.client_for(user) as kube:
        allowed = kube.get(path, params=one)
        everything = kube.get(path)
        bypass = kube.get(path, params=repeated)
    with direct(cluster, cluster_pair(cluster, "front-proxy-client")) as server:
        direct_bypass = server.get(path, params=repeated, headers=proxied_as(user))
    assert allowed.json()["items"] == []
    assert everything.status_code == 403
    for answer in (bypass, direct_bypass):
        assert answer.status_code == 400, answer.text
        status = answer.json()
        assert status["kind"] == "Status" and "items" not in status
        assert status["message"] == ('query parameters may be given only once: "fieldSelector" '
                                     'is given 2 times; give each once')


def test_a_repeated_watch_is_400_for_a_user_without_watch(
        cluster: Cluster, namespace: str) -> None:
    user = cluster.user(unique("list-only"))
    cluster.grant(namespace, user, [{"apiGroups": [GROUP], "resources": ["podnotifiers"],
                                     "verbs": ["list"]}])
    path = f"{API}/namespaces/{namespace}/podnotifiers"
    granted(cluster, user, lambda kube: kube.get(path).status_code == 200,
            "the RoleBinding to take effect")
    repeated = [("watch", "false"), ("watch", "true"), ("timeoutSeconds", "3")]

    with cluster.client_for(user) as kube:
        watch = kube.get(path, params={"watch": "true", "timeoutSeconds": "3"})
        bypass = kube.get(path, params=repeated)
    with direct(cluster, cluster_pair(cluster, "front-proxy-client")) as server:
        direct_bypass = server.get(path, params=repeated, headers=proxied_as(user))
    assert watch.status_code == 403
    for answer in (bypass, direct_bypass):
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["message"].startswith(
            'query parameters may be given only once: "watch" is given 2 times')


# Names in the path


@pytest.fixture
def stateful_pods(cluster: Cluster, namespace: str, tmp_path: Path) -> Path:
    """A StatefulSet ``ss`` with pods ss-0 and ss-1 declaring ``mark``; returns the marker."""
    marker = tmp_path / "marker"
    labels = {"app": "ss"}
    cluster.apply({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "ss", "namespace": namespace},
        "spec": {"replicas": 2, "serviceName": "ss", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels, "annotations": marking(marker)},
                              "spec": {"containers": [{"name": "app",
                                                       "image": "fake.example/app:1"}]}}},
    })
    names = {p["metadata"]["name"] for p in cluster.wait_running_pods(namespace, "app=ss", 2)}
    assert "ss-1" in names
    return marker


@pytest.mark.parametrize(("sent", "name"), [("ss-1%3Fx", "ss-1?x"), ("ss-1%23x", "ss-1#x"),
                                            ("ss-1%3Fa%3Db", "ss-1?a=b")])
def test_a_name_with_query_or_fragment_characters_is_404_and_runs_nothing(
        cluster: Cluster, namespace: str, stateful_pods: Path, sent: str, name: str) -> None:
    """A user allowed to notify only the name ``ss-1?x`` must not run the notifier on ss-1
    (the name used to go raw into kube-apiserver URLs, where ``?`` ended the path)."""
    marker = stateful_pods
    user = cluster.user(unique("odd-name"))
    cluster.grant(namespace, user, [{"apiGroups": [GROUP], "resources": ["pods/notify"],
                                     "verbs": ["create"], "resourceNames": [name]}])
    granted(cluster, user,
            lambda kube: raw_via_aggregator(cluster, user, "POST", notify_path(namespace, sent),
                                            body("mark")).status != 403,
            "the RoleBinding to take effect")
    # (A server that still acts on ss-1 has run the notifier for that check already.)
    before = runs(marker)
    started = scrape(cluster).get(STARTED, 0)

    answers = both_ways(cluster, user, "POST", notify_path(namespace, sent) + "?waitSeconds=10",
                        body("mark"))
    with cluster.client_for(user) as kube:
        ss_1 = kube.post(notify_path(namespace, "ss-1"), json=body("mark"))
    for way, answer in answers.items():
        assert answer.status == 404, (way, answer.text)
        status = answer.json()
        assert status["reason"] == "NotFound"
        assert status["message"] == f'pods "{name}" not found', way
    assert ss_1.status_code == 403  # the grant is for the odd name only
    assert all(r["spec"]["podName"] != "ss-1" for r in records(cluster, namespace))

    # A later run that we start, and see finish, is the point by which a run the refused
    # requests had started would have been counted (each replica starts runs in order):
    # the replicas' started runs then moved by exactly this one, and the marker by one line.
    with cluster.admin() as kube:
        assert notify(kube, namespace, "ss-1", "mark").json()["status"]["phase"] == "Succeeded"
    assert scrape(cluster).get(STARTED, 0) == started + 1
    assert runs(marker) == before + 1


@pytest.fixture
def notify_anything(cluster: Cluster, namespace: str) -> User:
    """A user who may notify every pod of the namespace (but not exec or read namespaces)."""
    user = cluster.user(unique("notifier"))
    cluster.grant(namespace, user, [{"apiGroups": [GROUP], "resources": ["pods/notify"],
                                     "verbs": ["create"]}])
    granted(cluster, user, lambda kube: kube.post(notify_path(namespace, "none"),
                                                  json=body("mark")).status_code == 404,
            "the RoleBinding to take effect")
    return user


@pytest.mark.parametrize(("sent", "decoded"), [
    ("..", ".."), ("%2e%2e", ".."), ("%2E%2E", ".."), (".%2e", ".."), (".", "."), ("%2e", ".")])
def test_dot_segment_pod_names_are_refused_not_read_with_the_servers_identity(
        cluster: Cluster, namespace: str, notify_anything: User, sent: str,
        decoded: str) -> None:
    """``pods/../notify`` used to make the server GET /api/v1/namespaces/<ns> (and ``.`` the
    PodList) with its own identity, answering a 500 that named its ServiceAccount."""
    answers = both_ways(cluster, notify_anything, "POST", notify_path(namespace, sent),
                        body("mark"))
    for way, answer in answers.items():
        assert SERVER_IDENTITY not in answer.text, (way, answer.text)
        assert answer.status == 404, (way, answer.status, answer.text)
        assert answer.json()["message"] == f'pods "{decoded}" not found'
    assert records(cluster, namespace) == []


@pytest.fixture
def cluster_wide_creator(cluster: Cluster) -> Any:
    """A user who may create Notifications and notify pods in every namespace (a
    ClusterRoleBinding), removed after the test."""
    user = cluster.user(unique("creator"))
    name = user.name
    cluster.apply(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name},
         "rules": [{"apiGroups": [GROUP], "resources": ["notifications", "pods/notify"],
                    "verbs": ["create", "get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    try:
        yield user
    finally:
        cluster.kubectl("delete", f"clusterrolebinding/{name}", f"clusterrole/{name}",
                        check=False)


@pytest.mark.parametrize(("sent", "decoded"), [("..", ".."), ("%2e%2e", ".."), (".", ".")])
def test_a_notification_in_namespace_dot_dot_is_refused(
        cluster: Cluster, namespace: str, tmp_path: Path, cluster_wide_creator: User,
        sent: str, decoded: str) -> None:
    """Its pod listing used to be /api/v1/namespaces/../pods, i.e. the pods of every
    namespace: the pod here (its label selected) would have been notified."""
    marker = tmp_path / "marker"
    label = unique("everywhere")
    cluster.create_pod(namespace, "target", annotations=marking(marker), labels={"sel": label})
    obj = notification(unique("n"), "mark", {"sel": label})
    path = f"{API}/namespaces/{sent}/notifications"
    granted(cluster, cluster_wide_creator,
            lambda kube: kube.get(f"{API}/namespaces/{namespace}/notifications/none"
                                  ).status_code == 404, "the ClusterRoleBinding to take effect")

    started = scrape(cluster).get(STARTED, 0)
    answers = both_ways(cluster, cluster_wide_creator, "POST", path, obj)

    for way, answer in answers.items():
        assert SERVER_IDENTITY not in answer.text
        assert answer.status == 404, (way, answer.status, answer.text)
        assert answer.json()["message"] == f'namespaces "{decoded}" not found'
    with cluster.admin() as kube:
        stored = kube.get(f"{API}/notifications").json()["items"]
    assert [n for n in stored if n["metadata"]["name"] == obj["metadata"]["name"]] == []

    # A later Notification of the same pod, in its own namespace, that we see finish: the
    # leader's fan-out of a refused one, created first, would have started its run by then.
    # Exactly one run started (ours), one marker line, one PodNotifier record.
    later = notification(unique("later"), "mark", {"sel": label})
    with cluster.admin() as kube:
        created = kube.post(f"{API}/namespaces/{namespace}/notifications", json=later)
    assert created.status_code == 201, created.text
    finished = wait_finished(cluster, namespace, later["metadata"]["name"])
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    assert scrape(cluster).get(STARTED, 0) == started + 1
    assert runs(marker) == 1
    assert len(records(cluster, namespace)) == 1


# Trust rule 1 by identity


def forged_notify(cluster: Cluster, namespace: str, pod: str, reference: dict[str, Any],
                  annotation: str) -> tuple[dict[str, Any], dict[str, Any], User]:
    """A user with ``patch pods`` sets `pod`'s controller reference to `reference` and copies
    `annotation` onto it; a notify-only user then notifies it (``mark``). Returns the answer
    (code and Status), the pod as it was when the server decided, and the notify-only user.

    The controller-manager is stopped meanwhile: its garbage collector deletes a pod whose
    owner reference names no existing object within ~0.1 s, and the ReplicaSet controller
    drops a reference to it from a pod its selector does not match; either would race the
    request (the window each leaves is what rule 1 closes)."""
    patcher, notifier = cluster.user(unique("patcher")), cluster.user(unique("notify-only"))
    cluster.grant(namespace, patcher, [{"apiGroups": [""], "resources": ["pods"],
                                        "verbs": ["get", "patch"]}])
    cluster.grant(namespace, notifier, [{"apiGroups": [GROUP], "resources": ["pods/notify"],
                                         "verbs": ["create"]}])
    forged = {"metadata": {"ownerReferences": [{**reference, "controller": True}],
                           "annotations": {ANNOTATION: annotation}}}
    plane.stop_component(cluster.layout, "kube-controller-manager")
    try:
        wait_until(lambda: cluster.kubectl("patch", "pod", pod, "-n", namespace,
                                           "--type=merge", "-p", json.dumps(forged),
                                           user=patcher, check=False).returncode == 0,
                   "the patcher's RoleBinding to take effect", 15)
        answer: dict[str, Any] = {}

        def decided() -> bool:
            """The server's pod cache has the patched pod (not the bare one) and RBAC lets
            the notify-only user through to the trust rules."""
            with cluster.client_for(notifier) as kube:
                response = notify(kube, namespace, pod, "mark")
            answer.update(code=response.status_code, status=response.json())
            message = answer["status"].get("message", "")
            not_yet = ("rule 1 failed: the pod has no" in message  # the bare pod, cached
                       or 'cannot create resource "pods/notify"' in message)  # no RoleBinding
            return response.status_code != 403 or not not_yet

        wait_until(decided, "the patched pod in the server's cache", 15)
        with cluster.admin() as kube:
            patched = kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}").json()
    finally:
        plane.restart(cluster.layout, "kube-controller-manager")
    return answer, patched, notifier


def web_replicaset(cluster: Cluster, namespace: str, marker: Path
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Deployment ``web`` whose pods declare ``mark``: its Running pod and its ReplicaSet
    (the pod's controller)."""
    web = cluster.deploy(namespace, "web", annotations=marking(marker))[0]
    with cluster.admin() as kube:
        (replicaset,) = kube.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets",
                                 params={"labelSelector": "app=web"}).json()["items"]
    return web, replicaset


def test_a_forged_owner_reference_uid_is_not_trusted(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """A user with ``patch pods`` points a bare pod's controller reference at a real
    ReplicaSet's kind and name with a made-up UID and copies the ReplicaSet's template
    annotation; a notify-only user's request must be refused, naming the UID mismatch."""
    marker = tmp_path / "marker"
    web, replicaset = web_replicaset(cluster, namespace, marker)
    rs_name = replicaset["metadata"]["name"]
    cluster.create_pod(namespace, "victim")
    made_up = str(uuid.uuid4())

    answer, victim, notifier = forged_notify(
        cluster, namespace, "victim",
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": made_up},
        replicaset["spec"]["template"]["metadata"]["annotations"][ANNOTATION])

    assert victim["metadata"]["ownerReferences"][0]["uid"] == made_up  # still there
    assert answer["code"] == 403, answer
    message = answer["status"]["message"]
    assert (f'rule 1 failed: the pod\'s controller reference names ReplicaSet/{rs_name} with '
            f'UID "{made_up}", but ReplicaSet/{rs_name} has UID '
            f'"{replicaset["metadata"]["uid"]}": the UID differs') in message, message
    assert f'rule 2 failed: User "{notifier.name}" cannot create resource "pods/exec"' in message
    assert runs(marker) == 0

    # The real ReplicaSet's pod, whose reference has the right UID, is trusted by rule 1.
    with cluster.client_for(notifier) as kube:
        trusted = notify(kube, namespace, web["metadata"]["name"], "mark")
    assert trusted.status_code == 201, trusted.text
    assert trusted.json()["status"]["phase"] == "Succeeded"
    assert runs(marker) == 1


def test_a_forged_owner_reference_outside_the_selector_is_not_trusted(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """The same with the ReplicaSet's real UID, on a bare pod whose labels (``bare=victim``)
    the ReplicaSet's selector (``app=web,pod-template-hash=...``) does not match: the
    reference is one the ReplicaSet controller would drop, not one it wrote, and the request
    is refused whatever the timing (the controller-manager is stopped, so the reference stays
    for as long as the test needs)."""
    marker = tmp_path / "marker"
    _, replicaset = web_replicaset(cluster, namespace, marker)
    rs_name = replicaset["metadata"]["name"]
    cluster.create_pod(namespace, "victim")

    answer, victim, notifier = forged_notify(
        cluster, namespace, "victim",
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
         "uid": replicaset["metadata"]["uid"]},
        replicaset["spec"]["template"]["metadata"]["annotations"][ANNOTATION])

    (reference,) = victim["metadata"]["ownerReferences"]  # still there, with the real UID
    assert reference["uid"] == replicaset["metadata"]["uid"] and reference["controller"]
    assert victim["metadata"]["labels"] == {"bare": "victim"}
    assert answer["code"] == 403, answer
    message = answer["status"]["message"]
    hash_label = replicaset["spec"]["selector"]["matchLabels"]["pod-template-hash"]
    assert ('rule 1 failed: the pod\'s labels "bare=victim" do not match the selector '
            f'"app=web,pod-template-hash={hash_label}" of its controller ReplicaSet/{rs_name}'
            ) in message, message
    assert f'rule 2 failed: User "{notifier.name}" cannot create resource "pods/exec"' in message
    assert runs(marker) == 0
