"""The extension server as kube-apiserver and its clients see it: registration, discovery,
RBAC on pods/notify, impersonation, and delegated authentication on its own port.

Requests go through kube-apiserver's aggregator unless a test is about the server's own port
(https://127.0.0.1:$CN_NOTIFIER_PORT), where callers must present their own credentials.
"""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest

from certs.authority import issue, new_ca
from localcluster import __main__ as localcluster
from localcluster.notifier import APISERVICE_NAME
from tests.support.extension import (
    API,
    FORBIDDEN_OR_UNAUTHORIZED,
    cluster_pair,
    direct,
    kube_apiserver,
    logged,
    logged_requests,
    notify_body,
    notify_path,
    scrape,
)
from tests.support.kube import Cluster, wait_until

pytestmark = pytest.mark.cluster

NOTIFY_RULE = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"],
               "verbs": ["create"]}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def forbidden_message(user: str, namespace: str, pod: str) -> str:
    """kube-apiserver's wording when RBAC denies create pods/notify."""
    return (f'pods.notifier.x-k8s.io "{pod}" is forbidden: User "{user}" cannot create '
            f'resource "pods/notify" in API group "notifier.x-k8s.io" in the namespace '
            f'"{namespace}"')


def assert_not_refused(response_code: int, body: dict) -> None:
    """The caller got past authentication and authorization: whatever the handler answered
    (404 for a missing pod, 201, ...) is a Status or a PodNotifier."""
    assert response_code not in FORBIDDEN_OR_UNAUTHORIZED, body
    assert body.get("kind") in ("Status", "PodNotifier"), body
    if body["kind"] == "Status":
        assert body.get("reason") not in ("Forbidden", "Unauthorized"), body


# --- registration and discovery -------------------------------------------------------------


def test_apiservice_is_available(cluster: Cluster) -> None:
    assert localcluster.apiservice_available(cluster.layout, cluster.ports)
    with cluster.admin() as kube:
        apiservice = kube.get(
            f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}").json()
    [available] = [c for c in apiservice["status"]["conditions"] if c["type"] == "Available"]
    assert (available["status"], available["reason"]) == ("True", "Passed")
    assert apiservice["spec"]["group"] == "notifier.x-k8s.io"
    assert apiservice["spec"]["version"] == "v1alpha1"


def test_kubectl_lists_the_resources_and_discovery_has_the_subresource(cluster: Cluster) -> None:
    listed = cluster.kubectl("api-resources", "--api-group=notifier.x-k8s.io", "--namespaced",
                             "-o", "name").stdout.split()
    # kubectl hides subresources: pods/notify and the two release actions are only in the
    # discovery document. pods is the read-only NotifierPods (issue 23).
    assert sorted(listed) == ["notifications.notifier.x-k8s.io",
                              "podnotifiers.notifier.x-k8s.io", "pods.notifier.x-k8s.io"]

    raw = json.loads(cluster.kubectl("get", "--raw", API).stdout)
    assert (raw["kind"], raw["groupVersion"]) == ("APIResourceList", "notifier.x-k8s.io/v1alpha1")
    resources = {r["name"]: r for r in raw["resources"]}
    assert sorted(resources) == ["notifications", "notifications/release", "podnotifiers",
                                 "podnotifiers/release", "pods", "pods/notify"]
    assert {name: (r["kind"], r["namespaced"], sorted(r["verbs"]))
            for name, r in resources.items()} == {
        "pods": ("NotifierPod", True, ["get", "list"]),
        "pods/notify": ("PodNotifier", True, ["create"]),
        "podnotifiers/release": ("PodNotifier", True, ["create"]),
        "notifications/release": ("Notification", True, ["create"]),
        "podnotifiers": ("PodNotifier", True,
                         ["delete", "deletecollection", "get", "list", "patch", "watch"]),
        "notifications": ("Notification", True,
                          ["create", "delete", "deletecollection", "get", "list", "patch",
                           "watch"]),
    }


