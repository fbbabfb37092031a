"""kubectl notify finds the cluster, user and namespace as kubectl does: --kubeconfig, else the
KUBECONFIG list (first file wins, first current-context wins), else ~/.kube/config; --context;
--namespace, else the context's, else default; credentials as client-go reads them, exec
plugins included (the plugin's own loader, kubectl_notify.connection)."""

from __future__ import annotations

import base64
import json
import re
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from certs.authority import issue, new_ca
from kubectl_notify import kubeconfig as kubeconfig_module
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


def test_relative_paths_are_relative_to_the_file_that_defines_them(tmp_path: Path) -> None:
    ca = new_ca("test-ca")
    user = issue(ca, "alice", client=True)
    (tmp_path / "conf" / "pki").mkdir(parents=True)
    (tmp_path / "conf" / "pki" / "ca.crt").write_bytes(ca.cert_pem())
    user.write(tmp_path / "conf" / "pki" / "alice.crt", tmp_path / "conf" / "pki" / "alice.key")
    (tmp_path / "conf" / "pki" / "token").write_text("from-file\n")
    path = tmp_path / "conf" / "config"
    path.write_text(yaml.safe_dump({
        "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://kube.test",
                                               "certificate-authority": "pki/ca.crt"}}],
        "users": [{"name": "u", "user": {"client-certificate": "pki/alice.crt",
                                         "client-key": "pki/alice.key",
                                         "tokenFile": "pki/token"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    target = resolve(Globals(), {"KUBECONFIG": str(path)})
    assert target.connection.credentials is not None
    assert target.connection.credentials.header() == "Bearer from-file"
    assert target.connection.ssl_context.verify_mode == ssl.CERT_REQUIRED
    authorities = target.connection.ssl_context.get_ca_certs()
    assert [dict(entry[0] for entry in c["subject"])["commonName"] for c in authorities] == [
        "test-ca"]


def test_inline_certificate_data_and_basic_auth(tmp_path: Path) -> None:
    ca = new_ca("test-ca")
    user = issue(ca, "alice", client=True)

    def data(pem: bytes) -> str:
        return base64.b64encode(pem).decode()
    path = tmp_path / "k"
    path.write_text(yaml.safe_dump({
        "current-context": "a",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://kube.test", "certificate-authority-data": data(ca.cert_pem()),
            "tls-server-name": "kubernetes", "proxy-url": "http://127.0.0.1:3128"}}],
        "users": [{"name": "u", "user": {"client-certificate-data": data(user.cert_pem()),
                                         "client-key-data": data(user.key_pem()),
                                         "username": "admin", "password": "pw"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    connection = resolve(Globals(kubeconfig=str(path)), {}).connection
    assert connection.credentials is not None
    assert connection.credentials.header() == "Basic " + base64.b64encode(b"admin:pw").decode()
    assert (connection.tls_server_name, connection.proxy) == ("kubernetes",
                                                              "http://127.0.0.1:3128")


def test_a_ca_with_insecure_skip_tls_verify_is_refused_as_client_go_does(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(yaml.safe_dump({
        "current-context": "a",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://kube.test", "insecure-skip-tls-verify": True,
            "certificate-authority-data": base64.b64encode(new_ca("x").cert_pem()).decode()}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    with pytest.raises(ConfigError, match="with the insecure flag is not allowed"):
        resolve(Globals(kubeconfig=str(path)), {})


EXEC_PRINTING = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
count = int(open(sys.argv[1]).read() or 0) + 1 if os.path.exists(sys.argv[1]) else 1
open(sys.argv[1], "w").write(str(count))
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": {
    "token": f"{os.environ['PREFIX']}-{count}-{info['spec']['cluster']['server']}",
    "expirationTimestamp": sys.argv[2]}}))
"""


def exec_user(tmp_path: Path, expires: str, **extra: Any) -> Path:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PRINTING)
    return kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": [str(plugin), str(tmp_path / "count"), expires],
        "env": [{"name": "PREFIX", "value": "tok"}], "provideClusterInfo": True, **extra}}})


async def test_an_expired_exec_credential_is_fetched_again(tmp_path: Path) -> None:
    path = exec_user(tmp_path, "2000-01-01T00:00:00Z")
    credentials = resolve(Globals(kubeconfig=str(path)), {}).connection.credentials
    assert credentials is not None
    assert credentials.header() == "Bearer tok-1-https://one.test:6443"
    await credentials.refresh()
    assert credentials.header() == "Bearer tok-2-https://one.test:6443"


async def test_an_exec_credential_is_kept_until_it_expires(tmp_path: Path) -> None:
    path = exec_user(tmp_path, "2999-01-01T00:00:00Z")
    credentials = resolve(Globals(kubeconfig=str(path)), {}).connection.credentials
    assert credentials is not None
    await credentials.refresh()
    assert credentials.header() == "Bearer tok-1-https://one.test:6443"


def test_a_missing_exec_command_names_its_install_hint(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "no-such-login-tool",
        "interactiveMode": "Never", "installHint": "install it with: brew install login"}}})
    with pytest.raises(ConfigError, match=r"exec plugin 'no-such-login-tool': cannot run it: "
                                          r".*; install it with: brew install login"):
        resolve(Globals(kubeconfig=str(path)), {})


@pytest.mark.parametrize(("spec", "message"), [
    ({"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"},
     "apiVersion 'client.authentication.k8s.io/v1alpha1' is not supported"),
    ({"apiVersion": "client.authentication.k8s.io/v1", "command": "x"},
     "interactiveMode '' is not one of Never, IfAvailable, Always"),
    ({"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
      "args": ["-c", "print('{}')"], "interactiveMode": "Never"},
     "printed no ExecCredential of client.authentication.k8s.io/v1"),
    ({"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
      "args": ["-c", "raise SystemExit(4)"], "interactiveMode": "Never"}, "exited 4"),
])
def test_a_broken_exec_plugin_is_a_config_error(tmp_path: Path, spec: dict[str, Any],
                                                message: str) -> None:
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {
        "exec": spec}})
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve(Globals(kubeconfig=str(path)), {})


def test_other_auth_providers_are_refused_with_what_to_use(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {
        "auth-provider": {"name": "gcp", "config": {}}}})
    with pytest.raises(ConfigError, match="auth-provider 'gcp' is not supported.*exec"):
        resolve(Globals(kubeconfig=str(path)), {})


def test_in_cluster_uses_the_service_account_files(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(new_ca("cluster-ca").cert_pem())
    (tmp_path / "namespace").write_text("team\n")
    monkeypatch.setattr(kubeconfig_module, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setattr(kubeconfig_module, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "namespace")
    target = resolve(Globals(), {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "fd00::1",
                                 "KUBERNETES_SERVICE_PORT": "443"})
    assert (target.connection.base_url, target.namespace) == ("https://[fd00::1]:443", "team")
    assert target.connection.credentials is not None
    assert target.connection.credentials.header() == "Bearer sa-token"


def test_an_exec_plugins_client_certificate_authenticates_tls(tmp_path: Path) -> None:
    pair = issue(new_ca("test-ca"), "alice", client=True)
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
              "status": {"clientCertificateData": pair.cert_pem().decode(),
                         "clientKeyData": pair.key_pem().decode()}}
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "cat",
        "args": [str(tmp_path / "answer.json")], "interactiveMode": "Never"}}})
    connection = resolve(Globals(kubeconfig=str(path)), {}).connection
    assert connection.credentials is None  # the certificate authenticates, no header


def test_a_mismatched_client_key_is_a_config_error(tmp_path: Path) -> None:
    ca = new_ca("test-ca")
    alice, bob = issue(ca, "alice", client=True), issue(ca, "bob", client=True)
    path = kubeconfig(tmp_path / "k", current="a", contexts={"a": {}}, users={"u": {
        "client-certificate-data": base64.b64encode(alice.cert_pem()).decode(),
        "client-key-data": base64.b64encode(bob.key_pem()).decode()}})
    with pytest.raises(ConfigError, match="client certificate unusable"):
        resolve(Globals(kubeconfig=str(path)), {})
