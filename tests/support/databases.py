"""Real PostgreSQL and MariaDB servers from Debian's packages (`make databases` installs them),
started by a test on loopback, on a free port and in a data directory of its own, as the
packages' service users (neither server runs as root). kwok runs a pod's exec commands on this
host, so a notifier's `psql` or `mysql` reaches them on 127.0.0.1.

Each server is stopped by the PID it wrote (never by name)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MISSING = ("{what} is missing: install Debian's {package} (`make databases`, as root, runs "
           "apt-get install -y {package})")
START_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def owned_by(user: str, *paths: Path) -> None:
    for path in paths:
        shutil.chown(path, user, user)
        for child in path.rglob("*"):
            shutil.chown(child, user, user)


def as_user(user: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], check=True, text=True,
                          capture_output=True, cwd="/", **kwargs)  # type: ignore[call-overload]


def stop_pid_file(pid_file: Path, timeout: float = 30.0) -> None:
    """SIGTERM to the server whose PID `pid_file` holds; wait until it is gone."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


class Postgres:
    """One PostgreSQL server: its data directory, port and WAL archive (`archive`), which a
    low-level backup needs (the WAL from pg_backup_start to pg_backup_stop)."""

    USER = "postgres"

    def __init__(self, root: Path, name: str, archive: Path) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
        if not versions:
            raise RuntimeError(MISSING.format(what="PostgreSQL", package="postgresql"))
        self.bin = versions[-1].parent
        self.root = root / name
        self.data = self.root / "data"
        self.archive = archive
        self.port = free_port()

    def init(self) -> None:
        self.root.mkdir(parents=True)
        self.archive.mkdir(parents=True, exist_ok=True)
        owned_by(self.USER, self.root, self.archive)
        as_user(self.USER, [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                            "--auth=trust"])
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(self.settings() + f"archive_mode = on\narchive_command = 'test ! -f "
                       f"{self.archive}/%f && cp %p {self.archive}/%f'\n")

    def settings(self) -> str:
        return (f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\n")

    def start(self) -> None:
        as_user(self.USER, [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                            str(self.root / "log"), "-w", "-t", str(int(START_SECONDS)),
                            "start"])

    def stop(self) -> None:
        stop_pid_file(self.data / "postmaster.pid")

    def psql(self) -> str:
        """How a client on this host reaches it (for a notifier's command)."""
        return f"psql -h 127.0.0.1 -p {self.port} -U postgres"

    def sql(self, statement: str) -> str:
        return subprocess.run(
            [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-qAt", "-v", "ON_ERROR_STOP=1", "-c", statement],
            check=True, text=True, capture_output=True).stdout.strip()

    def log(self) -> str:
        path = self.root / "log"
        return path.read_text() if path.exists() else ""


class MariaDB:
    """One MariaDB server; `client_config` is a client option file (host, port, user,
    password) as the page's Secret provides one."""

    USER = "mysql"

    def __init__(self, root: Path, name: str) -> None:
        self.server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        if not Path(self.server).exists() or not shutil.which("mariadb-install-db"):
            raise RuntimeError(MISSING.format(what="MariaDB", package="mariadb-server"))
        self.root = root / name
        self.data = self.root / "data"
        self.port = free_port()
        self.client_config = self.root / "client.cnf"
        self.pid_file = self.root / "mariadbd.pid"
        self._process: subprocess.Popen[bytes] | None = None

    def init(self) -> None:
        self.root.mkdir(parents=True)
        owned_by(self.USER, self.root)
        as_user(self.USER, ["mariadb-install-db", f"--datadir={self.data}",
                            "--auth-root-authentication-method=normal", "--skip-test-db"])
        self.write_client_config("")

    def write_client_config(self, password: str) -> None:
        self.client_config.write_text(f"[client]\nhost=127.0.0.1\nport={self.port}\nuser=root\n"
                                      f"password={password}\n")
        self.client_config.chmod(0o600)

    def start(self) -> None:
        log = (self.root / "log").open("ab")
        self._process = subprocess.Popen(
            [self.server, "--no-defaults",
             f"--datadir={self.data}", f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--socket={self.root}/mariadbd.sock", f"--pid-file={self.pid_file}",
             "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=1"],
            stdout=log, stderr=subprocess.STDOUT, cwd="/", user=self.USER, group=self.USER,
            extra_groups=[])  # not through runuser, which stops itself when its child stops
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mariadbd exited {self._process.returncode}: {self.log()}")
            if subprocess.run(["mariadb-admin", f"--defaults-extra-file={self.client_config}",
                               "ping"], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not answer within {START_SECONDS}s: {self.log()}")

    def stop(self) -> None:
        """SIGTERM and wait on the child itself: polling its pid (``stop_pid_file``) would see
        the exited child as a zombie until waited on, and wait out the whole timeout."""
        if self._process is None:
            stop_pid_file(self.pid_file)
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server's process stopped (SIGSTOP) and continued: no write reaches its files
        meanwhile, as a volume snapshot is one point in time."""
        pid = int(self.pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def sql(self, statement: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["mariadb", f"--defaults-extra-file={self.client_config}", "-N",
                               "-B", "-e", statement], text=True, capture_output=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"{statement}: {done.stderr.strip()}")
        return done

    def log(self) -> str:
        path = self.root / "log"
        return path.read_text(errors="replace") if path.exists() else ""
