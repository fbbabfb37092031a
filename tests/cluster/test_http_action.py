"""The http action against the real control plane, through kube-apiserver's aggregator, as
real users with real RBAC: each pod's endpoint is a real HTTP server the test starts on the
pod's own (loopback) IP and declared port, recording every request it receives, so the tests
count what ran on which pod and how often, as the exec tests count lines in a host file."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_ha import LEASE_DURATION_SECONDS, REPLICA_PREFIX, TAKEOVER_BOUND_SECONDS
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    API,
    create_notification,
    declare,
    notification,
    notify,
    records,
    wait_finished,
)
from tests.support.plugin import install
from tests.support.pod_http import Answer, PodHttpServer

pytestmark = pytest.mark.cluster

ANNOTATION_PATH = "metadata.annotations[notifier.x-k8s.io/notifiers]"
RULES = [
    {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify", "notifications"],
     "verbs": ["create", "get", "list"]},
    {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications/release"],
     "verbs": ["create"]},
    # bare pods, each with its own declaration: trusted through pods/exec (trust rule 2)
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},  # kubectl notify list
]


def http_notifier(name: str, path: str, port: int | str = "web", method: str = "POST",
                  **extra: Any) -> dict[str, Any]:
    return {"name": name, "action": {"http": {"method": method, "port": port, "path": path}},
            **extra}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def operator(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("http-operator")
    cluster.grant(namespace, user, RULES)
    return user


@pytest.fixture(autouse=True)
def every_replica_back(cluster: Cluster) -> Iterator[None]:
    """The crash test kills a replica; afterwards every replica runs and is routed to."""
    yield
    for replica in range(cluster.replicas):
        if not cluster.replica_ready(replica):
            cluster.restart_replica(replica)


def make_pods(cluster: Cluster, namespace: str, count: int, port: int,
              notifiers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`count` bare pods labelled set=web whose container `web` declares `notifiers` and the
    named port web = `port`; returns them Running, with their IPs."""
    with cluster.admin() as kube:
        for i in range(count):
            response = kube.post(f"/api/v1/namespaces/{namespace}/pods", json={
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"web-{i}", "labels": {"set": "web"},
                             "annotations": declare(web=notifiers)},
                "spec": {"containers": [{"name": "web", "image": "fake.example/web:1",
                                         "ports": [{"name": "web", "containerPort": port}]}]}})
            assert response.status_code == 201, response.text
    pods = cluster.wait_running_pods(namespace, "set=web", count, timeout=120)
    wait_until(lambda: all(pod_ip(cluster, namespace, p["metadata"]["name"]) for p in pods),
               "the pods' IPs", 60)
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def pod_ip(cluster: Cluster, namespace: str, pod: str) -> str:
    with cluster.admin() as kube:
        ip: str = kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}").json()[
            "status"].get("podIP", "")
    return ip


def servers(stack: ExitStack, cluster: Cluster, namespace: str, pods: list[dict[str, Any]],
            port: int, answers: dict[str, Answer] | None = None) -> dict[str, PodHttpServer]:
    """A server on each pod's IP and `port`, answering `answers[pod]` (200 ok by default)."""
    started = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        started[name] = stack.enter_context(PodHttpServer(
            pod_ip(cluster, namespace, name), port, answer=(answers or {}).get(name)))
    return started


