"""How kubectl notify prints: a run's line per container, -o wide tails (and a held run's), a
Notification's progress (a bar redrawn in place on a terminal, plain lines otherwise) and its
failed pods."""

from __future__ import annotations

import io
from typing import Any

from kubectl_notify import output
from kubectl_notify.terminal import Terminal


def record(phase: str = "Succeeded", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "db-0-quiesce-x7k2p"}, "spec": {"podName": "db-0"},
            "status": {"phase": phase, "startTime": "2026-12-01T08:00:00.100Z",
                       "completionTime": "2026-12-01T08:00:00.131Z", **status}}


def container(name: str, phase: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "phase": phase, "startTime": "2026-12-01T08:00:00.100Z",
            "completionTime": "2026-12-01T08:00:01.500Z", **fields}


def test_a_line_per_container_with_exit_code_duration_and_last_output() -> None:
    text = output.record_result(record(containers=[
        container("db", "Succeeded", exitCode=0, stdout="checkpoint\nquiesced\n\n",
                  stderr="warn\n"),
        container("sidecar", "Succeeded", exitCode=0, stdout="", stderr="only stderr\n")]))
    assert text.splitlines() == [
        "podnotifier/db-0-quiesce-x7k2p Succeeded in 31ms",
        "CONTAINER   PHASE       EXIT   DURATION   OUTPUT",
        "db          Succeeded   0      1.4s       quiesced",
        "sidecar     Succeeded   0      1.4s       only stderr",
    ]


def test_failures_show_the_reason_where_there_is_no_exit_code() -> None:
    text = output.record_result(record(
        "Failed", reason="Timeout", message="1/2 containers failed (db: Timeout)",
        containers=[container("db", "Failed", reason="Timeout", message="timed out after 1s"),
                    container("app", "Succeeded", exitCode=0)]))
    lines = text.splitlines()
    assert lines[0] == ("podnotifier/db-0-quiesce-x7k2p Failed (Timeout) in 31ms: 1/2 "
                        "containers failed (db: Timeout)")
    assert lines[2].split() == ["db", "Failed", "Timeout", "1.4s", "timed", "out", "after", "1s"]
    assert lines[3].split() == ["app", "Succeeded", "0", "1.4s", "-"]


def test_wide_adds_the_reason_and_the_tails() -> None:
    text = output.record_result(record("Failed", reason="NonZeroExitCode", containers=[
        container("db", "Failed", reason="NonZeroExitCode", exitCode=3,
                  stdout="\n".join(f"line {i}" for i in range(15)) + "\n", stdoutTruncated=True,
                  message="exit status 3")]), wide=True)
    lines = text.splitlines()
    assert lines[1].split() == ["CONTAINER", "PHASE", "REASON", "EXIT", "DURATION", "OUTPUT"]
    assert lines[2].split() == ["db", "Failed", "NonZeroExitCode", "3", "1.4s", "line", "14"]
    assert lines[3] == "--- db stdout, last 10 lines (truncated):"
    assert lines[4:14] == [f"    line {i}" for i in range(5, 15)]
    assert lines[14] == "--- db message: exit status 3"


def test_an_http_notifier_shows_its_status_code_and_the_head_of_its_answer() -> None:
    text = output.record_result(record(
        "Failed", reason="NonSuccessStatusCode", containers=[
            container("web", "Failed", reason="NonSuccessStatusCode", statusCode=503,
                      responseBody="draining\n" + "".join(f"line {i}\n" for i in range(12)),
                      responseBodyTruncated=True, message="POST ...: the pod answered 503")]),
        wide=True)
    lines = text.splitlines()
    assert lines[2].split() == ["web", "Failed", "NonSuccessStatusCode", "HTTP", "503", "1.4s",
                                "line", "11"]
    assert lines[3] == "--- web responseBody, first 10 lines (truncated):"
    assert lines[4:6] == ["    draining", "    line 0"]
    ok = output.record_result(record(containers=[
        container("web", "Succeeded", reason="Completed", statusCode=200,
                  responseBody="reloaded\n")]))
    assert ok.splitlines()[2].split() == ["web", "Succeeded", "HTTP", "200", "1.4s", "reloaded"]


def test_a_held_run_shows_the_tail_of_what_its_command_printed_so_far() -> None:
    held = {"metadata": {"name": "db-0-backup-q8x2z"}, "status": {
        "phase": "Held", "startTime": "2026-12-01T08:00:00.100Z", "containers": [
            {"name": "db", "phase": "Held", "startTime": "2026-12-01T08:00:00.100Z",
             "pid": 41, "stdout": "lsn 0/3000028\nready\n", "stderr": ""}]}}
    lines = output.record_result(held).splitlines()
    assert lines[0] == "podnotifier/db-0-backup-q8x2z Held"
    assert lines[2].split() == ["db", "Held", "-", "-", "ready"]
    assert lines[3:] == ["--- db stdout, last 2 lines:", "    lsn 0/3000028", "    ready"]


