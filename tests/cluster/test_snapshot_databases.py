"""docs/consistent-snapshots.md's recipes against real PostgreSQL and MariaDB (Debian's packages,
`make databases`), through the local control plane: the page's held notifier takes the lock in a
Notification window, the test takes the "snapshot" (a copy of the data directory) inside the
window, releases, and restores the copy into a fresh server, which must start and hold every row
committed before the quiesce.

kwok runs the pod's exec commands on this host, so the page's `psql`/`mysql` reach servers the
test starts on loopback. The one change to each page command is how the client reaches its
server: `psql -U postgres` gets `-h 127.0.0.1 -p <port>`, and the MariaDB client option file
the page mounts from a Secret is the test's own (host, port, user, password). kwok does not
close a command's stdin at release (docs/api.md), so the commands end the way the page's
recipes end on SIGTERM: PostgreSQL's session still runs pg_backup_stop(), MariaDB's ends.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver.notifier.declarations import ANNOTATION
from tests.cluster.test_notifications_window import release, status_of, wait_done, wait_quiesced
from tests.support.databases import MariaDB, Postgres
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import create_notification
from tests.support.notify import records as list_records
from tests.unit.test_snapshot_walkthrough import documents, workload

pytestmark = pytest.mark.cluster

ROWS = 500


@pytest.fixture
def backup(cluster: Cluster, namespace: str) -> User:
    """May create and release Notifications and read their records (the page's Role's
    notifier.x-k8s.io rules)."""
    user = cluster.user("snapshot-backup")
    cluster.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "verbs": ["create"],
         "resources": ["notifications", "notifications/release", "pods/notify"]},
        {"apiGroups": ["notifier.x-k8s.io"], "verbs": ["get", "list", "watch"],
         "resources": ["notifications", "podnotifiers"]}])
    return user


def page_annotation(statefulset: str, client: str, reached: str) -> str:
    """The StatefulSet's notifier annotation from the page, its client `client` reaching the
    test's server as `reached`."""
    annotation = workload(statefulset)["spec"]["template"]["metadata"]["annotations"][ANNOTATION]
    assert annotation.count(client) == 1, annotation
    return annotation.replace(client, reached)


def page_notification(namespace: str, selector: dict[str, str], notifier: str) -> dict[str, Any]:
    (notification,) = [d for d in documents() if d["kind"] == "Notification"]
    notification = json.loads(json.dumps(notification))
    notification["metadata"]["namespace"] = namespace
    notification["spec"].update(selector={"matchLabels": selector}, notifier=notifier,
                                parallelism=1)
    return notification


def quiesce(cluster: Cluster, user: User, namespace: str, notification: dict[str, Any]) -> str:
    with cluster.client_for(user) as client:
        created = create_notification(client, namespace, notification)
    assert created.status_code == 201, created.text
    name = created.json()["metadata"]["name"]
    wait_quiesced(cluster, namespace, name)
    return name


def unquiesce(cluster: Cluster, user: User, namespace: str, name: str) -> dict[str, Any]:
    """Release the window; the Notification's one record once it ended."""
    answer = release(cluster, user, namespace, name)
    assert answer.status_code == 200, answer.text
    status = wait_done(cluster, namespace, name, timeout=120)
    assert status["phase"] == "Succeeded", status
    (record,) = list_records(cluster, namespace,
                             labelSelector=f"notifier.x-k8s.io/notification={name}")
    assert (record["status"]["phase"], record["status"]["reason"]) == (
        "Succeeded", "Released"), record["status"]
    return record


def between(text: str, start: str, end: str) -> str:
    assert start in text and end in text, text
    return text.split(start + "\n", 1)[1].split(end, 1)[0]


