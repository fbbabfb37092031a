"""localcluster.processes: a process is identified by pid and start time, from its first instant."""

from __future__ import annotations

import json
import time
from pathlib import Path

from localcluster import processes


def _wait_state(pid: int, state: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == state:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never reached state {state}")


def test_a_process_is_alive_from_the_moment_start_returns(tmp_path: Path) -> None:
    # Regression: liveness was judged by /proc/<pid>/cmdline, which stays empty until execve has
    # paged in the binary, so `up` declared a just-started kube-apiserver dead ("exited while
    # waiting ... last log lines:" and nothing). 20 starts: the old check failed most of them.
    for i in range(20):
        child = processes.start(f"sleeper-{i}", ["/bin/sleep", "30"], tmp_path)
        try:
            assert processes.is_alive(child.tracked), f"start {i}: judged dead right after start"
            assert child.exit_status() is None
        finally:
            processes.stop([child.tracked], grace_seconds=5)


def test_a_reused_pid_is_not_the_process_we_started(tmp_path: Path) -> None:
    child = processes.start("sleeper", ["/bin/sleep", "30"], tmp_path)
    try:
        impostor = processes.Tracked("sleeper", child.tracked.pid, child.tracked.argv,
                                     start_time=child.tracked.start_time - 1)
        assert not processes.is_alive(impostor)
        assert processes.stop([impostor]) == []
        assert processes.is_alive(child.tracked)
    finally:
        processes.stop([child.tracked], grace_seconds=5)


def test_an_exited_unreaped_child_is_not_alive_and_reports_its_status(tmp_path: Path) -> None:
    child = processes.start("quitter", ["/bin/sh", "-c", "exit 7"], tmp_path)
    _wait_state(child.tracked.pid, "Z")
    assert not processes.is_alive(child.tracked)
    assert child.exit_status() == 7


def test_stop_signals_each_live_process_and_names_them(tmp_path: Path) -> None:
    first = processes.start("first", ["/bin/sleep", "30"], tmp_path).tracked
    second = processes.start("second", ["/bin/sleep", "30"], tmp_path).tracked
    assert processes.stop([first, second], grace_seconds=5) == ["second", "first"]
    assert not processes.is_alive(first)
    assert not processes.is_alive(second)
    assert processes.stop([first, second]) == []


def test_stop_stops_one_at_a_time_so_each_shuts_down_while_what_it_depends_on_runs(
        tmp_path: Path) -> None:
    # kube-apiserver signalled together with etcd retried etcd until it was SIGKILLed.
    first = processes.start("etcd", ["/bin/sleep", "30"], tmp_path).tracked
    script = (f'trap \'[ "$(cut -d" " -f3 /proc/{first.pid}/stat)" != Z ] && echo etcd-ran; '
              'exit 0\' TERM; while :; do sleep 0.05; done')
    second = processes.start("kube-apiserver", ["/bin/sh", "-c", script], tmp_path).tracked
    _wait_state(second.pid, "S")
    assert processes.stop([first, second], grace_seconds=5) == ["kube-apiserver", "etcd"]
    assert processes.log_path(tmp_path, "kube-apiserver").read_text() == "etcd-ran\n"


def test_stop_together_signals_every_process_before_waiting_for_any(tmp_path: Path) -> None:
    """Each exits on SIGTERM only once the other has had its SIGTERM too (as replicas draining
    together): signalled in turn, the first would wait until SIGKILLed."""
    names = ("replica-0", "replica-1")
    tracked = []
    for name, other in (names, names[::-1]):
        script = (f"trap 'touch {tmp_path}/{name}.got; "
                  f"while [ ! -e {tmp_path}/{other}.got ]; do sleep 0.05; done; "
                  f"touch {tmp_path}/{name}.exited; exit 0' TERM; "
                  "while :; do sleep 0.05; done")
        tracked.append(processes.start(name, ["/bin/sh", "-c", script], tmp_path).tracked)
        _wait_state(tracked[-1].pid, "S")
    assert processes.stop_together(tracked, grace_seconds=5) == list(names)
    assert not any(processes.is_alive(proc) for proc in tracked)
    assert all((tmp_path / f"{name}.exited").exists() for name in names)


def test_stop_returns_once_a_process_that_ignores_its_stop_signal_is_killed(
        tmp_path: Path) -> None:
    script = "trap '' TERM; while :; do sleep 0.05; done"
    stubborn = processes.start("stubborn", ["/bin/sh", "-c", script], tmp_path).tracked
    _wait_state(stubborn.pid, "S")
    began = time.monotonic()
    assert processes.stop([stubborn], grace_seconds=0.3) == ["stubborn"]
    assert not processes.is_alive(stubborn)
    assert 0.3 <= time.monotonic() - began < 5


def test_output_goes_to_the_components_log(tmp_path: Path) -> None:
    child = processes.start("talker", ["/bin/sh", "-c", "echo out; echo err >&2"], tmp_path)
    _wait_state(child.tracked.pid, "Z")
    assert processes.log_path(tmp_path, "talker").read_text().splitlines() == ["out", "err"]


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    tracked = [processes.Tracked("kwok", 123, ["/usr/bin/unshare", "--pid"], 456, "SIGKILL")]
    processes.save(tmp_path / "processes.json", tracked)
    assert processes.load(tmp_path / "processes.json") == tracked
    assert processes.load(tmp_path / "missing.json") == []


def test_an_entry_saved_without_start_time_is_identified_by_its_executable(
        tmp_path: Path) -> None:
    child = processes.start("sleeper", ["/bin/sleep", "30"], tmp_path)
    try:
        _wait_state(child.tracked.pid, "S")
        state = tmp_path / "processes.json"
        state.write_text(json.dumps([
            {"name": "sleeper", "pid": child.tracked.pid, "argv": ["/bin/sleep", "30"],
             "stop_signal": "SIGTERM"},
            {"name": "other", "pid": child.tracked.pid, "argv": ["/usr/bin/other"],
             "stop_signal": "SIGTERM"},
        ]))
        legacy, other = processes.load(state)
        assert legacy == child.tracked
        assert processes.is_alive(legacy)
        assert not processes.is_alive(other)
    finally:
        processes.stop([child.tracked], grace_seconds=5)


def test_log_tail_shows_the_last_lines_or_says_why_there_are_none(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert processes.log_tail(log, lines=3) == "line 47\nline 48\nline 49"
    log.write_text("")
    assert processes.log_tail(log) == f"({log} is empty)"
    assert processes.log_tail(tmp_path / "nope.log") == f"({tmp_path / 'nope.log'} does not exist)"