def test_kubectl_explain_prints_the_spec_fields(cluster: Cluster) -> None:
    explained = cluster.kubectl("explain", "podnotifiers.spec").stdout
    assert re.search(r"^KIND:\s+PodNotifier$", explained, re.MULTILINE), explained
    assert re.search(r"^GROUP:\s+notifier\.x-k8s\.io$", explained, re.MULTILINE), explained
    assert re.search(r"^VERSION:\s+v1alpha1$", explained, re.MULTILINE), explained
    fields = dict(re.findall(r"^  (\w+)\t<([^>]+)>", explained, re.MULTILINE))
    assert fields == {"containers": "[]string", "notifier": "string", "podName": "string",
                      "podUID": "string", "requestedBy": "RequestedBy",
                      "timeoutSeconds": "integer", "ttlSecondsAfterFinished": "integer"}
    assert re.search(r"^  notifier\t<string> -required-$", explained, re.MULTILINE)


# --- RBAC on pods/notify, through the aggregator --------------------------------------------


def test_notify_needs_create_on_pods_notify(cluster: Cluster, namespace: str) -> None:
    allowed, denied = cluster.user(unique("notifier")), cluster.user(unique("bystander"))
    cluster.grant(namespace, allowed, [NOTIFY_RULE])
    path = notify_path(namespace, "p")

    def allowed_gets_through() -> bool:
        with cluster.client_for(allowed) as kube:
            return kube.post(path, json=notify_body()).status_code not in (403,)

    wait_until(allowed_gets_through, "the RoleBinding to take effect", timeout=15)
    with cluster.client_for(allowed) as kube:
        response = kube.post(path, json=notify_body())
    assert_not_refused(response.status_code, response.json())
    if response.json()["kind"] == "PodNotifier":
        assert response.json()["spec"]["requestedBy"]["username"] == allowed.name
    # The extension server saw the caller's own name (from the aggregator's headers).
    assert {e["user"] for e in logged_requests(cluster, path)} == {allowed.name}

    with cluster.client_for(denied) as kube:
        refused = kube.post(path, json=notify_body())
    assert refused.status_code == 403
    from_kube = refused.json()
    assert from_kube == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": forbidden_message(denied.name, namespace, "p"), "reason": "Forbidden",
        "details": {"name": "p", "group": "notifier.x-k8s.io", "kind": "pods"}, "code": 403}

    # kube-apiserver refused it itself. The extension server refuses the same identity, when it
    # arrives through a front proxy, with exactly the same Status.
    proxy = cluster_pair(cluster, "front-proxy-client")
    with direct(cluster, proxy) as server:
        ours = server.post(path, json=notify_body(), headers=[
            ("X-Remote-User", denied.name), ("X-Remote-Group", "system:authenticated")])
    assert ours.status_code == 403
    assert ours.json() == from_kube


def test_kubectl_impersonation_is_honoured(cluster: Cluster, namespace: str) -> None:
    allowed, denied = unique("impersonated"), unique("impersonated-denied")
    cluster.grant(namespace, cluster.user(allowed), [NOTIFY_RULE])
    body = json.dumps(notify_body())

    def as_user(user: str, pod: str):
        return cluster.kubectl(f"--as={user}", "create", "--raw",
                               notify_path(namespace, pod), "-f", "-", input=body, check=False)

    wait_until(lambda: "(Forbidden)" not in as_user(allowed, "probe").stderr,
               "the RoleBinding to take effect", timeout=15)
    granted = as_user(allowed, "p")
    refused = as_user(denied, "p")
    # Allowed: whatever the handler says, it is not an authentication or authorization error.
    assert "(Forbidden)" not in granted.stderr and "(Unauthorized)" not in granted.stderr
    if granted.returncode == 0:
        assert json.loads(granted.stdout)["spec"]["requestedBy"]["username"] == allowed
    else:
        assert granted.stderr.startswith("Error from server ("), granted
    # The extension server saw the impersonated user, not the admin who impersonated.
    assert {e["user"] for e in logged_requests(cluster, notify_path(namespace, "p"))} == {
        allowed}
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        f"Error from server (Forbidden): {forbidden_message(denied, namespace, 'p')}")


# --- delegated authentication on the server's own port --------------------------------------


