"""Which cluster, user and namespace: the kubeconfig read as kubectl reads it.

- Files: ``--kubeconfig`` (that one file), else ``$KUBECONFIG`` (a list separated by
  ``os.pathsep``, files that do not exist skipped), else ``~/.kube/config``; with none of them
  present, the in-cluster configuration (a pod's ServiceAccount), as kubectl falls back to it.
- Merging: the first file that defines a cluster, user or context wins, and the current context
  is the first file's that sets one. Relative paths in an entry (certificate-authority,
  client-certificate, client-key, tokenFile, an exec command holding a ``/``) are relative to
  the file that defines it.
- Context: ``--context``, else that current context.
- Namespace: ``--namespace``, else the context's ``namespace``, else ``default``.
- Credentials: whatever the context's user has — client certificates, tokens, token files,
  basic auth, exec credential plugins, an oidc auth-provider's id-token — see `connection`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubectl_notify import connection as connections
from kubectl_notify.cli import Globals
from kubectl_notify.connection import Connection
from kubectl_notify.errors import ConfigError

DEFAULT_NAMESPACE = "default"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ACCOUNT_NAMESPACE = SERVICE_ACCOUNT_DIR / "namespace"
PATH_FIELDS = {"cluster": ("certificate-authority",),
               "user": ("client-certificate", "client-key", "tokenFile")}
"""The fields of a kubeconfig entry that name files, relative to the file that defines it."""


@dataclass(frozen=True)
class Target:
    """Where requests go and as whom (`connection`), and the namespace they address."""

    connection: Connection
    namespace: str
    context: str
    """The kubeconfig context used, or "" for the in-cluster configuration."""


@dataclass(frozen=True)
class Selection:
    """The kubeconfig files, context and namespace a command line selects (no credentials
    loaded yet, so it is cheap and pure to compute)."""

    files: tuple[str, ...]
    context: str
    namespace: str


def kubeconfig_files(flags: Globals, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The kubeconfig files to merge, in precedence order (only files that exist)."""
    if flags.kubeconfig:
        path = Path(flags.kubeconfig).expanduser()
        if not path.is_file():
            raise ConfigError(f"stat {flags.kubeconfig}: no such file or directory")
        return (str(path),)
    listed = environ.get("KUBECONFIG", "")
    candidates = ([p for p in listed.split(os.pathsep) if p] if listed
                  else [str(Path(environ.get("HOME", "~")) / ".kube" / "config")])
    return tuple(str(Path(p).expanduser()) for p in candidates if Path(p).expanduser().is_file())


def select(flags: Globals, environ: Mapping[str, str]) -> Selection | None:
    """The files, context and namespace; None when no kubeconfig file exists."""
    files = kubeconfig_files(flags, environ)
    if not files:
        return None
    configs = [(path, _read(path)) for path in files]
    name = flags.context or next(
        (str(c["current-context"]) for _, c in configs if c.get("current-context")), "")
    if not name:
        raise ConfigError(f"no context chosen: {os.pathsep.join(files)} sets no "
                          "current-context; pass --context (kubectl config get-contexts "
                          "lists them)")
    context = _entry(configs, "context", name)
    if context is None:
        raise ConfigError(f'context "{name}" does not exist in {os.pathsep.join(files)}')
    namespace = flags.namespace or context.get("namespace") or DEFAULT_NAMESPACE
    return Selection(files, name, str(namespace))


def resolve(flags: Globals, environ: Mapping[str, str] = os.environ) -> Target:
    """The Target the flags and environment select, credentials loaded (an exec plugin runs
    now). Raises ConfigError."""
    selection = select(flags, environ)
    if selection is None:
        return _in_cluster(flags, environ)
    configs = [(path, _read(path)) for path in selection.files]
    context = _entry(configs, "context", selection.context)
    if context is None:
        raise ConfigError(f'context "{selection.context}" does not exist in '
                          f"{os.pathsep.join(selection.files)}")
    cluster_name, user_name = str(context.get("cluster") or ""), str(context.get("user") or "")
    cluster = _entry(configs, "cluster", cluster_name)
    if cluster is None:
        raise ConfigError(f'context "{selection.context}": cluster "{cluster_name}" does not '
                          f"exist in {os.pathsep.join(selection.files)}")
    user = _entry(configs, "user", user_name) or {}
    source = f'kubeconfig {os.pathsep.join(selection.files)}: user "{user_name}"'
    return Target(connections.connection(cluster, user, source), selection.namespace,
                  selection.context)


def _entry(configs: list[tuple[str, dict[str, Any]]], kind: str, name: str
           ) -> dict[str, Any] | None:
    """The first file's `kind` (cluster, user, context) entry called `name`, its file paths
    made absolute against that file's directory; None if no file has one."""
    for path, config in configs:
        for item in config.get(f"{kind}s") or []:
            if isinstance(item, dict) and item.get("name") == name:
                entry = dict(item.get(kind) or {})
                base = Path(path).parent
                for field in PATH_FIELDS.get(kind, ()):
                    if entry.get(field):
                        entry[field] = str(base / Path(str(entry[field])).expanduser())
                spec = entry.get("exec")
                if isinstance(spec, dict) and "/" in str(spec.get("command") or ""):
                    entry["exec"] = {**spec, "command": str(base / str(spec["command"]))}
                return entry
    return None


def _read(path: str) -> dict[str, Any]:
    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"kubeconfig {path}: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, "
                          "users and contexts)")
    return config


def _in_cluster(flags: Globals, environ: Mapping[str, str]) -> Target:
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        where = ("$KUBECONFIG (" + environ["KUBECONFIG"] + ")" if environ.get("KUBECONFIG")
                 else "~/.kube/config")
        raise ConfigError(f"no kubeconfig: {where} does not exist and this is not a pod; "
                          "pass --kubeconfig or set KUBECONFIG")
    connection = connections.in_cluster(SERVICE_ACCOUNT_DIR, environ)
    namespace = flags.namespace
    if not namespace:
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            namespace = DEFAULT_NAMESPACE
    return Target(connection, namespace or DEFAULT_NAMESPACE, "")
