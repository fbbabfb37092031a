"""What a held notifier shows while it holds, against the real control plane through the
aggregator as real users with RBAC (issue 22): the output printed before the ready line in the
record while Held (real kubectl -o yaml, and the installed kubectl notify), a hold made ready by
its readyCommand (a file the test creates on this host: kwok runs exec commands here), and the
Events of holds and quiesce windows in order in real `kubectl events --for`.

Each held command sleeps a duration no other test uses, so that only its process matches."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.test_hold import NOTIFY, READ, RELEASE, finished, record, release_path
from tests.cluster.test_notifications_window import (
    RULES,
    make_pods,
    wait_done,
    wait_quiesced,
    window,
)
from tests.cluster.test_notifications_window import release as release_window
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import create_notification, declare, notify
from tests.support.plugin import Plugin, install
from tests.support.processes import running_sleeps

pytestmark = pytest.mark.cluster

LSN = "0/3000028"
EVENT_READER = [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                 "verbs": ["get", "list", "watch"]}]
EVENTS_WITHIN = 20.0
"""Events are written asynchronously, a new one at once: how long one may take to show."""


@pytest.fixture
def holder(cluster: Cluster, namespace: str) -> User:
    """May notify, release and read records and Events."""
    user = cluster.user("hold-reader")
    cluster.grant(namespace, user, [NOTIFY, RELEASE, READ, *EVENT_READER])
    return user


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Plugin:
    return install(tmp_path_factory.mktemp("kubectl-notify"))


def backup_notifier(sleep: str) -> dict[str, Any]:
    """A pg_backup_start-like hold: prints the LSN, then the ready line, then holds."""
    script = f"echo 'backup label: nightly'; echo 'lsn {LSN}'; echo ready; exec sleep {sleep}"
    return {"name": "backup", "timeoutSeconds": 20,
            "action": {"exec": {"command": ["/bin/sh", "-c", script]}},
            "hold": {"readyLine": "ready", "maxHoldSeconds": 600}}


def kubectl_until(cluster: Cluster, user: User, *args: str, contains: tuple[str, ...]) -> str:
    """kubectl's output as `user`, once it contains every one of `contains`."""
    shown = ""

    def complete() -> bool:
        nonlocal shown
        shown = cluster.kubectl(*args, user=user).stdout
        return all(text in shown for text in contains)

    wait_until(complete, f"kubectl {' '.join(args)} to show {contains}", EVENTS_WITHIN, 0.5)
    return shown


def reasons_in_order(shown: str, *reasons: str) -> list[str]:
    """The REASON column of `kubectl events` output, in the order kubectl printed the lines
    (oldest first), for the lines whose reason is one of `reasons`."""
    header, *lines = shown.splitlines()
    at = header.index("REASON")
    return [reason for line in lines if (reason := line[at:].split(" ", 1)[0]) in reasons]


def test_a_held_notifier_shows_the_lsn_it_printed_while_it_holds(
        cluster: Cluster, namespace: str, holder: User, plugin: Plugin) -> None:
    workdir, sleep = cluster.layout.exec_workdir, "3591.1"
    pod = cluster.deploy(namespace, "pg", annotations=declare(
        app=[backup_notifier(sleep)]))[0]["metadata"]["name"]

    held = plugin.run(pod, "backup", "-n", namespace, kubeconfig=holder.kubeconfig)
    assert held.returncode == 0, (held.stdout, held.stderr)
    lines = held.stdout.splitlines()
    assert lines[0].startswith("podnotifier/") and lines[0].endswith(" Held"), lines
    name = lines[0].split()[0].split("/", 1)[1]
    assert "--- app stdout, last 3 lines:" in lines, lines
    assert f"    lsn {LSN}" in lines and "    backup label: nightly" in lines, lines
    assert lines[-1] == (f"held until released: kubectl notify -n {namespace} release "
                         f"podnotifier/{name}")

    shown = cluster.kubectl("get", "podnotifier", name, "-n", namespace, "-o", "yaml",
                            user=holder).stdout
    status = yaml.safe_load(shown)["status"]
    (container,) = status["containers"]
    assert (status["phase"], container["phase"]) == ("Held", "Held"), status
    assert container["stdout"] == f"backup label: nightly\nlsn {LSN}\nready\n", container
    assert container["stdoutTruncated"] is False and container["pid"] > 0
    assert running_sleeps(workdir, sleep), "the held command is not running"

    with cluster.client_for(holder) as client:
        assert client.post(release_path(namespace, name), json={}).status_code == 200
    done = finished(cluster, namespace, name, 30)["status"]
    assert (done["phase"], done["reason"]) == ("Succeeded", "Released"), done
    assert f"lsn {LSN}" in done["containers"][0]["stdout"]

    on_pod = kubectl_until(cluster, holder, "events", "--for", f"pod/{pod}", "-n", namespace,
                           contains=("Held", "Released"))
    assert reasons_in_order(on_pod, "Held", "Released", "Notified") == ["Held", "Released"], (
        on_pod)
    assert f"release podnotifier/{name}" in on_pod and LSN not in on_pod
    on_record = kubectl_until(
        cluster, holder, "events", "--for", f"podnotifier.notifier.x-k8s.io/{name}", "-n",
        namespace, contains=("Held", "Released"))
    assert reasons_in_order(on_record, "Held", "Released") == ["Held", "Released"], on_record
    assert f"PodNotifier/{name}" in on_record, on_record
    short = kubectl_until(cluster, holder, "events", "--for", f"podnotifier/{name}", "-n",
                          namespace, contains=("Held", "Released"))
    assert reasons_in_order(short, "Held", "Released") == ["Held", "Released"], short
    described = kubectl_until(cluster, holder, "describe", "podnotifier", name, "-n",
                              namespace, contains=("Held", "Released"))
    assert "Events:" in described and "<none>" not in described.split("Events:", 1)[1]
    print(f"\nkubectl events --for podnotifier/{name}:\n{on_record}")