def test_no_credentials_is_anonymous_and_forbidden(cluster: Cluster) -> None:
    """No credentials at all is not a failed authentication (401): the caller is
    system:anonymous, whom RBAC does not allow, so 403, exactly as kube-apiserver answers."""
    path = notify_path("default", "p")
    with direct(cluster) as server:
        ours = server.post(path, json=notify_body())
    with kube_apiserver(cluster) as anonymous:
        theirs = anonymous.post(path, json=notify_body())
    assert ours.status_code == 403
    assert ours.json()["message"] == forbidden_message("system:anonymous", "default", "p")
    assert theirs.status_code == 403
    assert ours.json() == theirs.json()


def test_forged_identity_headers_are_not_trusted(cluster: Cluster) -> None:
    """X-Remote-User counts only from a front-proxy certificate: without any certificate the
    caller is anonymous; with a client-CA certificate it is that certificate's user, even if
    its CN is the front proxy's name; Impersonate-User is not honoured either."""
    path = notify_path("default", "p")
    forged = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters"),
              ("Impersonate-User", "admin"), ("Impersonate-Group", "system:masters")]
    with direct(cluster) as server:
        anonymous = server.post(path, json=notify_body(), headers=forged)
    lookalike = issue(cluster_pair(cluster, "ca"), "front-proxy-client", client=True)
    with direct(cluster, lookalike) as server:
        as_itself = server.post(path, json=notify_body(), headers=forged)
    assert anonymous.status_code == 403
    assert anonymous.json()["message"] == forbidden_message("system:anonymous", "default", "p")
    assert as_itself.status_code == 403
    assert as_itself.json()["message"] == forbidden_message("front-proxy-client", "default", "p")


def test_front_proxy_ca_certificate_with_another_name_is_unauthorized(cluster: Cluster) -> None:
    """Issued by the request-header CA but with a CN outside requestheader-allowed-names: the
    headers are ignored, and the certificate is no client-CA certificate either: 401."""
    path = notify_path("default", "p")
    headers = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]
    not_the_proxy = issue(cluster_pair(cluster, "front-proxy-ca"), "not-the-front-proxy",
                          client=True)
    with direct(cluster, not_the_proxy) as server:
        refused = server.post(path, json=notify_body(), headers=headers)
    assert refused.status_code == 401
    assert refused.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": "Unauthorized",
                              "reason": "Unauthorized", "code": 401}
    # Control: the real front proxy's certificate makes the same headers count.
    with direct(cluster, cluster_pair(cluster, "front-proxy-client")) as server:
        proxied = server.get("/metrics", headers=headers)
    assert proxied.status_code == 200


def test_certificate_from_an_unknown_ca_is_refused(cluster: Cluster) -> None:
    stranger = issue(new_ca("unknown-ca"), "admin", organizations=("system:masters",),
                     client=True)
    with direct(cluster, stranger) as server, pytest.raises(httpx.TransportError):
        # TLS 1.3: the server rejects the certificate after the client's handshake finished,
        # so the client sees the connection closed without an answer.
        server.get("/metrics")


def test_bearer_token_is_checked_with_tokenreview(cluster: Cluster, namespace: str) -> None:
    account = "token-bearer"
    username = f"system:serviceaccount:{namespace}:{account}"
    with cluster.admin() as kube:
        created = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json={
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
        assert created.status_code == 201, created.text
        requested = kube.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": 600}})
        assert requested.status_code == 201, requested.text
    token = {"Authorization": f"Bearer {requested.json()['status']['token']}"}

    before = scrape(cluster)
    # One replica: the second use of the token is a hit of that replica's cache.
    with direct(cluster, replica=0) as server:
        first = server.post(notify_path(namespace, "p"), json=notify_body(), headers=token)
        again = server.post(notify_path(namespace, "p"), json=notify_body(), headers=token)
        bad = server.post(notify_path(namespace, "p"), json=notify_body(),
                          headers={"Authorization": f"Bearer {unique('not-a-token')}"})
    after = scrape(cluster)
    for response in (first, again):
        assert response.status_code == 403
        assert response.json()["message"] == forbidden_message(username, namespace, "p")
    assert bad.status_code == 401
    assert bad.json()["reason"] == "Unauthorized"
    # Two TokenReviews: the good token's (its second use came from the cache) and the bad
    # one's. Nothing else sends tokens to this port: the aggregator strips Authorization.
    reviews = "container_notifier_authentication_reviews_total"
    hits = "container_notifier_authentication_cache_hits_total"
    assert after[reviews] - before[reviews] == 2
    assert after[hits] - before[hits] == 1

    cluster.apply(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "notify", "namespace": namespace}, "rules": [NOTIFY_RULE]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "notify", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "notify"},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    attempts = iter(range(1000))
    answers: list = []

    def allowed() -> bool:
        # A new pod name each time: a denied answer is cached per request attributes.
        with direct(cluster) as server:
            response = server.post(notify_path(namespace, f"q{next(attempts)}"),
                                   json=notify_body(), headers=token)
        answers.append(response)
        return response.status_code != 403

    wait_until(allowed, "the RoleBinding to take effect", timeout=15)
    assert_not_refused(answers[-1].status_code, answers[-1].json())


