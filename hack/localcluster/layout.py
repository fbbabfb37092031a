"""Where the local control plane keeps its state, and which loopback ports it uses."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK_DIR = REPO_ROOT / "hack"


PORT_VARIABLES = {
    "etcd": ("CN_ETCD_PORT", 23790),
    "apiserver": ("CN_APISERVER_PORT", 26443),
    "controller_manager": ("CN_CONTROLLER_MANAGER_PORT", 20257),
    "scheduler": ("CN_SCHEDULER_PORT", 20259),
    "kwok": ("CN_KWOK_PORT", 20250),
    "notifier": ("CN_NOTIFIER_PORT", 28443),
}
"""Each port: the environment variable that moves it, and its default. The server replicas
listen on the ports after CN_NOTIFIER_PORT (Ports.replica), HAProxy on CN_NOTIFIER_PORT itself."""

REPLICAS = int(os.environ.get("CN_REPLICAS", "2"))
"""How many extension server processes `up` starts (and a healthy plane runs) by default."""


def _port(name: str) -> int:
    variable, default = PORT_VARIABLES[name]
    return int(os.environ.get(variable, default))


def _env_port(name: str) -> int:
    """A Ports field's default: its environment variable when the Ports is made (not when this
    module is imported), so a process that moves its ports first (a pytest-xdist worker,
    tests/support/planes.py) gets them."""
    return field(default_factory=lambda: _port(name))


@dataclass(frozen=True)
class Ports:
    """Loopback ports; each can be moved with its environment variable (PORT_VARIABLES)."""

    etcd: int = _env_port("etcd")
    apiserver: int = _env_port("apiserver")
    controller_manager: int = _env_port("controller_manager")
    scheduler: int = _env_port("scheduler")
    kwok: int = _env_port("kwok")
    notifier: int = _env_port("notifier")

    def replica(self, index: int) -> int:
        """The port of server replica `index` (0, 1, ...): CN_NOTIFIER_PORT + 1 + index."""
        return self.notifier + 1 + index

    def by_variable(self, replicas: int = 0) -> dict[str, int]:
        """Each port keyed by the environment variable that moves it, then the ports of
        `replicas` server replicas keyed ``CN_NOTIFIER_PORT+1+i``."""
        ports = {PORT_VARIABLES[f.name][0]: getattr(self, f.name) for f in fields(self)}
        variable = PORT_VARIABLES["notifier"][0]
        return ports | {f"{variable}+1+{i}": self.replica(i) for i in range(replicas)}


@dataclass(frozen=True)
class Layout:
    """Paths under the state directory (`.cluster/` at the repo root unless CN_CLUSTER_DIR)."""

    root: Path

    @classmethod
    def default(cls) -> Layout:
        return cls(Path(os.environ.get("CN_CLUSTER_DIR", REPO_ROOT / ".cluster")).resolve())

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user `admin`, group `system:masters`)."""
        return self.root / "kubeconfig"

    @property
    def users(self) -> Path:
        return self.root / "users"

    @property
    def state_file(self) -> Path:
        return self.root / "processes.json"

    @property
    def exec_workdir(self) -> Path:
        """Working directory of every command kwok execs for a pod."""
        return self.root / "exec-workdir"

    @property
    def pid1_signal_log(self) -> Path:
        """JSON lines, one per signal received by PID 1 of kwok's PID namespace."""
        return self.root / "pid1-signals.log"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    @property
    def notifier_kubeconfig(self) -> Path:
        """The extension server's kubeconfig (its ServiceAccount's name, by client certificate)."""
        return self.root / "notifier.kubeconfig"

    def serving_cert_dir(self, replica: str) -> Path:
        """Where server replica `replica` (its pod name) writes the serving certificate it
        bootstrapped (--cert-dir)."""
        return self.root / "serving-cert" / replica

    @property
    def haproxy_config(self) -> Path:
        return self.root / "haproxy.cfg"

    @property
    def haproxy_socket(self) -> Path:
        """HAProxy's runtime API (a Unix socket)."""
        return self.root / "haproxy.sock"