def test_pods_notify_sends_one_request_to_the_pod_and_records_the_answer(
        cluster: Cluster, namespace: str, operator: User) -> None:
    port = free_port()
    (pod,) = make_pods(cluster, namespace, 1, port, [
        http_notifier("reload", "/-/reload"),
        http_notifier("flush", "/_flush", method="PUT", timeoutSeconds=1),
        http_notifier("missing", "/", port=free_port())])
    name, ip = pod["metadata"]["name"], pod_ip(cluster, namespace, pod["metadata"]["name"])
    with ExitStack() as stack:
        server = servers(stack, cluster, namespace, [pod], port)[name]
        with cluster.client_for(operator) as client:
            ok = notify(client, namespace, name, "reload")
            server.answer = Answer(503, b"draining, try later")
            unavailable = notify(client, namespace, name, "reload").json()["status"]
            server.answer = Answer(200, delay_seconds=3)
            slow = notify(client, namespace, name, "flush").json()["status"]
            missing = notify(client, namespace, name, "missing").json()["status"]
        received = list(server.requests)
    assert ok.status_code == 201, ok.text
    status = ok.json()["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Completed")
    (container,) = status["containers"]
    assert (container["statusCode"], container["responseBody"]) == (200, "ok\n")
    assert "exitCode" not in container and "stdout" not in container
    assert (unavailable["phase"], unavailable["reason"]) == ("Failed",
                                                                  "NonSuccessStatusCode")
    assert unavailable["containers"][0]["statusCode"] == 503
    assert unavailable["containers"][0]["responseBody"] == "draining, try later"
    assert "web: HTTP status 503" in unavailable["message"]
    assert (slow["reason"], slow["containers"][0]["reason"]) == ("Timeout", "Timeout")
    assert missing["reason"] == "ConnectionRefused", missing
    # one request per run, to the pod's own address, with the declared method and path
    assert [(r.method, r.path) for r in received] == [
        ("POST", "/-/reload"), ("POST", "/-/reload"), ("PUT", "/_flush")]
    assert {r.headers["host"] for r in received} == {f"{ip}:{port}"}
    shown = cluster.kubectl("get", "podnotifiers", "-n", namespace, "--sort-by",
                            ".metadata.creationTimestamp", user=operator).stdout
    assert "HTTP 503" in shown and "Timeout" in shown, shown


def test_a_declaration_the_server_cannot_run_is_refused_naming_the_field(
        cluster: Cluster, namespace: str, operator: User) -> None:
    port = free_port()
    (pod,) = make_pods(cluster, namespace, 1, port, [
        http_notifier("reload", "/-/reload", port="admin"),
        http_notifier("range", "/", port=70000),
        http_notifier("header", "/", httpHeaders=[])])
    name = pod["metadata"]["name"]
    with cluster.client_for(operator) as client:
        answer = notify(client, namespace, name, "reload")
    assert answer.status_code == 422, answer.text
    fields = {cause["field"] for cause in answer.json()["details"]["causes"]}
    assert f"{ANNOTATION_PATH}.web[0].action.http.port" in fields
    assert f"{ANNOTATION_PATH}.web[1].action.http.port" in fields
    assert f"{ANNOTATION_PATH}.web[2].httpHeaders" in fields  # misplaced: unknown field
    assert any('"admin"' in cause["message"] and "no port of this name" in cause["message"]
               for cause in answer.json()["details"]["causes"])
    assert records(cluster, namespace) == []


def test_a_notification_with_rollback_over_http(
        cluster: Cluster, namespace: str, operator: User) -> None:
    port = free_port()
    pods = make_pods(cluster, namespace, 3, port, [
        http_notifier("quiesce", "/quiesce"), http_notifier("unquiesce", "/unquiesce")])
    failing = pods[1]["metadata"]["name"]
    with ExitStack() as stack:
        by_pod = servers(stack, cluster, namespace, pods, port,
                         {failing: Answer(500, b"cannot quiesce", delay_seconds=2)})
        with cluster.client_for(operator) as client:
            created = create_notification(client, namespace, notification(
                "snap", "quiesce", {"set": "web"}, parallelism=3,
                rollback={"notifier": "unquiesce"}))
        assert created.status_code == 201, created.text
        done = wait_finished(cluster, namespace, "snap", timeout=120)
        counts = {name: (server.count("/quiesce"), server.count("/unquiesce"))
                  for name, server in by_pod.items()}
    status = done["status"]
    assert status["phase"] == "Failed", status
    assert (status["counts"]["succeeded"], status["counts"]["failed"],
            status["counts"]["rolledBack"]) == (2, 1, 2), status["counts"]
    for name, (quiesced, unquiesced) in counts.items():
        assert quiesced == 1, counts  # forward at most once (here: each pod once)
        assert unquiesced == (0 if name == failing else 1), counts  # rollback: the others