def test_metrics_is_authorized_like_kube_apiservers(cluster: Cluster) -> None:
    """Non-resource ``get /metrics`` by SubjectAccessReview: the built-in ClusterRole
    system:monitoring (bound to the group system:monitoring) allows it; others get 403."""
    ca = cluster_pair(cluster, "ca")
    name = unique("nobody")
    monitor = issue(ca, unique("monitor"), organizations=("system:monitoring",), client=True)
    nobody = issue(ca, name, client=True)
    with direct(cluster, monitor) as server:
        scraped = server.get("/metrics")
    with direct(cluster, nobody) as server:
        refused = server.get("/metrics")
    with kube_apiserver(cluster, nobody) as kube:
        refused_by_kube = kube.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE container_notifier_authorization_reviews_total counter" in scraped.text
    assert refused.status_code == 403
    assert refused.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "reason": "Forbidden", "details": {},
                              "message": f'forbidden: User "{name}" cannot get path "/metrics"',
                              "code": 403}
    assert refused.json() == refused_by_kube.json()


def test_metrics_count_a_finished_notifier_run(cluster: Cluster, namespace: str) -> None:
    """The run is counted and logged once (never its output), its request counted by verb,
    resource, subresource and code."""
    output = unique("printed")
    annotations = {"notifier.x-k8s.io/notifiers": json.dumps({"app": [
        {"name": "hello", "action": {"exec": {"command": ["/bin/sh", "-c", f"echo {output}"]}}}
    ]})}
    [pod] = cluster.deploy(namespace, "counted", annotations=annotations)
    finished = ('container_notifier_podnotifiers_finished_total'
                '{phase="Succeeded",reason="Completed"}')
    duration = "container_notifier_podnotifier_duration_seconds_count"
    notified = ('apiserver_request_total'
                '{code="201",resource="pods",subresource="notify",verb="create"}')
    before = scrape(cluster)
    with cluster.admin() as kube:
        response = kube.post(notify_path(namespace, pod["metadata"]["name"]),
                             params={"waitSeconds": "20"}, json=notify_body("hello"))
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["status"]["phase"] == "Succeeded", response.text
    assert output in response.text
    wait_until(lambda: scrape(cluster).get(finished, 0) == before.get(finished, 0) + 1,
               "the finished run to be counted", timeout=5)
    after = scrape(cluster)
    assert after[duration] == before[duration] + 1
    assert after[notified] == before.get(notified, 0) + 1
    assert after["process_resident_memory_bytes"] > 0
    assert not [key for key in after if "_created" in key]
    [line] = [entry for entry in logged(cluster, "run finished")
              if entry.get("podnotifier") == record["metadata"]["name"]]
    assert {key: line[key] for key in ("level", "namespace", "pod", "notifier", "phase",
                                       "reason", "requester")} == {
        "level": "info", "namespace": namespace, "pod": pod["metadata"]["name"],
        "notifier": "hello", "phase": "Succeeded", "reason": "Completed",
        "requester": record["spec"]["requestedBy"]["username"]}
    assert 0 <= line["duration_seconds"] < 20
    assert output not in json.dumps(line)


# --- the authorization cache ----------------------------------------------------------------


