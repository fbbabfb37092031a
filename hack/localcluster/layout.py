"""Where the local control plane keeps its state, and which loopback ports it uses."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK_DIR = REPO_ROOT / "hack"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass(frozen=True)
class Ports:
    """Loopback ports; each can be moved with the environment variable of the same name."""

    etcd: int = _port("CN_ETCD_PORT", 23790)
    apiserver: int = _port("CN_APISERVER_PORT", 26443)
    controller_manager: int = _port("CN_CONTROLLER_MANAGER_PORT", 20257)
    scheduler: int = _port("CN_SCHEDULER_PORT", 20259)
    kwok: int = _port("CN_KWOK_PORT", 20250)
    notifier: int = _port("CN_NOTIFIER_PORT", 28443)


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

    @property
    def notifier_data(self) -> Path:
        return self.root / "notifier-data"