@pytest.fixture
def db_root() -> Iterator[Path]:
    """A directory the servers' users can reach (pytest's tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="cn-databases-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def servers(db_root: Path) -> Iterator[list[Postgres | MariaDB]]:
    """The servers a test started, stopped (by PID) at its end."""
    started: list[Postgres | MariaDB] = []
    yield started
    for server in reversed(started):
        server.stop()


def test_a_postgres_backup_taken_in_the_window_restores_with_its_backup_label(
        cluster: Cluster, namespace: str, backup: User, db_root: Path,
        servers: list[Postgres | MariaDB]) -> None:
    root = db_root
    live = Postgres(root, "live", root / "archive")
    live.init()
    live.start()
    servers.append(live)
    live.sql(f"CREATE TABLE t (i int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, {ROWS})")

    cluster.deploy(namespace, "pg", containers=("postgres",), annotations={
        ANNOTATION: page_annotation("pg", "psql -U postgres", live.psql())})
    name = quiesce(cluster, backup, namespace, page_notification(namespace, {"app": "pg"},
                                                                 "backup"))
    assert live.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    " AND query LIKE '%pg_backup_start(%' AND pid <> pg_backend_pid()") == "1"
    live.sql("INSERT INTO t VALUES (-1)")  # written during the copy: the WAL replays it or not
    snapshot = root / "snapshot"
    shutil.copytree(live.data, snapshot, symlinks=True)  # not atomic: the backup label's job
    record = unquiesce(cluster, backup, namespace, name)

    (container,) = record["status"]["containers"]
    stdout = container["stdout"]
    assert container["stopped"] in ("Exited", "Terminated"), container  # not Killed
    assert "stop lsn " in stdout, stdout
    label = between(stdout, "--- backup_label", "--- tablespace_map")
    assert label.startswith("START WAL LOCATION: ") and "LABEL: snapshot\n" in label, label
    assert between(stdout, "--- tablespace_map", "--- end") == ""  # no tablespaces
    window = status_of(cluster, namespace, name)["window"]
    assert window["quiescedTime"] <= window["releaseTime"]

    # The restore, as the page gives it: the label beside the copy, recovery from the archive.
    restored = Postgres(root, "restored", live.archive)
    shutil.copytree(snapshot, restored.data, symlinks=True)
    (restored.data / "postmaster.pid").unlink(missing_ok=True)
    (restored.data / "backup_label").write_text(label)
    (restored.data / "recovery.signal").write_text("")
    with (restored.data / "postgresql.auto.conf").open("a") as conf:
        conf.write(restored.settings() + "archive_mode = off\n"
                   f"restore_command = 'cp {live.archive}/%f %p'\n")
    shutil.chown(restored.root, Postgres.USER, Postgres.USER)
    for path in [restored.data, *restored.data.rglob("*")]:
        shutil.chown(path, Postgres.USER, Postgres.USER)
    restored.start()
    servers.append(restored)
    wait_until(lambda: restored.sql("SELECT pg_is_in_recovery()") == "f",
               "the restored server to end its recovery", 60)
    assert restored.sql("SELECT count(*) FROM t WHERE i > 0") == str(ROWS), restored.log()
    assert "backup_label" in restored.log() or "starting backup recovery" in restored.log(), (
        restored.log())


def test_a_mariadb_copy_taken_under_the_lock_restores_with_every_row(
        cluster: Cluster, namespace: str, backup: User, db_root: Path,
        servers: list[Postgres | MariaDB]) -> None:
    live = MariaDB(db_root, "live")
    live.init()
    live.start()
    servers.append(live)
    live.sql("ALTER USER IF EXISTS root@localhost IDENTIFIED BY 'backup-pw';"
             " ALTER USER IF EXISTS root@'127.0.0.1' IDENTIFIED BY 'backup-pw'")
    live.write_client_config("backup-pw")
    live.sql("CREATE DATABASE shop; CREATE TABLE shop.orders (i int PRIMARY KEY) ENGINE=InnoDB;"
             " CREATE TABLE shop.notes (i int) ENGINE=Aria;"
             f" USE shop; INSERT INTO shop.orders SELECT seq FROM seq_1_to_{ROWS};"
             f" INSERT INTO shop.notes SELECT seq FROM seq_1_to_{ROWS}")

    cluster.deploy(namespace, "mysql", containers=("mysql",), annotations={
        ANNOTATION: page_annotation("mysql", "/etc/mysql-backup/client.cnf",
                                    str(live.client_config))})
    name = quiesce(cluster, backup, namespace, page_notification(namespace, {"app": "mysql"},
                                                                 "lock"))
    blocked = live.sql("SET SESSION lock_wait_timeout = 1; INSERT INTO shop.orders VALUES (-1)",
                       check=False)
    assert blocked.returncode != 0 and "Lock wait timeout" in blocked.stderr, blocked
    snapshot = db_root / "mysql-snapshot"
    with live.paused():  # a volume snapshot is one point in time; a copy of files is not
        shutil.copytree(live.data, snapshot, symlinks=True)
    record = unquiesce(cluster, backup, namespace, name)
    (container,) = record["status"]["containers"]
    assert container["stdout"] == "ready\n", container
    live.sql("INSERT INTO shop.orders VALUES (-2)")  # unlocked after the release

    restored = MariaDB(db_root, "restored")
    restored.root.mkdir()
    shutil.copytree(snapshot, restored.data, symlinks=True)
    for path in [restored.root, *restored.root.rglob("*")]:
        shutil.chown(path, MariaDB.USER, MariaDB.USER)
    restored.write_client_config("backup-pw")
    restored.start()
    servers.append(restored)
    counts = restored.sql("SELECT (SELECT count(*) FROM shop.orders), "
                          "(SELECT count(*) FROM shop.notes)").stdout.split()
    assert counts == [str(ROWS), str(ROWS)], restored.log()