def test_a_window_released_by_an_http_notifier(
        cluster: Cluster, namespace: str, operator: User) -> None:
    port = free_port()
    pods = make_pods(cluster, namespace, 2, port, [
        http_notifier("quiesce", "/quiesce"), http_notifier("unquiesce", "/unquiesce")])
    with ExitStack() as stack:
        by_pod = servers(stack, cluster, namespace, pods, port)
        with cluster.client_for(operator) as client:
            created = create_notification(client, namespace, notification(
                "window", "quiesce", {"set": "web"}, parallelism=2,
                release={"notifier": "unquiesce", "afterSeconds": 0}))
            assert created.status_code == 201, created.text
            done = wait_finished(cluster, namespace, "window", timeout=120)
        counts = {name: (s.count("/quiesce"), s.count("/unquiesce")) for name, s in by_pod.items()}
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["counts"]["released"] == 2, status["counts"]
    assert counts == {name: (1, 1) for name in by_pod}


def test_a_replica_killed_mid_request_ends_the_run_with_a_reason_and_sends_it_once(
        cluster: Cluster, namespace: str, operator: User) -> None:
    port = free_port()
    (pod,) = make_pods(cluster, namespace, 1, port, [
        http_notifier("quiesce", "/quiesce", timeoutSeconds=120)])
    name = pod["metadata"]["name"]
    with ExitStack() as stack:
        server = servers(stack, cluster, namespace, [pod], port,
                         {name: Answer(200, delay_seconds=90)})[name]
        with cluster.client_for(operator) as client:
            created = notify(client, namespace, name, "quiesce", wait=0)
        assert created.status_code == 201, created.text
        record = created.json()["metadata"]["name"]
        wait_until(lambda: server.count("/quiesce") == 1, "the request to reach the pod", 30)
        owner = created.json()["status"]["replica"]
        cluster.kill_replica(int(owner.removeprefix(REPLICA_PREFIX)))

        def finished() -> dict[str, Any] | None:
            with cluster.admin() as kube:
                response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{record}")
            if response.status_code != 200:
                return None
            found: dict[str, Any] = response.json()
            return found if found["status"]["phase"] in ("Succeeded", "Failed") else None

        wait_until(lambda: finished() is not None, "the survivor to end the run",
                   LEASE_DURATION_SECONDS + TAKEOVER_BOUND_SECONDS)
        status = (finished() or {})["status"]
        sent = server.count("/quiesce")
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
    assert status["containers"][0]["reason"] == "Interrupted"
    assert sent == 1  # the request is never sent again, by the survivor or anyone


def test_kubectl_notify_reloads_over_http_as_the_prometheus_example_does(
        cluster: Cluster, namespace: str, operator: User, tmp_path: Path) -> None:
    """docs/kubectl-notify.md's Prometheus reload: POST /-/reload on the named port web, run
    and listed by the installed plugin."""
    plugin = install(tmp_path / "kubectl-notify")
    port = free_port()
    (pod,) = make_pods(cluster, namespace, 1, port, [
        http_notifier("reload", "/-/reload", timeoutSeconds=10)])
    name = pod["metadata"]["name"]
    with ExitStack() as stack:
        server = servers(stack, cluster, namespace, [pod], port,
                         {name: Answer(200, b"")})[name]
        ran = plugin.run(name, "reload", "-n", namespace, kubeconfig=operator.kubeconfig)
        server.answer = Answer(500, b"failed to reload config: bad rule\n")
        failed = plugin.run(name, "reload", "-n", namespace, kubeconfig=operator.kubeconfig)
        listed = plugin.run("list", name, "-n", namespace, kubeconfig=operator.kubeconfig)
        sent = [(r.method, r.path) for r in server.requests]
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert re.split(r" {3,}", ran.stdout.splitlines()[2].strip())[:3] == [
        "web", "Succeeded", "HTTP 200"], ran.stdout
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    row = re.split(r" {3,}", failed.stdout.splitlines()[2].strip())
    assert (row[2], row[-1]) == ("HTTP 500", "failed to reload config: bad rule"), failed.stdout
    assert listed.returncode == 0, (listed.stdout, listed.stderr)
    assert "http POST :web/-/reload" in listed.stdout, listed.stdout
    assert sent == [("POST", "/-/reload")] * 2
