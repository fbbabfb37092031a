"""kubectl notify finds the cluster, user and namespace as kubectl does: --kubeconfig, else the
KUBECONFIG list (first file wins, first current-context wins), else ~/.kube/config; --context;
--namespace, else the context's, else default; credentials through the kubernetes loader,
exec plugins included."""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_notify.cli import Globals
from kubectl_notify.errors import USAGE, ConfigError
from kubectl_notify.kubeconfig import kubeconfig_files, resolve, select


def kubeconfig(path: Path, *, current: str | None, contexts: dict[str, dict[str, str]],
               users: dict[str, dict[str, Any]] | None = None,
               server: str = "https://one.test:6443") -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": name, "user": user} for name, user in (users or {"u": {
            "token": "t"}}).items()],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u", **context}}
                     for name, context in contexts.items()]}
    if current is not None:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


def test_kubeconfig_flag_is_the_only_file(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path / "one", current="a", contexts={"a": {}})
    kubeconfig(tmp_path / "two", current="b", contexts={"b": {}})
    environ = {"KUBECONFIG": str(tmp_path / "two"), "HOME": str(tmp_path)}
    assert kubeconfig_files(Globals(kubeconfig=str(one)), environ) == (str(one),)


def test_missing_kubeconfig_flag_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^error: stat /nope: no such file or directory$"):
        kubeconfig_files(Globals(kubeconfig="/nope"), {})


def test_kubeconfig_list_skips_missing_files_and_home_is_the_default(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path / "one", current="a", contexts={"a": {}})
    environ = {"KUBECONFIG": f"{tmp_path / 'missing'}:{one}:", "HOME": str(tmp_path)}
    assert kubeconfig_files(Globals(), environ) == (str(one),)
    home = kubeconfig((tmp_path / ".kube").mkdir() or tmp_path / ".kube" / "config",
                      current="a", contexts={"a": {}})
    assert kubeconfig_files(Globals(), {"HOME": str(tmp_path)}) == (str(home),)


def test_first_current_context_and_first_definition_win(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path / "one", current="a", contexts={"a": {"namespace": "from-one"}})
    two = kubeconfig(tmp_path / "two", current="b",
                     contexts={"a": {"namespace": "from-two"}, "b": {"namespace": "bee"}})
    selection = select(Globals(), {"KUBECONFIG": f"{one}:{two}"})
    assert selection is not None
    assert (selection.context, selection.namespace) == ("a", "from-one")
    later = select(Globals(), {"KUBECONFIG": f"{two}:{one}"})
    assert later is not None and (later.context, later.namespace) == ("b", "bee")


def test_a_file_without_current_context_defers_to_the_next(tmp_path: Path) -> None:
    one = kubeconfig(tmp_path / "one", current=None, contexts={"a": {}})
    two = kubeconfig(tmp_path / "two", current="b", contexts={"b": {}})
    selection = select(Globals(), {"KUBECONFIG": f"{one}:{two}"})
    assert selection is not None and selection.context == "b"


@pytest.mark.parametrize(("flags", "namespace"), [
    (Globals(), "team"), (Globals(namespace="flag"), "flag"),
    (Globals(context="bare"), "default"), (Globals(context="bare", namespace="x"), "x")])
def test_namespace_flag_then_context_then_default(tmp_path: Path, flags: Globals,
                                                  namespace: str) -> None:
    path = kubeconfig(tmp_path / "k", current="team",
                      contexts={"team": {"namespace": "team"}, "bare": {}})
    selection = select(Globals(str(path), flags.context, flags.namespace), {})
    assert selection is not None and selection.namespace == namespace


def test_unknown_context_and_no_context(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current=None, contexts={"a": {}})
    with pytest.raises(ConfigError, match='context "nope" does not exist'):
        select(Globals(str(path), "nope"), {})
    with pytest.raises(ConfigError, match="sets no current-context; pass --context") as raised:
        select(Globals(str(path)), {})
    assert raised.value.exit_code == USAGE


def test_no_kubeconfig_outside_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no kubeconfig: ~/.kube/config does not exist"):
        resolve(Globals(), {"HOME": str(tmp_path)})


def test_token_user_resolves_to_a_connection(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {"namespace": "n"}},
                      users={"u": {"token": "sekret"}}, server="https://kube.test:6443")
    target = resolve(Globals(kubeconfig=str(path)), {})
    assert (target.connection.base_url, target.namespace, target.context) == (
        "https://kube.test:6443", "n", "a")
    assert target.connection.credentials is not None
    assert target.connection.credentials.header() == "Bearer sekret"


def test_exec_credential_plugin_runs(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json\nprint(json.dumps({'apiVersion': "
                      "'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
                      "'status': {'token': 'from-exec'}}))\n")
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(plugin)], "interactiveMode": "Never"}}})
    target = resolve(Globals(kubeconfig=str(path)), {})
    assert target.connection.credentials is not None
    assert target.connection.credentials.header() == "Bearer from-exec"


def test_oidc_auth_provider_sends_its_id_token(tmp_path: Path) -> None:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    id_token = ".".join([part({"alg": "RS256"}), part({"sub": "alice", "iss": "https://idp",
                                                       "exp": int(time.time()) + 3600}), "sig"])
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {
        "auth-provider": {"name": "oidc", "config": {
            "client-id": "kubectl", "idp-issuer-url": "https://idp", "id-token": id_token}}}})
    target = resolve(Globals(kubeconfig=str(path)), {})
    assert target.connection.credentials is not None
    assert target.connection.credentials.header() == f"Bearer {id_token}"


def test_broken_credentials_are_a_config_error(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}},
                      users={"u": {"client-certificate": str(tmp_path / "missing.crt"),
                                   "client-key": str(tmp_path / "missing.key")}})
    with pytest.raises(ConfigError) as raised:
        resolve(Globals(kubeconfig=str(path)), {})
    assert str(raised.value).startswith("error: kubeconfig ")
    assert raised.value.exit_code == USAGE


def test_not_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(json.dumps(["not", "a", "kubeconfig"]))
    with pytest.raises(ConfigError):
        select(Globals(kubeconfig=str(path)), {})
