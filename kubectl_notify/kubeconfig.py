"""Which cluster, user and namespace: the kubeconfig read as kubectl reads it.

- Files: ``--kubeconfig`` (that one file), else ``$KUBECONFIG`` (a list separated by
  ``os.pathsep``, files that do not exist skipped), else ``~/.kube/config``; with none of them
  present, the in-cluster configuration (a pod's ServiceAccount), as kubectl falls back to it.
- Merging: the first file that defines a cluster, user or context wins, and the current context
  is the first file's that sets one (the `kubernetes` package's merger keeps the *last*
  ``current-context``, so the context is chosen here, from the files, and passed explicitly).
- Context: ``--context``, else that current context.
- Namespace: ``--namespace``, else the context's ``namespace``, else ``default``.
- Credentials: whatever the context's user has — client certificates, tokens, exec credential
  plugins, auth-provider (OIDC) — through the `kubernetes` package's loader, via
  `apiserver.kube.config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from apiserver.kube import (
    Connection,
    KubeconfigError,
    connection_from_kubeconfig,
    in_cluster_connection,
)
from kubectl_notify.cli import Globals
from kubectl_notify.errors import ConfigError

DEFAULT_NAMESPACE = "default"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


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
    configs = [_read(path) for path in files]
    name = flags.context or next(
        (str(c["current-context"]) for c in configs if c.get("current-context")), "")
    if not name:
        raise ConfigError(f"no context chosen: {os.pathsep.join(files)} sets no "
                          "current-context; pass --context (kubectl config get-contexts "
                          "lists them)")
    context = next((entry.get("context") or {} for config in configs
                    for entry in config.get("contexts") or []
                    if isinstance(entry, dict) and entry.get("name") == name), None)
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
    try:
        connection = connection_from_kubeconfig(os.pathsep.join(selection.files),
                                                selection.context)
    except KubeconfigError as error:
        raise ConfigError(str(error)) from None
    return Target(connection, selection.namespace, selection.context)


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
    try:
        connection = in_cluster_connection(environ=environ)
    except KubeconfigError as error:
        raise ConfigError(str(error)) from None
    namespace = flags.namespace
    if not namespace:
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            namespace = DEFAULT_NAMESPACE
    return Target(connection, namespace or DEFAULT_NAMESPACE, "")
