"""Helpers for end-to-end tests of `kubectl notify`: the plugin's distribution built by the
release script (hack/release.py) and installed the way users install it (pip, console scripts)
into a directory of its own, run as a subprocess with a given kubeconfig; kubeconfigs whose
user is an exec credential plugin; RoleBindings to the shipped ClusterRoles; ServiceAccount
tokens from the TokenRequest API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from localcluster.layout import REPO_ROOT
from tests.support import wheelhouse
from tests.support.kube import Cluster, User

EXEC_PLUGIN = """\
import json, sys
# An exec credential plugin as kubectl runs them: reads nothing from stdin, prints an
# ExecCredential. The token (from the TokenRequest API) is in the file named by argv[1].
token = open(sys.argv[1]).read().strip()
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token}}))
"""


@dataclass(frozen=True)
class Plugin:
    """The installed ``kubectl-notify`` console script."""

    script: Path
    site: Path
    home: Path

    def run(self, *args: str, kubeconfig: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run it (stdout and stderr are pipes: not a terminal). Without `kubeconfig` and
        `env`, no kubeconfig is found (HOME is an empty directory)."""
        environ = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home),
                   "PYTHONPATH": str(self.site), **(env or {})}
        flags = [f"--kubeconfig={kubeconfig}"] if kubeconfig else []
        return subprocess.run([str(self.script), *args, *flags], capture_output=True,
                              text=True, env=environ, timeout=timeout)


def build_plugin(dist: Path) -> Path:
    """The plugin's wheel, built into `dist` by ``hack/release.py plugin`` (offline: the build
    backend comes from the wheelhouse)."""
    if reason := wheelhouse.missing():
        raise AssertionError(reason)
    built = subprocess.run([sys.executable, str(REPO_ROOT / "hack" / "release.py"), "--dist",
                            str(dist), "plugin"], capture_output=True, text=True)
    assert built.returncode == 0, f"release.py plugin failed:\n{built.stdout}{built.stderr}"
    wheels = list(dist.glob("kubectl_notify-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def install(directory: Path) -> Plugin:
    """``pip install --no-deps --target`` of the plugin's wheel: the console scripts pip makes,
    and the package (its dependencies come from this interpreter's environment)."""
    wheel = build_plugin(directory / "dist")
    site = directory / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                                "--no-index", "--target", str(site), str(wheel)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, f"pip install failed:\n{installed.stdout}{installed.stderr}"
    home = directory / "home"
    home.mkdir()
    return Plugin(site / "bin" / "kubectl-notify", site, home)


def bind_cluster_role(cluster: Cluster, namespace: str, role: str, *, user: str = "",
                      service_account: str = "") -> None:
    """A RoleBinding of the ClusterRole `role` in `namespace` to a user or a ServiceAccount."""
    subject = ({"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
               if service_account else
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user})
    cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{(user or service_account).replace(':', '-')}-{role}".replace(
            ":", "-"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
        "subjects": [subject]})


def service_account_token(cluster: Cluster, namespace: str, name: str) -> str:
    """A token for a new ServiceAccount, from the TokenRequest API (as admin)."""
    with cluster.admin() as kube:
        created = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json={
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        assert created.status_code in (201, 409), created.text
        answer = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                           json={"apiVersion": "authentication.k8s.io/v1",
                                 "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["status"]["token"])


def exec_plugin_kubeconfig(cluster: Cluster, directory: Path, token: str,
                           namespace: str) -> Path:
    """A kubeconfig whose user is an exec credential plugin (printing `token`) and whose
    context sets `namespace`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "plugin.py").write_text(EXEC_PLUGIN)
    path = directory / "exec.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ci",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority": str(cluster.layout.pki / "ca.crt")}}],
        "users": [{"name": "ci", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": [str(directory / "plugin.py"), str(directory / "token")],
            "interactiveMode": "Never"}}}],
        "contexts": [{"name": "ci", "context": {"cluster": "local", "user": "ci",
                                                "namespace": namespace}}]}))
    return path


def user_kubeconfig_with_namespace(user: User, namespace: str, directory: Path) -> Path:
    """A copy of a client-certificate user's kubeconfig whose context sets `namespace`."""
    config = yaml.safe_load(user.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    path = directory / f"{user.name}.kubeconfig"
    path.write_text(json.dumps(config))
    return path
