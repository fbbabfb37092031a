"""The local server replicas and HAProxy: each replica on its own port and data directory with
Kubernetes storage, HAProxy balancing over their /readyz checks, and the plane functions that
kill, stop and restart one replica or all of them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver.handlers.watch_response import MIN_REQUEST_TIMEOUT_SECONDS
from localcluster import components, haproxy, notifier, plane, processes
from localcluster.layout import Layout, Ports

PORTS = Ports(notifier=30000)


def test_each_replica_has_its_own_port_and_name_and_drains_before_it_stops(
        tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    argvs = [notifier.server_argv(layout, PORTS, i) for i in range(2)]
    for i, argv in enumerate(argvs):
        assert argv[:3] == ["/usr/bin/env", f"POD_NAME=container-notifier-{i}",
                            "POD_NAMESPACE=container-notifier"]
        assert f"--secure-port={30001 + i}" in argv
        assert "--storage=kubernetes" in argv
        assert not [a for a in argv if a.startswith("--data-dir=")], "nothing on local disk"
        assert "--shutdown-delay-duration=3s" in argv
        # Bootstrap mode, each replica its own --cert-dir under the state directory.
        assert not [a for a in argv if a.startswith("--tls-")]
        assert f"--cert-dir={tmp_path / 'serving-cert' / f'container-notifier-{i}'}" in argv


def test_server_args_are_appended_to_each_replica(tmp_path: Path) -> None:
    argv = notifier.server_argv(Layout(tmp_path), PORTS, 0, ["--serving-cert-validity=30s"])
    assert argv[-1] == "--serving-cert-validity=30s"


def test_the_plane_names_each_replica_then_haproxy() -> None:
    assert components.plane(2)[-3:] == ("notifier-apiserver-0", "notifier-apiserver-1",
                                        "haproxy")
    assert components.plane(1)[-2:] == ("notifier-apiserver-0", "haproxy")


def test_replica_ports_are_checked_for_being_free() -> None:
    assert PORTS.by_variable(2)["CN_NOTIFIER_PORT"] == 30000
    assert [PORTS.by_variable(2)[f"CN_NOTIFIER_PORT+1+{i}"] for i in range(2)] == [30001, 30002]


def test_haproxy_balances_over_every_replica_checked_on_readyz(tmp_path: Path) -> None:
    config = haproxy.config(Layout(tmp_path), PORTS, 3)
    for line in ("mode tcp", "balance roundrobin", "option httpchk",
                 "http-check send meth GET uri /readyz", "http-check expect status 200",
                 "bind 127.0.0.1:30000"):
        assert f"    {line}\n" in config
    for i in range(3):
        assert (f"    server container-notifier-{i} 127.0.0.1:{30001 + i} check check-ssl "
                "verify none inter 1s fall 2 rise 1\n") in config


def test_haproxy_keeps_the_longest_watch_open() -> None:
    # A watch without timeoutSeconds lives up to twice the minimum request timeout.
    assert haproxy.TUNNEL_TIMEOUT_SECONDS > 2 * MIN_REQUEST_TIMEOUT_SECONDS
    assert f"timeout tunnel {haproxy.TUNNEL_TIMEOUT_SECONDS}s" in haproxy.config(
        Layout(Path("/x")), PORTS, 1)


def test_haproxy_accepts_the_configuration(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    checked = subprocess.run([str(haproxy.BINARY), "-c", "-f",
                              str(haproxy.write_config(layout, PORTS, 2))],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_haproxy_routes_to_nothing_when_it_does_not_run(tmp_path: Path) -> None:
    assert not haproxy.routes_to(Layout(tmp_path), 0)


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[Layout]:
    """A plane of two "replicas" (sleep processes) recorded in tmp_path/processes.json."""
    layout = Layout(tmp_path)
    started = [processes.start(components.replica(i), ["/bin/sleep", "60"], layout.logs).tracked
               for i in range(2)]
    processes.save(layout.state_file, started)
    yield layout
    processes.stop(processes.load(layout.state_file), grace_seconds=1)


def test_kill_one_replica_and_restart_it_with_the_same_command_line(sleepers: Layout) -> None:
    first, second = plane.replicas(sleepers)
    plane.kill_replica(sleepers, 0)
    assert not processes.is_alive(first) and processes.is_alive(second)
    assert [p.name for p in plane.replicas(sleepers)] == ["notifier-apiserver-0",
                                                          "notifier-apiserver-1"]
    restarted = plane.restart_replica(sleepers, 0)
    assert processes.is_alive(restarted) and restarted.argv == first.argv
    assert plane.replicas(sleepers) == [restarted, second]


def test_stop_one_replica_then_restart_all(sleepers: Layout) -> None:
    before = plane.replicas(sleepers)
    plane.stop_replica(sleepers, 1)
    assert processes.is_alive(before[0]) and not processes.is_alive(before[1])
    after = plane.restart_replicas(sleepers)
    assert [p.name for p in after] == [p.name for p in before]
    assert all(processes.is_alive(p) for p in after)
    assert not any(processes.is_alive(p) for p in before)


def test_a_replica_that_is_not_recorded_is_named_in_the_error(sleepers: Layout) -> None:
    with pytest.raises(LookupError, match="no server replica 2: .* records 2"):
        plane.kill_replica(sleepers, 2)
