"""The egress guard: samples the TCP sockets of the local planes' processes and of the test
process (with their descendants) and records every connection to an address off this machine.

A socket is read from `/proc/<pid>/net/tcp` and `tcp6` (the tables of the process's network
namespace; addresses in hex, each 32-bit word in host byte order, little-endian here) and is
matched to the processes that hold it by the `socket:[inode]` links in `/proc/<pid>/fd`. Only
SYN-SENT (a dial under way) and ESTABLISHED sockets count. Attribution runs only when a table
holds such a socket with a remote address outside 127.0.0.0/8 and ::1, so a sample of a plane
that talks only to loopback reads the tables and nothing else.

What it cannot see: a connection that opens and closes between two samples (a dial refused at
once, or a whole exchange under the sampling interval), and UDP.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from localcluster import processes
from localcluster.addresses import is_loopback

STATES = {"01": "ESTABLISHED", "02": "SYN-SENT"}
"""The kernel's TCP state codes that the guard reports (include/net/tcp_states.h)."""


@dataclass(frozen=True)
class Socket:
    inode: int
    state: str
    local: str
    remote: str
    """Address and port, e.g. `127.0.0.1:26443` or `[::1]:26443`."""
    remote_address: str


@dataclass(frozen=True)
class Finding:
    """A watched process held a connection to an address off this machine."""

    pid: int
    process: str
    state: str
    remote: str

    def __str__(self) -> str:
        return f"{self.process} (pid {self.pid}) {self.state} to {self.remote}"


def decode_endpoint(field: str) -> tuple[str, int]:
    """`0100007F:6723` (IPv4) or 32 hex digits and a port (IPv6), as /proc/net/tcp{,6} write
    them, to an address string and a port."""
    address_hex, port_hex = field.split(":")
    raw = bytes.fromhex(address_hex)
    # Each 32-bit word is printed as a host-order integer: reverse the bytes of every word.
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"::ffff:{address.ipv4_mapped}", int(port_hex, 16)  # as Python 3.13 prints it
    return str(address), int(port_hex, 16)


def parse_table(text: str) -> list[Socket]:
    """The sockets of one /proc/<pid>/net/tcp or tcp6 table whose state the guard reports."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] not in STATES:
            continue
        local, local_port = decode_endpoint(fields[1])
        remote, remote_port = decode_endpoint(fields[2])
        sockets.append(Socket(inode=int(fields[9]), state=STATES[fields[3]],
                              local=_endpoint(local, local_port),
                              remote=_endpoint(remote, remote_port), remote_address=remote))
    return sockets


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def recorded_processes(state_files: Callable[[], Iterable[Path]]) -> Callable[[], dict[int, str]]:
    """A source of watched processes: every process recorded in the plane state files that
    `state_files` names at the time of the call (planes come and go during a run), by name."""
    def watched() -> dict[int, str]:
        found: dict[int, str] = {}
        for state_file in state_files():
            try:
                recorded = processes.load(state_file)
            except (OSError, ValueError, TypeError):  # being rewritten, or removed by `down`
                continue
            found.update((proc.pid, proc.name) for proc in recorded)
        return found
    return watched


class EgressGuard:
    """Samples every `interval` seconds from a thread (start/stop), or once (`sample`).

    `watched` gives the roots to watch (pid -> name); each root's descendants are watched too,
    named `<comm> (child of <name>)`. `proc` is the procfs root (a directory tree shaped like
    /proc in unit tests)."""

    def __init__(self, watched: Callable[[], dict[int, str]], *, interval: float = 0.1,
                 proc: Path = Path("/proc")) -> None:
        self.watched = watched
        self.interval = interval
        self.proc = proc
        self.findings: list[Finding] = []
        self.samples = 0
        self.remotes_seen: set[str] = set()
        """Every remote address of a reported-state socket seen in a watched namespace."""
        self._reported: set[tuple[int, int]] = set()
        self._cleared: set[int] = set()
        """Inodes of off-machine sockets held by no watched process when first seen."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="egress-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def take(self) -> list[Finding]:
        """The findings since the last take."""
        with self._lock:
            taken, self.findings = self.findings, []
        return taken

    def sample(self) -> None:
        """One pass: the tables of every watched network namespace, then, if one holds an
        off-machine connection, which watched process holds it."""
        with self._lock:
            roots = self.watched()
            off_machine = [s for s in self._sockets(roots)
                           if not is_loopback(s.remote_address) and s.inode not in self._cleared]
            if off_machine:
                self._attribute(off_machine, self._with_descendants(roots))
            self.samples += 1

    def _sockets(self, roots: dict[int, str]) -> list[Socket]:
        """The reported-state sockets of the network namespaces of `roots` (a descendant in a
        namespace of its own, which the run made itself, talks inside it)."""
        namespaces: dict[str, int] = {}
        for pid in roots:
            try:
                namespaces.setdefault(os.readlink(self.proc / str(pid) / "ns" / "net"), pid)
            except OSError:
                continue
        sockets = []
        for pid in namespaces.values():
            for table in ("tcp", "tcp6"):
                try:
                    sockets.extend(parse_table((self.proc / str(pid) / "net" / table).read_text()))
                except OSError:
                    continue
        self.remotes_seen.update(s.remote_address for s in sockets)
        return sockets

    def _attribute(self, sockets: list[Socket], processes: dict[int, str]) -> None:
        by_inode = {s.inode: s for s in sockets}
        held = set()
        for pid, name in processes.items():
            for inode in self._socket_inodes(pid):
                if (socket := by_inode.get(inode)) is None:
                    continue
                held.add(inode)
                if (pid, inode) not in self._reported:
                    self._reported.add((pid, inode))
                    self.findings.append(Finding(pid, name, socket.state, socket.remote))
        self._cleared.update(by_inode.keys() - held)

    def _socket_inodes(self, pid: int) -> list[int]:
        inodes = []
        try:
            links = list((self.proc / str(pid) / "fd").iterdir())
        except OSError:
            return inodes
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.append(int(target[len("socket:["):-1]))
        return inodes

    def _with_descendants(self, roots: dict[int, str]) -> dict[int, str]:
        """`roots` and every process below one of them (by the parent pid in /proc/<pid>/stat)."""
        children: dict[int, list[int]] = {}
        comm: dict[int, str] = {}
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # comm is in parentheses and may hold spaces or parentheses itself.
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
            pid = int(entry.name)
            comm[pid] = name
            children.setdefault(int(rest.split()[1]), []).append(pid)
        found = {pid: name for pid, name in roots.items() if pid in comm}
        queue = list(found)
        while queue:
            parent = queue.pop()
            for child in children.get(parent, []):
                if child not in found:
                    found[child] = f"{comm[child]} (child of {found[parent]})"
                    queue.append(child)
        return found
