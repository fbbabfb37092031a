"""docs/consistent-snapshots.md's backup ServiceAccount can run every command of the page: the
test creates the page's ServiceAccount, Role and RoleBinding exactly as the page gives them (read
from its YAML), then runs the page's commands with real kubectl and the kubectl notify plugin
(installed from its distribution) as that ServiceAccount (a TokenRequest token through an exec
credential plugin). Each command is written here as the page writes it, and the test checks the
page still has it; only the namespace and the generated names are replaced. The VolumeSnapshot
steps are not run: the local control plane has no CSI driver. The pods' held notifiers are
stand-ins (`echo ready` then a `sleep`): what runs in them is test_snapshot_databases.py's."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.kube import Cluster
from tests.support.notify import declare
from tests.support.plugin import Plugin, exec_plugin_kubeconfig, install, service_account_token
from tests.unit.test_snapshot_walkthrough import PAGE, documents

pytestmark = pytest.mark.cluster


def held(name: str, sleep: str) -> dict[str, object]:
    return {"name": name, "timeoutSeconds": 60,
            "hold": {"readyLine": "ready", "maxHoldSeconds": 900},
            "action": {"exec": {"command": ["/bin/sh", "-c", f"echo ready; exec sleep {sleep}"]}}}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Plugin:
    return install(tmp_path_factory.mktemp("plugin"))


class Page:
    """Runs the page's commands as its backup ServiceAccount in `namespace`."""

    def __init__(self, cluster: Cluster, plugin: Plugin, namespace: str, kubeconfig: Path,
                 workdir: Path) -> None:
        self.cluster, self.namespace, self.workdir = cluster, namespace, workdir
        self.env = {"PATH": f"{plugin.script.parent}:{cluster.bins}:/usr/bin:/bin",
                    "HOME": str(plugin.home), "PYTHONPATH": str(plugin.site),
                    "KUBECONFIG": str(kubeconfig)}
        self.text = " ".join(PAGE.read_text().split())
        self.names: dict[str, str] = {}

    def run(self, command: str, stdin: str | None = None, code: int = 0, shell: bool = False
            ) -> str:
        """Run `command` as the page writes it (checked), with the namespace and the generated
        names replaced; its stdout."""
        assert " ".join(command.split()) in self.text, f"the page no longer gives: {command}"
        for page_name, name in sorted(self.names.items(), key=lambda item: -len(item[0])):
            command = command.replace(page_name, name)
        command = command.replace("/namespaces/prod/", f"/namespaces/{self.namespace}/")
        command = command.replace("-n prod", f"-n {self.namespace}")
        argv = ["bash", "-c", command]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=self.env,
                              cwd=self.workdir, timeout=180)
        assert done.returncode == code, f"{command}: {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout


