"""The egress guard's parser and attribution, on /proc tables shaped like recorded ones: a
connection off this machine is reported with its process and remote address, loopback is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.egress import EgressGuard, Finding, decode_endpoint, parse_table

HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode\n")
TCP = HEADER + (
    # kube-apiserver's aggregator dialling a ClusterIP from 10.96.0.0/16 (SYN-SENT), as recorded
    # before the local plane's ranges moved to loopback
    "   0: 0100007F:A2C4 0100600A:01BB 02 00000001:00000000 01:00000064 00000002     0        0 "
    "4711 2 0000000000000000 100 0 0 10 -1\n"
    # a loopback connection to etcd (ESTABLISHED)
    "   1: 0100007F:C35A 0100007F:5C6E 01 00000000:00000000 00:00000000 00000000     0        0 "
    "4712 1 0000000000000000 20 4 30 10 -1\n"
    # a ClusterIP of the loopback range, 127.200.0.7:443 (ESTABLISHED)
    "   2: 0100007F:C35B 0700C87F:01BB 01 00000000:00000000 00:00000000 00000000     0        0 "
    "4713 1 0000000000000000 20 4 30 10 -1\n"
    # a listening socket: never reported, whatever its addresses
    "   3: 00000000:6723 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "4714 1 0000000000000000 100 0 0 10 0\n"
    # a connection off the machine held by a process nobody watches
    "   4: 0100007F:C35C 5000710A:01BB 01 00000000:00000000 00:00000000 00000000     0        0 "
    "4715 1 0000000000000000 20 4 30 10 -1\n")
TCP6 = HEADER + (
    # ::1 to ::1
    "   0: 00000000000000000000000001000000:C35D 00000000000000000000000001000000:6723 01 "
    "00000000:00000000 00:00000000 00000000     0        0 4716 1 0000000000000000 20 4 30 10 -1\n"
    # ::ffff:10.244.0.3:8080: an IPv4-mapped pod IP of the former pod range, off the machine
    "   1: 0000000000000000FFFF00000100007F:C35E 0000000000000000FFFF00000300F40A:1F90 01 "
    "00000000:00000000 00:00000000 00000000     0        0 4717 1 0000000000000000 20 4 30 10 -1\n"
    # ::ffff:127.244.0.3:8080: an IPv4-mapped pod IP of the loopback range
    "   2: 0000000000000000FFFF00000100007F:C35F 0000000000000000FFFF00000300F47F:1F90 01 "
    "00000000:00000000 00:00000000 00000000     0        0 4718 1 0000000000000000 20 4 30 10 -1\n")


@pytest.mark.parametrize(("field", "expected"), [
    ("0100007F:6723", ("127.0.0.1", 26403)),
    ("0100600A:01BB", ("10.96.0.1", 443)),
    ("0700C87F:01BB", ("127.200.0.7", 443)),
    ("00000000000000000000000001000000:6723", ("::1", 26403)),
    ("0000000000000000FFFF00000300F40A:1F90", ("::ffff:10.244.0.3", 8080)),
])
def test_decode_endpoint(field: str, expected: tuple[str, int]) -> None:
    assert decode_endpoint(field) == expected


def test_parse_table_keeps_dials_and_connections_only() -> None:
    sockets = parse_table(TCP)
    assert [(s.inode, s.state, s.remote) for s in sockets] == [
        (4711, "SYN-SENT", "10.96.0.1:443"),
        (4712, "ESTABLISHED", "127.0.0.1:23662"),
        (4713, "ESTABLISHED", "127.200.0.7:443"),
        (4715, "ESTABLISHED", "10.113.0.80:443"),
    ]
    assert [s.remote_address for s in parse_table(TCP6)] == [
        "::1", "::ffff:10.244.0.3", "::ffff:127.244.0.3"]


def fake_process(proc: Path, pid: int, ppid: int, comm: str, inodes: list[int]) -> None:
    """/proc/<pid> with stat, ns/net, the namespace's tables and a socket link per inode."""
    root = proc / str(pid)
    (root / "ns").mkdir(parents=True)
    (root / "net").mkdir()
    (root / "fd").mkdir()
    (root / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0\n")
    os.symlink("net:[4026531833]", root / "ns" / "net")
    (root / "net" / "tcp").write_text(TCP)
    (root / "net" / "tcp6").write_text(TCP6)
    os.symlink("/dev/null", root / "fd" / "0")
    for fd, inode in enumerate(inodes, start=3):
        os.symlink(f"socket:[{inode}]", root / "fd" / str(fd))


def test_off_machine_connections_are_reported_with_process_and_address(tmp_path: Path) -> None:
    fake_process(tmp_path, 100, 1, "kube-apiserver", [4711, 4712, 4713])
    fake_process(tmp_path, 200, 1, "python3", [4716])
    fake_process(tmp_path, 201, 200, "curl", [4717, 4718])  # a child of the watched test process
    fake_process(tmp_path, 300, 1, "pip", [4715])  # not watched
    guard = EgressGuard(lambda: {100: "kube-apiserver", 200: "pytest"}, proc=tmp_path)

    guard.sample()

    assert guard.take() == [
        Finding(100, "kube-apiserver", "SYN-SENT", "10.96.0.1:443"),
        Finding(201, "curl (child of pytest)", "ESTABLISHED", "[::ffff:10.244.0.3]:8080"),
    ]
    assert "127.200.0.7" in guard.remotes_seen
    assert str(Finding(100, "kube-apiserver", "SYN-SENT", "10.96.0.1:443")) == (
        "kube-apiserver (pid 100) SYN-SENT to 10.96.0.1:443")
    guard.sample()
    assert guard.take() == [], "a connection is reported once"


def test_loopback_only_reports_nothing(tmp_path: Path) -> None:
    fake_process(tmp_path, 100, 1, "etcd", [4712, 4713, 4716, 4718])
    guard = EgressGuard(lambda: {100: "etcd"}, proc=tmp_path)
    guard.sample()
    assert guard.take() == []
    assert guard.samples == 1


def test_a_process_gone_between_reads_is_skipped(tmp_path: Path) -> None:
    guard = EgressGuard(lambda: {12345: "kwok"}, proc=tmp_path)
    guard.sample()
    assert guard.take() == []
