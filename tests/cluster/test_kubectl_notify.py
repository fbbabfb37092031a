"""`kubectl notify` end to end: the installed console script, run as a subprocess (not a
terminal) against the local control plane with real kubeconfigs — client-certificate users
bound to the shipped ClusterRoles, and a ServiceAccount whose kubeconfig runs an exec
credential plugin — checking exit codes and what it prints."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import declare, exec_notifier, records, signal_notifier
from tests.support.plugin import (
    Plugin,
    bind_cluster_role,
    exec_plugin_kubeconfig,
    install,
    service_account_token,
    user_kubeconfig_with_namespace,
)
from tests.support.processes import running_sleeps

pytestmark = pytest.mark.cluster

NOTIFIERS = declare(db=[
    exec_notifier("quiesce", "echo checkpoint; echo quiesced"),
    exec_notifier("fail", "echo partial; exit 3"),
    exec_notifier("slow", "sleep 4; echo late", timeout=30),
    signal_notifier("reload", "SIGHUP"),
])


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Plugin:
    return install(tmp_path_factory.mktemp("kubectl-notify"))


@pytest.fixture
def pods(cluster: Cluster, namespace: str) -> list[str]:
    """Two pods of a Deployment (their notifiers are trusted by its template), and a bare pod
    `bare` declaring the same (trusted only for users who may exec)."""
    deployed = cluster.deploy(namespace, "db", replicas=2, containers=("db",),
                              annotations=NOTIFIERS)
    cluster.create_pod(namespace, "bare", containers=("db",), annotations=NOTIFIERS)
    return sorted(p["metadata"]["name"] for p in deployed)


@pytest.fixture
def bot(cluster: Cluster, namespace: str) -> User:
    """May notify and read (container-notifier:notifier and view), not exec."""
    user = cluster.user("kn-bot")
    bind_cluster_role(cluster, namespace, "container-notifier:notifier", user=user.name)
    bind_cluster_role(cluster, namespace, "view", user=user.name)
    return user


@pytest.fixture
def ci(cluster: Cluster, namespace: str, tmp_path: Path) -> Path:
    """The kubeconfig of a ServiceAccount bound to edit, authenticated by an exec credential
    plugin printing its TokenRequest token; the context's namespace is the test's."""
    token = service_account_token(cluster, namespace, "ci")
    bind_cluster_role(cluster, namespace, "edit", service_account="ci")
    return exec_plugin_kubeconfig(cluster, tmp_path / "ci", token, namespace)


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> list[str]:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result.stdout.splitlines()


def columns(line: str) -> list[str]:
    return re.split(r" {3,}", line.strip())


def test_notify_success_prints_a_line_per_container_and_exits_0(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    lines = ok(plugin.run(pods[0], "quiesce", "-n", namespace, kubeconfig=bot.kubeconfig))
    assert re.fullmatch(rf"podnotifier/{pods[0]}-quiesce-\w+ Succeeded in \d+(ms|\.\ds)",
                        lines[0]), lines
    assert columns(lines[1]) == ["CONTAINER", "PHASE", "EXIT", "DURATION", "OUTPUT"]
    row = columns(lines[2])
    assert row[:3] == ["db", "Succeeded", "0"] and row[4] == "quiesced"
    (record,) = records(cluster, namespace, fieldSelector=f"spec.podName={pods[0]}")
    assert record["spec"]["requestedBy"]["username"] == "kn-bot"
    assert lines[0].split()[0] == f"podnotifier/{record['metadata']['name']}"


def test_notify_failure_exits_1_with_the_exit_code(
        plugin: Plugin, namespace: str, pods: list[str], bot: User) -> None:
    lines = ok(plugin.run(pods[0], "fail", "-n", namespace, "-o", "wide",
                          kubeconfig=bot.kubeconfig), 1)
    assert "Failed (NonZeroExitCode)" in lines[0]
    assert columns(lines[2])[:4] == ["db", "Failed", "NonZeroExitCode", "3"]
    assert "--- db stdout, last 1 line:" in lines and "    partial" in lines
    (message,) = [line for line in lines if line.startswith("--- db message: ")]
    # kwok quotes the command line it ran: the declared one, not the server's PID wrapper
    assert "sh -c echo partial; exit 3: exit status 3" in message, message
    assert "container-notifier" not in message and "printf" not in message, message


def test_notify_forbidden_and_not_declared_exit_2(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    nobody = cluster.user("kn-nobody")
    result = plugin.run(pods[0], "quiesce", "-n", namespace, kubeconfig=nobody.kubeconfig)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("Error from server (Forbidden): ")
    assert "kn-nobody" in result.stderr and "pods/notify" in result.stderr

    untrusted = plugin.run("bare", "quiesce", "-n", namespace, kubeconfig=bot.kubeconfig)
    assert untrusted.returncode == 2
    assert untrusted.stderr.startswith("Error from server (Forbidden): ")
    assert "not trusted" in untrusted.stderr and "rule 2 failed" in untrusted.stderr

    missing = plugin.run(pods[0], "nope", "-n", namespace, kubeconfig=bot.kubeconfig)
    assert missing.returncode == 2
    assert missing.stderr.startswith("Error from server (NotFound): ")
    assert "quiesce" in missing.stderr
    assert records(cluster, namespace) == []


def test_dry_run_runs_and_stores_nothing(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    lines = ok(plugin.run(pods[0], "quiesce", "--dry-run=server", "-n", namespace,
                          kubeconfig=bot.kubeconfig))
    assert re.fullmatch(rf"podnotifier/{pods[0]}-quiesce-\w+ created \(server dry run\)",
                        lines[0]), lines
    assert records(cluster, namespace) == []


def test_wait_ending_before_the_run_exits_1_and_the_run_goes_on(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    result = plugin.run(pods[1], "slow", "--wait=1s", "-n", namespace, kubeconfig=bot.kubeconfig)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Running" in result.stdout.splitlines()[0]
    assert result.stderr.startswith("error: timed out waiting for podnotifier/")
    (record,) = records(cluster, namespace, fieldSelector=f"spec.podName={pods[1]}")
    assert record["status"]["phase"] in ("Pending", "Running")


def test_fan_out_with_an_exec_plugin_user_prints_progress_lines(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], ci: Path) -> None:
    lines = ok(plugin.run("-l", "app=db", "quiesce", "--parallelism", "2", kubeconfig=ci))
    assert re.fullmatch(r"notification/quiesce-\w+ created", lines[0]), lines
    name = lines[0].split("/")[1].split()[0]
    assert lines[-1].startswith(f"notification/{name} Succeeded: 2 succeeded, 0 failed, "
                                "0 skipped of 2 pods")
    progress = lines[1:-1]
    assert progress and all(re.fullmatch(
        rf"notification/{name} (Pending|Running|Succeeded): \d/2 done \(\d succeeded, 0 failed, "
        r"0 skipped, \d running, \d pending\)", line) for line in progress), progress
    assert progress[-1].startswith(f"notification/{name} Succeeded: 2/2 done")
    ran = records(cluster, namespace, labelSelector=f"notifier.x-k8s.io/notification={name}")
    assert sorted(r["spec"]["podName"] for r in ran) == pods
    assert {r["spec"]["requestedBy"]["username"] for r in ran} == {
        f"system:serviceaccount:{namespace}:ci"}


def test_fan_out_failure_lists_the_failed_pods_and_exits_1(
        plugin: Plugin, namespace: str, pods: list[str], ci: Path, tmp_path: Path) -> None:
    # Through KUBECONFIG, a list whose first file is missing: the context's namespace applies.
    lines = ok(plugin.run("-l", "app=db", "fail", "--continue-on-failure",
                          env={"KUBECONFIG": f"{tmp_path / 'missing'}:{ci}"}), 1)
    summary = next(i for i, line in enumerate(lines) if " Failed: 0 succeeded" in line)
    assert "0 succeeded, 2 failed, 0 skipped of 2 pods" in lines[summary]
    assert lines[summary + 1].startswith("PodsFailed: 2 of 2 pods failed (NonZeroExitCode: 2)")
    assert lines[summary + 2] == "Failed pods:"
    assert columns(lines[summary + 3]) == ["POD", "REASON", "EXIT", "MESSAGE"]
    failed = sorted(columns(line)[:3] for line in lines[summary + 4:])
    assert failed == [[pod, "NonZeroExitCode", "3"] for pod in pods]


def test_list_says_who_may_run_what_and_runs_nothing(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User,
        ci: Path, tmp_path: Path) -> None:
    kubeconfig = user_kubeconfig_with_namespace(bot, namespace, tmp_path)
    lines = ok(plugin.run("list", "-l", "app=db", kubeconfig=kubeconfig))
    assert columns(lines[0]) == ["POD", "CONTAINER", "NOTIFIER", "ACTION", "TIMEOUT", "MAY RUN"]
    rows = [columns(line) for line in lines[1:]]
    assert [(r[0], r[2], r[5]) for r in rows] == [
        (pod, notifier, "yes (template)") for pod in pods
        for notifier in ("quiesce", "fail", "slow", "reload")]
    assert rows[3][3:5] == ["signal SIGHUP", "30s"] and rows[2][4] == "30s"

    bare = [columns(line) for line in ok(plugin.run("list", "pod/bare", "-o", "wide",
                                                    kubeconfig=kubeconfig))[1:]]
    assert {row[5] for row in bare} == {"no (Forbidden)"}
    assert all("rule 2 failed" in row[6] for row in bare)
    editor = [columns(line) for line in ok(plugin.run("list", "bare", kubeconfig=ci))[1:]]
    assert {row[5] for row in editor} == {"yes (pods/exec)"}
    assert records(cluster, namespace) == []


def test_can_i_answers_with_the_access_review_and_the_trust_rules(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    lines = ok(plugin.run("can-i", pods[0], "quiesce", "-n", namespace,
                          kubeconfig=bot.kubeconfig))
    assert lines[0].startswith(f"create pods/notify (notifier.x-k8s.io) on pod {pods[0]}: "
                               "yes - RBAC: allowed by RoleBinding")
    assert lines[1] == 'run notifier "quiesce": yes'

    lines = ok(plugin.run("can-i", "bare", "quiesce", "-n", namespace,
                          kubeconfig=bot.kubeconfig), 1)
    assert lines[0].endswith(": yes - " + lines[0].split(": yes - ", 1)[1])
    assert lines[1].startswith('run notifier "quiesce": no - pods "bare" is forbidden')

    nobody = cluster.user("kn-nobody")
    assert ok(plugin.run("can-i", pods[0], "-n", namespace, kubeconfig=nobody.kubeconfig),
              1) == [f"create pods/notify (notifier.x-k8s.io) on pod {pods[0]}: no"]
    # kubectl's --as: an admin asks on behalf of the bot and of nobody.
    admin = cluster.layout.kubeconfig
    assert ok(plugin.run("can-i", pods[0], "-n", namespace, "--as", "kn-bot",
                         kubeconfig=admin))[0].endswith('to User "kn-bot"')
    assert ok(plugin.run("can-i", pods[0], "-n", namespace, "--as", "kn-nobody",
                         kubeconfig=admin), 1)[0].endswith(": no")
    # What docs/kubectl-notify.md says: kubectl's own can-i maps "pods" to the core group.
    answer = cluster.kubectl("auth", "can-i", "create", "pods/notify", "-n", namespace,
                             user=bot, check=False)
    assert (answer.returncode, answer.stdout.strip()) == (1, "no")


def test_usage_and_kubeconfig_errors_exit_2(plugin: Plugin) -> None:
    usage = plugin.run("only-a-pod")
    assert usage.returncode == 2
    assert usage.stderr.splitlines() == [
        "error: give a POD and a NOTIFIER (or -l SELECTOR NOTIFIER); got 1 argument: "
        "only-a-pod", "See 'kubectl notify --help' for usage."]
    missing = plugin.run("db-0", "quiesce")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: no kubeconfig: ~/.kube/config does not exist")
    assert plugin.run("--help").stdout.startswith("usage: kubectl notify POD NOTIFIER")


def test_kubectl_runs_it_as_a_plugin_and_completes_it(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    """Real kubectl finds kubectl-notify on PATH (`kubectl notify ...`), and asks
    kubectl_complete-notify to complete `kubectl notify <TAB>` (pods from the cluster)."""
    env = {"PATH": f"{plugin.script.parent}:{cluster.bins}:/usr/bin:/bin",
           "HOME": str(plugin.home), "PYTHONPATH": str(plugin.site)}
    kubectl = str(cluster.bins / "kubectl")
    ran = subprocess.run([kubectl, "notify", pods[0], "reload", "-n", namespace,
                          f"--kubeconfig={bot.kubeconfig}"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0].startswith(f"podnotifier/{pods[0]}-reload-")
    completed = subprocess.run([kubectl, "__complete", "notify", "-n", namespace,
                                f"--kubeconfig={bot.kubeconfig}", ""], capture_output=True,
                               text=True, env=env, timeout=60)
    assert completed.returncode == 0, completed.stderr
    words = completed.stdout.splitlines()
    assert {"list", "can-i", "completion", "bare", *pods} <= set(words), words
    assert words[-1] == ":4"
    notifiers = subprocess.run([kubectl, "__complete", "notify", pods[0], "-n", namespace,
                                f"--kubeconfig={bot.kubeconfig}", "re"], capture_output=True,
                               text=True, env=env, timeout=60)
    assert notifiers.stdout.splitlines() == ["reload", ":4"], notifiers.stderr


def test_a_held_run_returns_once_held_and_release_ends_it(
        plugin: Plugin, cluster: Cluster, namespace: str, bot: User) -> None:
    sleep = "3577.3"  # no other test sleeps this long: only this command matches
    pod = cluster.deploy(namespace, "vault", annotations=declare(app=[{
        "name": "lock", "timeoutSeconds": 10, "hold": {"maxHoldSeconds": 120},
        "action": {"exec": {"command": ["/bin/sh", "-c", f"echo ready; exec sleep {sleep}"]}}}]
    ))[0]["metadata"]["name"]
    lines = ok(plugin.run(pod, "lock", "-n", namespace, kubeconfig=bot.kubeconfig))
    held = re.fullmatch(rf"podnotifier/({pod}-lock-\w+) Held", lines[0])
    assert held, lines
    name = held.group(1)
    assert columns(lines[2])[:2] == ["app", "Held"]  # output is stored when the run ends
    assert lines[-1] == (f"held until released: kubectl notify -n {namespace} release "
                         f"podnotifier/{name}")
    assert running_sleeps(cluster.layout.exec_workdir, sleep), "the held command is not running"

    lines = ok(plugin.run("release", f"podnotifier/{name}", "-n", namespace,
                          kubeconfig=bot.kubeconfig))
    assert re.fullmatch(rf"podnotifier/{name} Succeeded in \S+", lines[0]), lines
    assert columns(lines[2])[:2] == ["app", "Succeeded"]
    assert not running_sleeps(cluster.layout.exec_workdir, sleep), "the hold outlived release"


def test_a_quiesce_window_returns_once_quiesced_and_release_ends_it(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], ci: Path) -> None:
    lines = ok(plugin.run("-l", "app=db", "quiesce", "--parallelism", "2", "--release",
                          "reload", "--max-hold", "2m", kubeconfig=ci))
    created = re.fullmatch(r"notification/(quiesce-\w+) created", lines[0])
    assert created, lines
    name = created.group(1)
    assert re.fullmatch(rf"notification/{name} Quiesced: 2 pods quiesced at \S+Z; released "
                        "at the latest after 120s", lines[-2]), lines
    assert lines[-1] == (f"quiesced until released: kubectl notify -n {namespace} release "
                         f"notification/{name}")
    label = f"notifier.x-k8s.io/notification={name}"
    assert {r["spec"]["notifier"] for r in records(cluster, namespace,
                                                   labelSelector=label)} == {"quiesce"}

    lines = ok(plugin.run("release", f"notification/{name}", kubeconfig=ci))
    assert re.fullmatch(rf"notification/{name} Succeeded: 2 succeeded, 0 failed, 0 skipped of "
                        r"2 pods, 2 released in \S+", lines[0]), lines
    assert re.fullmatch(r"window: quiesced \S+Z, release requested \S+Z, release started \S+Z, "
                        r"unquiesced \S+Z", lines[1]), lines
    ran = records(cluster, namespace, labelSelector=label)
    assert sorted((r["spec"]["notifier"], r["spec"]["podName"]) for r in ran) == sorted(
        [("quiesce", pod) for pod in pods] + [("reload", pod) for pod in pods])


APISERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.notifier.x-k8s.io"


def _available(cluster: Cluster) -> str:
    with cluster.admin() as kube:
        found = kube.get(APISERVICE)
    if found.status_code == 404:
        return "absent"
    conditions = found.json().get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == "Available"), "")


def test_a_missing_or_unavailable_apiservice_is_named(
        plugin: Plugin, cluster: Cluster, namespace: str, pods: list[str], bot: User) -> None:
    """Real kubectl running the plugin while the session plane's APIService points at a port
    nothing listens on (Available False: kube-apiserver answers a plain 503), then while it is
    deleted (a plain 404); the APIService is restored, Available, whatever happens."""
    env = {"PATH": f"{plugin.script.parent}:{cluster.bins}:/usr/bin:/bin",
           "HOME": str(plugin.home), "PYTHONPATH": str(plugin.site)}

    def kubectl_notify(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(cluster.bins / "kubectl"), "notify", pods[0], "reload", "-n",
                               namespace, f"--kubeconfig={kubeconfig}"], capture_output=True,
                              text=True, env=env, timeout=120)

    with cluster.admin() as kube:
        original = kube.get(APISERVICE).json()
    restore = {"apiVersion": original["apiVersion"], "kind": original["kind"],
               "metadata": {"name": original["metadata"]["name"],
                            "labels": original["metadata"].get("labels", {})},
               "spec": original["spec"]}
    unused_port = cluster.ports.notifier + 90
    try:
        with cluster.admin() as kube:
            patched = kube.patch(APISERVICE, json={"spec": {"service": {"port": unused_port}}},
                                 headers={"Content-Type": "application/merge-patch+json"})
            assert patched.status_code == 200, patched.text
        wait_until(lambda: _available(cluster) == "False", "APIService Available=False", 60)
        ran = kubectl_notify(bot.kubeconfig)
        assert ran.returncode == 1, (ran.stdout, ran.stderr)
        assert ran.stderr.startswith(
            "error: the notifier.x-k8s.io API is unavailable (kube-apiserver answered 503: "
            "service unavailable): its APIService v1alpha1.notifier.x-k8s.io is not Available. "
            "See why: kubectl get apiservice v1alpha1.notifier.x-k8s.io"), ran.stderr
        assert "unable to reach the server" not in ran.stderr
        # who may read APIServices also gets the reason
        ran = kubectl_notify(cluster.layout.kubeconfig)
        assert ran.returncode == 1 and "is not Available (FailedDiscoveryCheck: " in ran.stderr, (
            ran.stderr)

        with cluster.admin() as kube:
            assert kube.delete(APISERVICE).status_code == 200
        wait_until(lambda: _available(cluster) == "absent", "APIService deleted", 30)
        wait_until(lambda: "404" in kubectl_notify(bot.kubeconfig).stderr,
                   "kube-apiserver to stop routing the group", 30)
        ran = kubectl_notify(bot.kubeconfig)
        assert ran.returncode == 2, (ran.stdout, ran.stderr)
        assert ran.stderr.strip() == (
            "error: this cluster does not serve notifier.x-k8s.io/v1alpha1 (kube-apiserver "
            "answered 404: 404 page not found): the APIService v1alpha1.notifier.x-k8s.io is "
            "not registered. Install container-notifier (docs/install.md), then check it: "
            "kubectl get apiservice v1alpha1.notifier.x-k8s.io"), ran.stderr
    finally:
        with cluster.admin() as kube:
            if kube.get(APISERVICE).status_code == 404:
                assert kube.post("/apis/apiregistration.k8s.io/v1/apiservices",
                                 json=restore).status_code == 201
            else:
                kube.patch(APISERVICE, json={"spec": original["spec"]},
                           headers={"Content-Type": "application/merge-patch+json"})
        wait_until(lambda: _available(cluster) == "True", "APIService Available again", 90)
        wait_until(cluster.served, "the group served again", 60)
    assert kubectl_notify(bot.kubeconfig).returncode == 0