def test_long_output_is_shortened_and_pending_runs_have_no_duration() -> None:
    text = output.record_result({"metadata": {"name": "r"}, "status": {
        "phase": "Running", "containers": [{"name": "db", "phase": "Running",
                                            "stdout": "x" * 200}]}})
    lines = text.splitlines()
    assert lines[0] == "podnotifier/r Running"
    assert lines[2].split()[:4] == ["db", "Running", "-", "-"]
    assert lines[2].endswith("x" * 57 + "...")


def notification(phase: str, **counts: int) -> dict[str, Any]:
    return {"metadata": {"name": "quiesce-abcde"},
            "status": {"phase": phase, "counts": {"total": 10, **counts}}}


def test_plain_progress_lines_name_every_count() -> None:
    assert output.progress_line(notification(
        "Running", succeeded=4, failed=1, skipped=1, running=2, pending=2)) == (
        "notification/quiesce-abcde Running: 6/10 done (4 succeeded, 1 failed, 1 skipped, "
        "2 running, 2 pending)")


def test_progress_bar_shows_succeeded_failed_and_what_is_left() -> None:
    bar = output.progress_bar(notification("Running", succeeded=4, failed=1, running=2),
                              width=10)
    assert bar == "[====x     ] 5/10 done: 4 succeeded, 1 failed, 2 running"
    assert output.progress_bar(notification("Running", skipped=1), width=10).endswith(
        "1/10 done: 0 succeeded, 0 failed, 0 running, 1 skipped")
    assert output.progress_bar(notification("Running", succeeded=10), width=10).startswith(
        "[==========] 10/10")
    assert output.progress_bar({"metadata": {"name": "n"}, "status": {}}, width=4).startswith(
        "[    ] 0/0")


def test_progress_bar_with_a_failure_and_no_success_does_not_read_as_a_success() -> None:
    """The issue's case: 3 pods, one failed, one running, none succeeded. The old bar read
    ``1/3 succeeded 0 failed 1 running 1``, as if one pod had succeeded."""
    obj = {"metadata": {"name": "q"},
           "status": {"counts": {"total": 3, "failed": 1, "running": 1, "pending": 1}}}
    text = output.progress_bar(obj, width=3)
    assert text == "[x  ] 1/3 done: 0 succeeded, 1 failed, 1 running"
    assert "1/3 succeeded" not in text


def test_summary_carries_the_failed_condition() -> None:
    obj = notification("Failed", succeeded=8, failed=2, rolledBack=8)
    obj["status"].update(startTime="2026-12-01T08:00:00.000Z",
                         completionTime="2026-12-01T08:00:02.500Z",
                         conditions=[{"type": "Failed", "status": "True",
                                      "reason": "PodsFailed",
                                      "message": "2 of 10 pods failed (Untrusted: 2)"}])
    assert output.notification_summary(obj).splitlines() == [
        "notification/quiesce-abcde Failed: 8 succeeded, 2 failed, 0 skipped of 10 pods, "
        "8 rolled back in 2.5s",
        "PodsFailed: 2 of 10 pods failed (Untrusted: 2)"]


def test_failed_pods_from_their_records_and_those_without_one() -> None:
    failed = [record("Failed", reason="NonZeroExitCode", message="db: exit code 7",
                     containers=[container("db", "Failed", exitCode=7)])]
    assert output.failed_pods(failed, 3).splitlines() == [
        "Failed pods:",
        "POD    REASON            EXIT   MESSAGE",
        "db-0   NonZeroExitCode   7      db: exit code 7",
        "2 pods failed before a run started (no record; the reasons are counted above)"]
    assert output.failed_pods([], 1) == (
        "1 pod failed before a run started (no record; the reasons are counted above)")


def test_names_of_dry_run_answers_fall_back_to_generate_name() -> None:
    obj = {"metadata": {"generateName": "quiesce-"}}
    assert output.notification_name(obj) == "notification/quiesce-"
    assert output.full_name("podnotifier", {"metadata": {"name": "x"}}) == (
        "podnotifier.notifier.x-k8s.io/x")


def test_terminal_redraws_in_place() -> None:
    stream = io.StringIO()
    terminal = Terminal(stream, tty=True)
    terminal.redraw("one")
    terminal.redraw("two")
    terminal.end_redraw()
    assert stream.getvalue() == "\r\033[Kone\r\033[Ktwo\n"


def test_dump_yaml_and_json() -> None:
    assert output.dump({"b": 1, "a": [2]}, "yaml") == "b: 1\na:\n- 2"
    assert output.dump({"b": 1}, "json") == '{\n    "b": 1\n}'


def test_summary_says_how_many_pods_may_have_run_an_undo_step_twice() -> None:
    obj = notification("Succeeded", succeeded=10, released=10, mayHaveRunTwice=2)
    assert output.notification_summary(obj) == (
        "notification/quiesce-abcde Succeeded: 10 succeeded, 0 failed, 0 skipped of 10 pods, "
        "10 released (2 may have run their rollback or release twice)")