def test_the_pages_role_runs_every_command_of_the_page(
        cluster: Cluster, namespace: str, plugin: Plugin, tmp_path: Path) -> None:
    objects = [d for d in documents() if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding"]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects", []):
            subject["namespace"] = namespace
    cluster.apply(*objects)
    kubeconfig = exec_plugin_kubeconfig(cluster, tmp_path / "sa", service_account_token(
        cluster, namespace, "backup"), namespace)
    page = Page(cluster, plugin, namespace, kubeconfig, tmp_path)
    pg = [p["metadata"]["name"] for p in cluster.deploy(
        namespace, "pg", replicas=3, containers=("postgres",),
        annotations=declare(postgres=[held("backup", "3611")]))]
    (mysql,) = [p["metadata"]["name"] for p in cluster.deploy(
        namespace, "mysql", containers=("mysql",),
        annotations=declare(mysql=[held("lock", "3612")]))]

    listed = page.run("kubectl notify -n prod list -l app=pg")  # the page adds --as the account
    assert all(pod in listed for pod in pg) and "backup" in listed, listed

    # 1. Quiesce, with kubectl notify and with plain kubectl
    name = page.run("kubectl notify -n prod -l app=pg backup --parallelism 3 --max-hold 15m "
                    "-o name").strip()
    assert name.startswith("notification.notifier.x-k8s.io/backup-"), name
    page.names["notification/pg-snap"] = "notification/" + name.rsplit("/", 1)[1]
    page.run("kubectl notify -n prod release notification/pg-snap")
    page.names.clear()
    (notification,) = [d for d in documents() if d["kind"] == "Notification"]
    notification["metadata"]["namespace"] = namespace
    page.run("kubectl create -f -", stdin=json.dumps(notification))
    page.run("kubectl -n prod wait notification/pg-snap --for=condition=Quiesced --timeout=2m")
    phase = page.run("kubectl -n prod get notification pg-snap -o jsonpath='{.status.phase} "
                     "{.status.window.quiescedTime}{\"\\n\"}'")
    assert phase.startswith("Running "), phase
    quiesced = datetime.fromisoformat(phase.split()[1].replace("Z", "+00:00"))
    inside = (quiesced + timedelta(seconds=1)).replace(microsecond=0)
    while datetime.now(UTC) < inside + timedelta(seconds=1.5):
        time.sleep(0.2)  # a whole second of "snapshot" fits in the window

    # 3. Release, and prove the window
    page.run("kubectl create --raw /apis/notifier.x-k8s.io/v1alpha1/namespaces/prod/"
             "notifications/pg-snap/release -f - <<< '{}'")
    page.run("kubectl -n prod wait notification/pg-snap --for=condition=Complete --timeout=2m")
    window = json.loads(page.run(
        "kubectl -n prod get notification pg-snap -o jsonpath='{.status.window}{\"\\n\"}'"))
    assert window["quiescedTime"] <= window["releaseTime"], window
    stamp = inside.strftime("%Y-%m-%dT%H:%M:%SZ")
    page.names["2026-12-01T12:00:05Z 2026-12-01T12:00:05Z 2026-12-01T12:00:06Z"] = stamp
    verified = page.run("kubectl notify -n prod verify-window notification/pg-snap "
                        "2026-12-01T12:00:05Z 2026-12-01T12:00:05Z 2026-12-01T12:00:06Z")
    assert f"{stamp}  inside" in verified, verified
    before = (quiesced - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    page.names["2026-12-01T12:00:05Z 2026-12-01T12:00:05Z 2026-12-01T12:00:06Z"] = before
    outside = page.run("kubectl notify -n prod verify-window notification/pg-snap "
                       "2026-12-01T12:00:05Z 2026-12-01T12:00:05Z 2026-12-01T12:00:06Z", code=1)
    assert f"{before}  OUTSIDE" in outside, outside
    page.names.clear()
    runs = page.run("kubectl -n prod get podnotifiers -l notifier.x-k8s.io/notification=pg-snap")
    assert runs.count("Succeeded") == 3, runs
    (keep,) = re.findall(r"kubectl -n prod get podnotifiers -l notifier\.x-k8s\.io/notification="
                         r"pg-snap -o jsonpath='\{range.*?\ndone", PAGE.read_text(), re.S)
    page.run(keep)
    assert sorted(p.name for p in tmp_path.glob("backup_label.pg-snap-*")) == sorted(
        f"backup_label.pg-snap-{pod.rsplit('-', 1)[1]}" for pod in pg)
    page.run("kubectl delete notification pg-snap")  # the context's namespace

    # MySQL: one pod, directly, then with plain kubectl
    page.names["mysql-0"] = mysql
    held_line = page.run("kubectl notify -n prod mysql-0 lock").splitlines()[0]
    assert held_line.endswith(" Held"), held_line
    record = held_line.split()[0].split("/", 1)[1]
    page.names["mysql-0-lock-4fj2k"] = record
    page.run("kubectl notify -n prod release podnotifier/mysql-0-lock-4fj2k")
    times = page.run("kubectl -n prod get podnotifier mysql-0-lock-4fj2k -o jsonpath="
                     "'{.status.heldTime} {.status.releaseRequestedTime}{\"\\n\"}'").split()
    assert len(times) == 2 and times[0] <= times[1], times
    held_at = datetime.fromisoformat(times[0].replace("Z", "+00:00"))
    page.names["2026-12-01T12:00:05Z"] = (held_at - timedelta(seconds=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    page.run("kubectl notify -n prod verify-window podnotifier/mysql-0-lock-4fj2k "
             "2026-12-01T12:00:05Z", code=1)  # began before the window: not inside
    del page.names["2026-12-01T12:00:05Z"]
    (tmp_path / "lock.json").write_text(json.dumps({
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "spec": {"notifier": "lock"}}))
    created = json.loads(page.run("kubectl create --raw /apis/notifier.x-k8s.io/v1alpha1/"
                                  "namespaces/prod/pods/mysql-0/notify -f lock.json"))
    page.names["mysql-0-lock-4fj2k"] = created["metadata"]["name"]
    page.run("kubectl create --raw /apis/notifier.x-k8s.io/v1alpha1/namespaces/prod/"
             "podnotifiers/mysql-0-lock-4fj2k/release -f - <<< '{}'")

    # One backup at a time
    waited = page.run("kubectl notify -n prod -l app=pg backup --max-hold 15m "
                      "--concurrency-policy Wait")
    (generated,) = set(re.findall(r"notification/(backup-[a-z0-9]+)", waited)) or {waited}
    page.names["notification/pg-snap"] = f"notification/{generated}"
    page.run("kubectl notify -n prod release notification/pg-snap")
