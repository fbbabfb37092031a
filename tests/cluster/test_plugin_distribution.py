"""What `make release` builds for users of `kubectl notify`, installed as a user installs it and
run against the local control plane through kube-apiserver's aggregator:

- the plugin's wheel from dist/, installed into an empty virtual environment with no index
  (dist/ and the wheelhouse only): it brings httpx and PyYAML and nothing of the server, and
  the real kubectl runs it as `kubectl notify` (list, then a notify that succeeds) for a
  client-certificate user and for a ServiceAccount authenticated by an exec credential plugin;
- the krew archive's zipapp, run by a python3 that has none of its dependencies."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster.layout import REPO_ROOT
from tests.support import wheelhouse
from tests.support.kube import Cluster, User
from tests.support.notify import declare, exec_notifier, records
from tests.support.plugin import bind_cluster_role, exec_plugin_kubeconfig, service_account_token
from tests.support.wheelhouse import WHEELHOUSE

pytestmark = pytest.mark.cluster

NOTIFIERS = declare(db=[exec_notifier("quiesce", "echo checkpoint; echo quiesced")])
CLEAN = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
"""The environment for the new virtual environment's pip: without the tests' PYTHONPATH (this
checkout, whose editable install's metadata pip would list)."""
SERVER_ONLY = {"container-notifier", "kubernetes", "fastapi", "uvicorn", "pydantic",
               "cryptography", "websockets", "prometheus-client"}


@dataclass(frozen=True)
class Built:
    dist: Path
    venv: Path
    """The virtual environment the plugin's wheel was installed into."""
    home: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if reason := wheelhouse.missing():
        raise AssertionError(reason)
    root = tmp_path_factory.mktemp("release")
    dist = root / "dist"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "hack" / "release.py"), "--dist",
                           str(dist), "plugin", "krew"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    environment = root / "venv"
    venv.create(environment, with_pip=True)
    installed = subprocess.run(
        [str(environment / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
         "--find-links", str(dist), "--find-links", str(WHEELHOUSE), "kubectl-notify"],
        capture_output=True, text=True, env=CLEAN)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (root / "home").mkdir()
    return Built(dist, environment, root / "home")


@pytest.fixture
def pod(cluster: Cluster, namespace: str) -> str:
    (deployed,) = cluster.deploy(namespace, "db", replicas=1, containers=("db",),
                                 annotations=NOTIFIERS)
    return str(deployed["metadata"]["name"])


@pytest.fixture
def bot(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("dist-bot")
    bind_cluster_role(cluster, namespace, "container-notifier:notifier", user=user.name)
    bind_cluster_role(cluster, namespace, "view", user=user.name)
    return user


def kubectl_notify(cluster: Cluster, built: Built, kubeconfig: Path, *args: str
                   ) -> subprocess.CompletedProcess[str]:
    """The real kubectl, finding kubectl-notify on PATH in the virtual environment's bin."""
    env = {"PATH": f"{built.venv / 'bin'}:{cluster.bins}:/usr/bin:/bin", "HOME": str(built.home)}
    return subprocess.run([str(cluster.bins / "kubectl"), "notify", *args,
                           f"--kubeconfig={kubeconfig}"], capture_output=True, text=True,
                          env=env, timeout=120)


def test_the_plugin_installs_alone_into_an_empty_venv(built: Built) -> None:
    listed = subprocess.run([str(built.venv / "bin" / "python"), "-m", "pip", "list",
                             "--format=freeze", "--exclude", "pip", "--exclude", "setuptools"],
                            capture_output=True, text=True, check=True, env=CLEAN)
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"kubectl-notify", "httpx", "pyyaml"} <= names
    assert not names & SERVER_ONLY, names
    assert len(names) <= 10, names  # the plugin, httpx and PyYAML and theirs (not 47)
    assert (built.venv / "bin" / "kubectl-notify").exists()
    assert (built.venv / "bin" / "kubectl_complete-notify").exists()


def test_kubectl_runs_the_installed_plugin_against_the_plane(
        built: Built, cluster: Cluster, namespace: str, pod: str, bot: User) -> None:
    listed = kubectl_notify(cluster, built, bot.kubeconfig, "list", pod, "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert re.split(r" {3,}", header) == ["POD", "CONTAINER", "NOTIFIER", "ACTION", "TIMEOUT",
                                          "MAY RUN"]
    assert re.split(r" {3,}", row)[:3] == [pod, "db", "quiesce"]
    assert re.split(r" {3,}", row)[-1] == "yes (template)"

    ran = kubectl_notify(cluster, built, bot.kubeconfig, pod, "quiesce", "-n", namespace)
    assert ran.returncode == 0, ran.stderr
    assert re.match(rf"podnotifier/{pod}-quiesce-\w+ Succeeded in ", ran.stdout)
    (record,) = records(cluster, namespace, fieldSelector=f"spec.podName={pod}")
    assert record["spec"]["requestedBy"]["username"] == "dist-bot"
    assert record["status"]["phase"] == "Succeeded"


def test_an_exec_credential_plugin_user_notifies_with_the_installed_plugin(
        built: Built, cluster: Cluster, namespace: str, pod: str, tmp_path: Path) -> None:
    token = service_account_token(cluster, namespace, "dist-ci")
    bind_cluster_role(cluster, namespace, "edit", service_account="dist-ci")
    kubeconfig = exec_plugin_kubeconfig(cluster, tmp_path / "ci", token, namespace)
    ran = kubectl_notify(cluster, built, kubeconfig, pod, "quiesce")
    assert ran.returncode == 0, ran.stderr
    (record,) = records(cluster, namespace, fieldSelector=f"spec.podName={pod}")
    assert record["spec"]["requestedBy"]["username"] == (
        f"system:serviceaccount:{namespace}:dist-ci")


def test_the_krew_zipapp_notifies_with_nothing_installed(
        built: Built, cluster: Cluster, namespace: str, pod: str, bot: User,
        tmp_path: Path) -> None:
    (archive,) = built.dist.glob("kubectl-notify-krew-v*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    # -I -S: no site-packages, no PYTHONPATH: only what the zipapp holds.
    ran = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "kubectl-notify"), pod,
                          "quiesce", "-n", namespace, f"--kubeconfig={bot.kubeconfig}"],
                         capture_output=True, text=True, env={"HOME": str(built.home)},
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert re.match(rf"podnotifier/{pod}-quiesce-\w+ Succeeded in ", ran.stdout)