def test_repeated_identical_requests_make_one_subjectaccessreview(cluster: Cluster) -> None:
    """N identical requests of a new user within the TTL: one review per replica that served
    some of them, the others cache hits (each replica has its own cache).

    The counters are server-wide (summed over the replicas), and kube-controller-manager's own
    requests (its garbage collector lists and watches these resources) make reviews too,
    whenever its cached answers expire. Such noise can only add reviews; so the check is
    repeated with a new user until one round is free of it. A server without the cache would
    make N reviews every round.

    The requests are cluster-wide lists of podnotifiers, which members of a group may make
    (discovery would need no grant, but it is logged at debug, and the replicas log at info)."""
    requests = 10
    reviews = "container_notifier_authorization_reviews_total"
    hits = "container_notifier_authorization_cache_hits_total"
    group, path = "cache-test-listers", f"{API}/podnotifiers"
    cluster.apply(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": group},
         "rules": [{"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
                    "verbs": ["list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": group},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": group},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                       "name": group}]})

    def lists() -> bool:
        with cluster.client_for(cluster.user(unique("probe"), (group,))) as kube:
            return kube.get(path).status_code == 200

    wait_until(lists, "the ClusterRoleBinding to take effect", timeout=15)
    rounds = []
    for _ in range(5):
        user = cluster.user(unique("cached"), (group,))
        before = scrape(cluster)
        with cluster.client_for(user) as kube:
            codes = [kube.get(path).status_code for _ in range(requests)]
        after = scrape(cluster)
        assert codes == [200] * requests
        served = {replica: [e for e in logged_requests(cluster, path, replica)
                            if e["user"] == user.name] for replica in range(cluster.replicas)}
        # every request reached the extension server
        assert sum(len(entries) for entries in served.values()) == requests
        serving = sum(1 for entries in served.values() if entries)
        rounds.append((after[reviews] - before[reviews], after[hits] - before[hits], serving))
        if rounds[-1][0] == serving:
            break
    made, cache_hits, serving = rounds[-1]
    assert made == serving, f"reviews, cache hits and serving replicas per round: {rounds}"
    assert cache_hits >= requests - serving


def test_list_limited_to_one_name_needs_the_name_field_selector(
        cluster: Cluster, namespace: str) -> None:
    """RBAC resourceNames on list: like kube-apiserver, the server takes the name from
    ``fieldSelector=metadata.name=<name>``; a list without it is refused."""
    user = cluster.user(unique("one-name"))
    cluster.grant(namespace, user, [{"apiGroups": ["notifier.x-k8s.io"],
                                     "resources": ["podnotifiers"], "verbs": ["list"],
                                     "resourceNames": ["only-this"]}])
    path = f"{API}/namespaces/{namespace}/podnotifiers"
    one = {"fieldSelector": "metadata.name=only-this"}

    def listed() -> bool:
        with cluster.client_for(user) as kube:
            return kube.get(path, params=one).status_code == 200

    wait_until(listed, "the RoleBinding to take effect", timeout=15)
    with cluster.client_for(user) as kube:
        allowed = kube.get(path, params=one)
        everything = kube.get(path)
        other = kube.get(path, params={"fieldSelector": "metadata.name=another"})
    assert allowed.json()["kind"] == "PodNotifierList"
    assert allowed.json()["items"] == []
    # The same identity straight to the server, through its front proxy: the same answers.
    headers = [("X-Remote-User", user.name), ("X-Remote-Group", "system:authenticated")]
    with direct(cluster, cluster_pair(cluster, "front-proxy-client")) as server:
        direct_allowed = server.get(path, params=one, headers=headers)
        direct_everything = server.get(path, headers=headers)
        direct_other = server.get(path, params={"fieldSelector": "metadata.name=another"},
                                  headers=headers)
    assert direct_allowed.status_code == 200
    assert direct_allowed.json()["items"] == []
    denial = (f'User "{user.name}" cannot list resource "podnotifiers" in API group '
              f'"notifier.x-k8s.io" in the namespace "{namespace}"')
    assert everything.status_code == 403
    assert everything.json()["message"] == f"podnotifiers.notifier.x-k8s.io is forbidden: {denial}"
    assert other.status_code == 403
    assert other.json()["message"] == (
        f'podnotifiers.notifier.x-k8s.io "another" is forbidden: {denial}')
    assert direct_everything.json() == everything.json()
    assert direct_other.json() == other.json()
