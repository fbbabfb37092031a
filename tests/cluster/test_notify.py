"""pods/notify against the real control plane, through kube-apiserver's aggregator."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.kube import Cluster, User
from tests.support.notify import (
    API,
    body,
    declare,
    exec_notifier,
    notify,
    notify_path,
    records,
    signal_notifier,
)

pytestmark = pytest.mark.cluster

NOTIFY_RULES = [{"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"],
                 "verbs": ["create"]},
                {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
                 "verbs": ["get", "list", "watch"]}]


@pytest.fixture
def notifier_user(cluster: Cluster, namespace: str) -> User:
    """A user that may notify pods (and read records), but not exec or patch pods."""
    user = cluster.user("backup-bot")
    cluster.grant(namespace, user, NOTIFY_RULES)
    return user


@pytest.fixture
def db_pod(cluster: Cluster, namespace: str) -> str:
    annotations = declare(db=[
        exec_notifier("quiesce", "echo quiesced; echo to-stderr >&2"),
        exec_notifier("fail", "echo partial; exit 3"),
        exec_notifier("slow", "sleep 20", timeout=1),
        signal_notifier("reload", "SIGHUP"),
    ])
    return cluster.deploy(namespace, "db", containers=("db",),
                          annotations=annotations)[0]["metadata"]["name"]


def test_success_records_exit_code_and_output(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        response = notify(client, namespace, db_pod, "quiesce")
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["kind"] == "PodNotifier"
    assert record["spec"]["podName"] == db_pod
    assert record["spec"]["requestedBy"]["username"] == "backup-bot"
    assert record["metadata"]["labels"]["notifier.x-k8s.io/pod"] == db_pod
    status = record["status"]
    assert status["phase"] == "Succeeded"
    assert status["reason"] == "Completed"
    (container,) = status["containers"]
    assert container["exitCode"] == 0
    assert container["stdout"] == "quiesced\n"
    assert container["stderr"] == "to-stderr\n"
    assert container["startTime"] <= container["completionTime"]


def test_nonzero_exit_fails_with_its_exit_code(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        status = notify(client, namespace, db_pod, "fail").json()["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "NonZeroExitCode"
    assert status["containers"][0]["exitCode"] == 3
    assert status["containers"][0]["stdout"] == "partial\n"


def test_timeout_is_enforced_and_reported(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        status = notify(client, namespace, db_pod, "slow").json()["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "Timeout"
    container = status["containers"][0]
    assert container["reason"] == "Timeout"
    assert "exitCode" not in container


def test_signal_reaches_pid_1(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    log = cluster.layout.pid1_signal_log

    def hups() -> int:
        lines = log.read_text().splitlines() if log.exists() else []
        return sum(json.loads(line)["signal"] == "SIGHUP" for line in lines)

    before = hups()
    with cluster.client_for(notifier_user) as client:
        status = notify(client, namespace, db_pod, "reload").json()["status"]
    assert status["phase"] == "Succeeded", status
    assert hups() == before + 1


def test_two_containers_one_failing_keeps_both_results(
        cluster: Cluster, namespace: str, notifier_user: User) -> None:
    annotations = declare(web=[exec_notifier("flush", "echo web flushed")],
                          sidecar=[exec_notifier("flush", "echo sidecar broke >&2; exit 7")])
    pod = cluster.deploy(namespace, "two", containers=("web", "sidecar"),
                         annotations=annotations)[0]["metadata"]["name"]
    with cluster.client_for(notifier_user) as client:
        status = notify(client, namespace, pod, "flush").json()["status"]
    assert status["phase"] == "Failed"
    by_name = {c["name"]: c for c in status["containers"]}
    assert by_name["web"]["phase"] == "Succeeded"
    assert by_name["web"]["stdout"] == "web flushed\n"
    assert by_name["sidecar"]["phase"] == "Failed"
    assert by_name["sidecar"]["exitCode"] == 7
    assert by_name["sidecar"]["stderr"] == "sidecar broke\n"


def test_kubectl_create_raw_and_curl(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    path = notify_path(namespace, db_pod) + "?waitSeconds=20"
    created = cluster.kubectl("create", "--raw", path, "-f", "-", user=notifier_user,
                              input=json.dumps(body("quiesce")))
    assert json.loads(created.stdout)["status"]["phase"] == "Succeeded"

    config = notifier_user.kubeconfig.read_text()
    cert = notifier_user.kubeconfig.with_name(notifier_user.kubeconfig.name.removesuffix(
        ".kubeconfig") + ".crt")
    assert str(cert) in config
    curl = subprocess.run(
        ["curl", "-sS", "--cacert", str(cluster.layout.pki / "ca.crt"), "--cert", str(cert),
         "--key", str(cert.with_suffix(".key")), "-X", "POST",
         "-H", "Content-Type: application/json", "--data-binary", "@-",
         "-w", "\n%{http_code}", f"{cluster.server}{path}"],
        input=json.dumps(body("quiesce")), capture_output=True, text=True, timeout=60)
    answer, code = curl.stdout.rsplit("\n", 1)
    assert code == "201", curl.stdout + curl.stderr
    assert json.loads(answer)["status"]["containers"][0]["stdout"] == "quiesced\n"


def test_unknown_notifier_is_404(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        response = notify(client, namespace, db_pod, "defrost")
    assert response.status_code == 404
    assert response.json()["kind"] == "Status"
    assert response.json()["reason"] == "NotFound"
    assert 'notifier "defrost"' in response.json()["message"]
    assert records(cluster, namespace, fieldSelector="spec.notifier=defrost") == []


def test_unknown_pod_is_404(cluster: Cluster, namespace: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        response = notify(client, namespace, "no-such-pod", "quiesce")
    assert response.status_code == 404
    assert response.json()["message"] == 'pods "no-such-pod" not found'


def test_invalid_annotation_is_422_with_the_field(
        cluster: Cluster, namespace: str, notifier_user: User) -> None:
    annotations = declare(app=[{"name": "quiesce", "action": {"exec": {"command": []}}}])
    pod = cluster.deploy(namespace, "broken", annotations=annotations)[0]["metadata"]["name"]
    with cluster.client_for(notifier_user) as client:
        response = notify(client, namespace, pod, "quiesce")
    assert response.status_code == 422
    status = response.json()
    assert status["reason"] == "Invalid"
    fields = [cause["field"] for cause in status["details"]["causes"]]
    assert fields == ["metadata.annotations[notifier.x-k8s.io/notifiers].app[0].action.exec"
                      ".command"]
    assert records(cluster, namespace) == []


def test_annotation_patched_without_exec_rights_is_not_trusted(
        cluster: Cluster, namespace: str, notifier_user: User) -> None:
    """Anyone with `patch pods` can rewrite a pod's annotation; that must not let a notify-only
    caller run the new command. A caller who may exec is allowed: they could run it anyway."""
    original = declare(app=[exec_notifier("quiesce", "echo original")])
    pod = cluster.create_pod(namespace, "bare", annotations=original)["metadata"]["name"]
    patcher = cluster.user("patcher")
    cluster.grant(namespace, patcher, [{"apiGroups": [""], "resources": ["pods"],
                                        "verbs": ["get", "patch"]}])
    evil = declare(app=[exec_notifier("quiesce", "echo pwned > owned.txt")])
    cluster.kubectl("-n", namespace, "annotate", "--overwrite", f"pod/{pod}",
                    f"notifier.x-k8s.io/notifiers={evil['notifier.x-k8s.io/notifiers']}",
                    user=patcher)

    with cluster.client_for(notifier_user) as client:
        refused = notify(client, namespace, pod, "quiesce")
    assert refused.status_code == 403
    message = refused.json()["message"]
    assert "rule 1 failed: the pod has no controlling" in message
    assert 'rule 2 failed: User "backup-bot" cannot create resource "pods/exec"' in message
    assert records(cluster, namespace) == []

    operator = cluster.user("operator")
    cluster.grant(namespace, operator, [*NOTIFY_RULES, {"apiGroups": [""],
                                                        "resources": ["pods/exec"],
                                                        "verbs": ["create"]}])
    with cluster.client_for(operator) as client:
        allowed = notify(client, namespace, pod, "quiesce")
    assert allowed.status_code == 201, allowed.text
    assert allowed.json()["status"]["phase"] == "Succeeded"


def test_annotation_patched_on_a_deployment_pod_is_not_trusted(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    evil = declare(db=[exec_notifier("quiesce", "echo pwned")])
    cluster.kubectl("-n", namespace, "annotate", "--overwrite", f"pod/{db_pod}",
                    f"notifier.x-k8s.io/notifiers={evil['notifier.x-k8s.io/notifiers']}")
    with cluster.client_for(notifier_user) as client:
        refused = notify(client, namespace, db_pod, "quiesce")
    assert refused.status_code == 403
    assert "is not identical to the one in the pod template of its controller ReplicaSet/" in (
        refused.json()["message"])


def test_overlap_is_409(cluster: Cluster, namespace: str, notifier_user: User) -> None:
    annotations = declare(app=[exec_notifier("hold", "sleep 3", timeout=10)])
    pod = cluster.deploy(namespace, "busy", annotations=annotations)[0]["metadata"]["name"]
    with cluster.client_for(notifier_user) as client:
        first = notify(client, namespace, pod, "hold", wait=0)
        second = notify(client, namespace, pod, "hold", wait=0)
    assert first.status_code == 201
    assert second.status_code == 409
    assert second.json()["reason"] == "Conflict"
    assert first.json()["metadata"]["name"] in second.json()["message"]


def test_bad_requests_get_a_status_and_store_nothing(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    path = notify_path(namespace, db_pod)
    good = body("quiesce")
    cases = {
        "malformed JSON": (b"{not json", "application/json", 400),
        "wrong kind": (json.dumps({**good, "kind": "Pod"}).encode(), "application/json", 400),
        "pod name mismatch": (json.dumps(body("quiesce", podName="other")).encode(),
                              "application/json", 400),
        "unknown field": (json.dumps(body("quiesce", colour="blue")).encode(),
                          "application/json", 400),
        "2 MiB body": (json.dumps({**good, "pad": "x" * (2 << 20)}).encode(),
                       "application/json", 413),
        "non-JSON content type": (b"notifier: quiesce", "text/plain", 415),
        "timeout out of range": (json.dumps(body("quiesce", timeoutSeconds=0)).encode(),
                                 "application/json", 422),
    }
    with cluster.client_for(notifier_user) as client:
        for case, (content, content_type, code) in cases.items():
            response = client.post(path, content=content,
                                   headers={"Content-Type": content_type})
            assert response.status_code == code, (case, response.text)
            status = response.json()
            assert (status["kind"], status["apiVersion"], status["status"]) == (
                "Status", "v1", "Failure"), case
            assert status["code"] == code, case
            assert status["message"], case
    assert records(cluster, namespace) == []


def test_dry_run_validates_and_stores_nothing(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        response = client.post(notify_path(namespace, db_pod), params={"dryRun": "All"},
                               json=body("quiesce"))
    assert response.status_code == 201
    assert response.json()["status"]["phase"] == "Running"  # as a record is created
    assert response.json()["status"]["startTime"]
    assert records(cluster, namespace) == []


def test_records_are_listed_with_selectors(
        cluster: Cluster, namespace: str, db_pod: str, notifier_user: User) -> None:
    with cluster.client_for(notifier_user) as client:
        notify(client, namespace, db_pod, "quiesce")
        notify(client, namespace, db_pod, "fail")
        listed = client.get(f"{API}/namespaces/{namespace}/podnotifiers",
                            params={"fieldSelector": "status.phase=Failed"}).json()
    assert [r["spec"]["notifier"] for r in listed["items"]] == ["fail"]
