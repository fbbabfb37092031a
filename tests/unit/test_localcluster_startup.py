"""localcluster.startup: waits that notice a dead process, and a failed start that stops all."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from localcluster import __main__ as localcluster
from localcluster import haproxy, processes
from localcluster.layout import Layout, Ports
from localcluster.startup import StartFailed, Startup, busy_ports


class FakeProcesses:
    """spawn and stop for Startup: records what was started and stopped, starts nothing."""

    def __init__(self) -> None:
        self.exit_status: dict[str, int | None] = {}
        self.stopped: list[list[str]] = []

    def spawn(self, name: str, argv: list[str], log_dir: Path,
              stop_signal: str) -> processes.Child:
        self.exit_status[name] = None
        tracked = processes.Tracked(name, 1000 + len(self.exit_status), argv, 1, stop_signal)
        return processes.Child(tracked, lambda: self.exit_status[name])

    def stop(self, tracked: list[processes.Tracked]) -> list[str]:
        self.stopped.append([t.name for t in tracked])
        return [t.name for t in reversed(tracked)]


def test_a_failure_midway_stops_everything_started_and_forgets_it(tmp_path: Path) -> None:
    layout, fake = Layout(tmp_path), FakeProcesses()
    with pytest.raises(StartFailed, match="kube-apiserver"):
        with Startup(layout, spawn=fake.spawn, stop=fake.stop, poll_interval=0.01) as plane:
            plane.launch("etcd", ["etcd"])
            plane.launch("kube-apiserver", ["kube-apiserver"])
            assert [t.name for t in processes.load(layout.state_file)] == ["etcd",
                                                                           "kube-apiserver"]
            plane.wait_for("kube-apiserver", "kube-apiserver /readyz", lambda: False, 0.05)
            plane.launch("kwok", ["kwok"])
    assert fake.stopped == [["etcd", "kube-apiserver"]]
    assert not layout.state_file.exists()


def test_any_exception_stops_what_was_started(tmp_path: Path) -> None:
    layout, fake = Layout(tmp_path), FakeProcesses()
    with pytest.raises(KeyboardInterrupt):
        with Startup(layout, spawn=fake.spawn, stop=fake.stop) as plane:
            plane.launch("etcd", ["etcd"])
            raise KeyboardInterrupt
    assert fake.stopped == [["etcd"]]


def test_a_successful_start_stops_nothing_and_records_every_process(tmp_path: Path) -> None:
    layout, fake = Layout(tmp_path), FakeProcesses()
    with Startup(layout, spawn=fake.spawn, stop=fake.stop) as plane:
        plane.launch("etcd", ["etcd"])
        plane.wait_for("etcd", "etcd /health", lambda: True, 1)
        plane.launch("kwok", ["unshare"], stop_signal="SIGKILL")
    assert fake.stopped == []
    assert processes.load(layout.state_file) == [c.tracked for c in plane.children]
    assert plane.children[1].tracked.stop_signal == "SIGKILL"


def test_a_wait_fails_at_once_naming_the_process_that_exited_with_its_real_log(
        tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    script = ("echo starting; echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2; "
              "exit 3")
    with Startup(layout, poll_interval=0.01) as plane:
        plane.launch("kube-apiserver", ["/bin/sh", "-c", script])
        began = time.monotonic()
        with pytest.raises(StartFailed) as failed:
            plane.wait_for("kube-apiserver", "kube-apiserver /readyz", lambda: False, 60)
    assert time.monotonic() - began < 10
    message = str(failed.value)
    assert message.startswith(f"kube-apiserver (pid {plane.children[0].tracked.pid}) exited "
                              "with status 3 while waiting for kube-apiserver /readyz")
    assert message.endswith("starting\nlisten tcp 127.0.0.1:1: bind: address already in use")


def test_a_wait_names_another_component_that_died_meanwhile(tmp_path: Path) -> None:
    layout, fake = Layout(tmp_path), FakeProcesses()
    processes.log_path(layout.logs, "etcd").parent.mkdir(parents=True)
    processes.log_path(layout.logs, "etcd").write_text("etcd: disk full\n")
    with pytest.raises(StartFailed, match=r"^etcd \(pid \d+\) exited with status 1 while "
                                          r"waiting for kube-apiserver /readyz;") as failed:
        with Startup(layout, spawn=fake.spawn, stop=fake.stop, poll_interval=0.01) as plane:
            plane.launch("etcd", ["etcd"])
            plane.launch("kube-apiserver", ["kube-apiserver"])
            fake.exit_status["etcd"] = 1
            plane.wait_for("kube-apiserver", "kube-apiserver /readyz", lambda: True, 1)
    assert str(failed.value).endswith(":\netcd: disk full")


def test_a_wait_that_times_out_names_the_component_and_shows_its_log(tmp_path: Path) -> None:
    layout, fake = Layout(tmp_path), FakeProcesses()
    layout.logs.mkdir(parents=True)
    processes.log_path(layout.logs, "kwok").write_text("kwok: waiting for nodes\n")
    with pytest.raises(StartFailed) as failed:
        with Startup(layout, spawn=fake.spawn, stop=fake.stop, poll_interval=0.01) as plane:
            plane.launch("kwok", ["kwok"])
            plane.wait_for("kwok", "3 Ready kwok nodes", lambda: False, 0.05)
    assert str(failed.value) == (
        f"timed out after 0 s waiting for 3 Ready kwok nodes (kwok still runs); last lines of "
        f"{layout.logs / 'kwok.log'}:\nkwok: waiting for nodes")


def test_a_wait_returns_once_the_check_passes(tmp_path: Path) -> None:
    answers = iter([False, False, True])
    with Startup(Layout(tmp_path), poll_interval=0.01) as plane:
        plane.wait_for("etcd", "etcd /health", lambda: next(answers), 5)
    assert next(answers, None) is None


def test_a_real_failed_start_leaves_no_process(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    with pytest.raises(StartFailed, match="^quitter"):
        with Startup(layout, poll_interval=0.01) as plane:
            plane.launch("sleeper", ["/bin/sleep", "30"])
            plane.launch("quitter", ["/bin/sh", "-c", "exit 1"])
            plane.wait_for("quitter", "quitter to serve", lambda: False, 30)
    assert not processes.is_alive(plane.children[0].tracked)


def test_busy_ports_names_the_ports_something_listens_on() -> None:
    with socket.socket() as listener, socket.socket() as unused:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        unused.bind(("127.0.0.1", 0))
        free = unused.getsockname()[1]
        unused.close()
        taken = listener.getsockname()[1]
        began = time.monotonic()
        assert busy_ports({"CN_ETCD_PORT": taken, "CN_KWOK_PORT": free}, timeout=0.3) == [
            f"CN_ETCD_PORT={taken}"]
        assert time.monotonic() - began >= 0.3
        listener.close()
        assert busy_ports({"CN_ETCD_PORT": taken, "CN_KWOK_PORT": free}) == []


def test_a_state_directory_too_long_for_haproxys_socket_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    fits = tmp_path / ("d" * max(1, haproxy.SOCKET_PATH_MAX - len(f"{tmp_path}//haproxy.sock")))
    assert haproxy.socket_path_problem(Layout(fits)) == ""
    long = fits.with_name(fits.name + "d")
    problem = haproxy.socket_path_problem(Layout(long))
    assert f"{long} is too long for HAProxy's stats socket" in problem
    assert f"has {haproxy.SOCKET_PATH_MAX + 1} characters" in problem
    assert "set CN_CLUSTER_DIR to a shorter directory" in problem
    with pytest.raises(StartFailed, match="too long for HAProxy's stats socket"):
        localcluster.up(Layout(long), Ports(), 1)
    assert not long.exists()