def test_a_ready_command_makes_the_hold_held_once_it_exits_0(
        cluster: Cluster, namespace: str, holder: User, tmp_path: Path) -> None:
    workdir, sleep, never_sleep = cluster.layout.exec_workdir, "3592.2", "3592.7"
    locked = tmp_path / "locked"

    checks = tmp_path / "ready-checks"  # a line per run of lock's ready command

    def lock(name: str, seconds: str, ready: str, timeout: int) -> dict[str, Any]:
        return {"name": name, "timeoutSeconds": timeout,
                "action": {"exec": {"command": ["/bin/sh", "-c",
                                                f"echo taking the lock; exec sleep {seconds}"]}},
                "hold": {"readyCommand": ["/bin/sh", "-c", ready],
                         "readyPeriodSeconds": 1, "maxHoldSeconds": 600}}

    def ready_checks() -> int:
        return len(checks.read_text().splitlines()) if checks.exists() else 0

    pod = cluster.deploy(namespace, "db", annotations=declare(app=[
        lock("lock", sleep, f"echo run >> {shlex.quote(str(checks))}; "
             f"test -e {shlex.quote(str(locked))}", 60),
        lock("never", never_sleep, f"test -e {shlex.quote(str(tmp_path / 'never-created'))}",
             3)]))[0]["metadata"]["name"]
    with cluster.client_for(holder) as client:
        answer = notify(client, namespace, pod, "lock", wait=0)
        assert answer.status_code == 201, answer.text
        name = answer.json()["metadata"]["name"]
        wait_until(lambda: bool(running_sleeps(workdir, sleep)), "the held command to run", 20)
        wait_until(lambda: ready_checks() >= 3, "three runs of the ready command", 20)
        assert record(cluster, namespace, name)["status"]["phase"] == "Running"

        locked.write_text("")
        wait_until(lambda: record(cluster, namespace, name)["status"]["phase"] == "Held",
                   "the hold to be Held once its ready command passes", 20)
        shown = yaml.safe_load(cluster.kubectl("get", "podnotifier", name, "-n", namespace,
                                               "-o", "yaml", user=holder).stdout)
        assert shown["status"]["containers"][0]["stdout"] == "taking the lock\n", shown
        assert client.post(release_path(namespace, name), json={}).status_code == 200
        done = finished(cluster, namespace, name, 30)["status"]
        assert (done["phase"], done["reason"]) == ("Succeeded", "Released"), done

        failing = notify(client, namespace, pod, "never", wait=20)
    assert failing.status_code == 201, failing.text
    status = failing.json()["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Timeout"), status
    message = status["containers"][0]["message"]
    assert message.startswith("its ready command /bin/sh -c 'test -e ") and (
        "did not exit 0 (the last run: exit code 1, run every 1s) within 3s" in message), message
    assert not running_sleeps(workdir, never_sleep), "the command that never got ready runs"
    assert not running_sleeps(workdir, sleep), "the released command still runs"


def test_a_quiesce_window_shows_quiesced_then_unquiesced_with_its_length(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    operator = cluster.user("window-operator")
    cluster.grant(namespace, operator, [*RULES, *EVENT_READER])
    make_pods(cluster, namespace, tmp_path, 2)
    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, window("snap"))
    assert created.status_code == 201, created.text
    wait_quiesced(cluster, namespace, "snap")
    opened = kubectl_until(cluster, operator, "events", "--for", "notification/snap", "-n",
                           namespace, contains=("Quiesced",))
    assert "Unquiesced" not in opened, opened
    assert release_window(cluster, operator, namespace, "snap").status_code == 200
    status = wait_done(cluster, namespace, "snap")
    assert status["phase"] == "Succeeded", status

    shown = kubectl_until(cluster, operator, "events", "--for",
                          "notification.notifier.x-k8s.io/snap", "-n", namespace,
                          contains=("Unquiesced", "Completed"))
    assert reasons_in_order(shown, "Started", "Quiesced", "Unquiesced", "Completed") == [
        "Started", "Quiesced", "Unquiesced", "Completed"], shown
    unquiesced = next(line for line in shown.splitlines() if " Unquiesced " in line)
    window_times = status["window"]
    assert ("the window was open " in unquiesced
            and f"(from {window_times['quiescedTime']} to {window_times['unquiescedTime']})"
            in unquiesced and "2 pods released, 0 failed" in unquiesced), unquiesced
    print(f"\nkubectl events --for notification/snap:\n{shown}")
