"""PodNotifier records: the new object, status transitions, container results, summaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from apiserver.api.types import CONDITION_TYPES, PODNOTIFIER_REASONS, PodNotifierStatus
from apiserver.api.validation import dns1123_subdomain_errors
from apiserver.authn.user import UserInfo
from apiserver.notifier import records
from apiserver.notifier.exec_protocol import ExecReason
from apiserver.notifier.exec_stream import ExecResult
from apiserver.notifier.http_action import HttpReason

STARTED = datetime(2026, 11, 30, 8, 11, 56, 853000, tzinfo=UTC)
USER = UserInfo("backup-bot", uid="u-1", groups=["ops", "system:authenticated"])


def ask(**overrides: Any) -> records.RecordRequest:
    fields: dict[str, Any] = {
        "namespace": "prod", "pod": "db-0", "pod_uid": "pod-uid-1", "notifier": "quiesce",
        "containers": ["db", "sidecar"], "requested_containers": None, "timeout_seconds": None,
        "ttl_seconds_after_finished": 3600, "name": "", "generate_name": "", "labels": {},
        "requested_by": USER,
    }
    fields.update(overrides)
    return records.RecordRequest(**fields)


def result(exit_code: int | None = 0, *, stdout: bytes = b"", stderr: bytes = b"",
           reason: ExecReason = ExecReason.COMPLETED, message: str = "",
           stdout_truncated: bool = False, stderr_truncated: bool = False) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr,
                      stdout_truncated=stdout_truncated, stderr_truncated=stderr_truncated,
                      reason=reason, message=message, started=STARTED,
                      finished=STARTED + timedelta(milliseconds=250))


# new_record


def test_new_record_shape() -> None:
    record = records.new_record(ask(labels={"team": "db"}))

    assert record["apiVersion"] == "notifier.x-k8s.io/v1alpha1"
    assert record["kind"] == "PodNotifier"
    assert record["metadata"] == {
        "namespace": "prod",
        "labels": {"team": "db", "notifier.x-k8s.io/pod": "db-0"},
        "generateName": "db-0-quiesce-",
    }
    assert record["spec"] == {
        "podName": "db-0", "podUID": "pod-uid-1", "notifier": "quiesce",
        "ttlSecondsAfterFinished": 3600,
        "requestedBy": {"username": "backup-bot", "uid": "u-1",
                        "groups": ["ops", "system:authenticated"]},
    }
    assert record["status"] == {"phase": "Pending", "containers": [
        {"name": "db", "phase": "Pending"}, {"name": "sidecar", "phase": "Pending"}]}


def test_new_record_requested_by_groups_is_a_copy() -> None:
    record = records.new_record(ask())
    record["spec"]["requestedBy"]["groups"].append("extra")
    assert USER.groups == ["ops", "system:authenticated"]


def test_new_record_name_wins_over_generate_name() -> None:
    record = records.new_record(ask(name="my-run", generate_name="ignored-"))
    assert record["metadata"]["name"] == "my-run"
    assert "generateName" not in record["metadata"]


def test_new_record_keeps_requested_generate_name() -> None:
    record = records.new_record(ask(generate_name="nightly-"))
    assert record["metadata"]["generateName"] == "nightly-"
    assert "name" not in record["metadata"]


def test_new_record_optional_spec_fields() -> None:
    record = records.new_record(ask(requested_containers=["db"], containers=["db"],
                                    timeout_seconds=60, ttl_seconds_after_finished=0))
    assert record["spec"]["containers"] == ["db"]
    assert record["spec"]["timeoutSeconds"] == 60
    assert record["spec"]["ttlSecondsAfterFinished"] == 0
    assert record["status"]["containers"] == [{"name": "db", "phase": "Pending"}]


def test_new_record_without_optional_spec_fields() -> None:
    spec = records.new_record(ask(requested_containers=[]))["spec"]
    assert "containers" not in spec
    assert "timeoutSeconds" not in spec


def test_new_record_pod_label_wins_over_a_request_label() -> None:
    record = records.new_record(ask(labels={records.POD_LABEL: "other"}))
    assert record["metadata"]["labels"][records.POD_LABEL] == "db-0"


@pytest.mark.parametrize("pod", ["a" * 64, "a" * 63 + ".b", "web." + "x" * 100])
def test_new_record_long_pod_name_gets_no_pod_label(pod: str) -> None:
    record = records.new_record(ask(pod=pod, labels={"team": "db"}))
    assert record["metadata"]["labels"] == {"team": "db"}
    assert record["spec"]["podName"] == pod


def test_pod_label_at_the_limit() -> None:
    assert records.pod_label("a" * 63) == {records.POD_LABEL: "a" * 63}
    assert records.pod_label("web.db-0") == {records.POD_LABEL: "web.db-0"}
    assert records.pod_label("a" * 64) == {}


# generate_name


@pytest.mark.parametrize(("notifier", "expected"), [
    ("quiesce", "db-0-quiesce-"),
    ("example.com/Quiesce", "db-0-quiesce-"),
    ("example.com/Flush_Logs.Now", "db-0-flush-logs-now-"),
    ("RELOAD", "db-0-reload-"),
    ("example.com/_.", "db-0-notify-"),
    ("-x-", "db-0-x-"),
])
def test_generate_name_sanitises_the_notifier(notifier: str, expected: str) -> None:
    assert records.generate_name("db-0", notifier) == expected


def test_generate_name_bounds_the_prefix() -> None:
    prefix = records.generate_name("p" * 253, "n" * 63)
    assert prefix == "p" * 200 + "-" + "n" * 40 + "-"
    assert len(prefix) + 5 <= 253


@pytest.mark.parametrize("pod", [
    "db-0", "web.db-0", "a" * 253, "a" * 199 + "." + "b" * 53, "a" * 198 + "-b." + "c" * 52,
])
def test_generate_name_makes_valid_names(pod: str) -> None:
    name = records.generate_name(pod, "example.com/Quiesce") + "x7k2p"
    assert len(name) <= 253
    assert dns1123_subdomain_errors(name) == [], name


# mark_running


def test_mark_running_sets_phase_and_start_times() -> None:
    record = records.new_record(ask())
    at = records.rfc3339(STARTED)

    returned = records.mark_running(record, at)

    assert returned is record
    assert record["status"]["phase"] == "Running"
    assert record["status"]["startTime"] == "2026-11-30T08:11:56.853Z"
    assert record["status"]["containers"] == [
        {"name": "db", "phase": "Running", "startTime": at},
        {"name": "sidecar", "phase": "Running", "startTime": at}]


def test_rfc3339_keeps_milliseconds_in_utc() -> None:
    moment = datetime(2026, 1, 2, 5, 4, 5, 7000, tzinfo=timezone(timedelta(hours=2)))
    assert records.rfc3339(moment) == "2026-01-02T03:04:05.007Z"
    assert records.now().endswith("Z")


# container_result


def test_container_result_success() -> None:
    entry = records.container_result("db", "containerd://abc", result(0, stdout=b"ok\n"))
    assert entry == {
        "name": "db", "containerID": "containerd://abc", "phase": "Succeeded",
        "startTime": "2026-11-30T08:11:56.853Z", "completionTime": "2026-11-30T08:11:57.103Z",
        "reason": "Completed", "message": "", "stdout": "ok\n", "stderr": "",
        "stdoutTruncated": False, "stderrTruncated": False, "exitCode": 0,
    }


def test_container_result_non_zero_exit() -> None:
    entry = records.container_result("db", "", result(
        3, stderr=b"boom", reason=ExecReason.NON_ZERO_EXIT_CODE, message="exit status 3"))
    assert entry["phase"] == "Failed"
    assert entry["exitCode"] == 3
    assert entry["reason"] == "NonZeroExitCode"
    assert entry["message"] == "exit status 3"
    assert entry["stderr"] == "boom"
    assert "containerID" not in entry


def test_container_result_without_exit_code() -> None:
    entry = records.container_result("db", "cri://x", result(
        None, reason=ExecReason.TIMEOUT, message="timed out after 5s"))
    assert entry["phase"] == "Failed"
    assert "exitCode" not in entry
    assert entry["reason"] == "Timeout"
    assert type(entry["reason"]) is str


def test_container_result_truncation_flags() -> None:
    entry = records.container_result("db", "", result(
        0, stdout=b"tail", stdout_truncated=True, stderr_truncated=False))
    assert entry["stdoutTruncated"] is True
    assert entry["stderrTruncated"] is False
    entry = records.container_result("db", "", result(0, stderr_truncated=True))
    assert entry["stdoutTruncated"] is False
    assert entry["stderrTruncated"] is True


def test_container_result_replaces_invalid_utf8() -> None:
    entry = records.container_result("db", "", result(
        0, stdout=b"ok \xff\xfe end", stderr="caf\u00e9".encode()[:-1]))
    assert entry["stdout"] == "ok \ufffd\ufffd end"
    assert entry["stderr"] == "caf\ufffd"


def test_container_failure() -> None:
    entry = records.container_failure("db", "PodDeleted", "the pod was deleted", "T",
                                      container_id="cri://1")
    assert entry == {"name": "db", "phase": "Failed", "completionTime": "T",
                     "reason": "PodDeleted", "message": "the pod was deleted",
                     "containerID": "cri://1"}
    assert "containerID" not in records.container_failure("db", "X", "m", "T")


# set_container


def test_set_container_keeps_start_time_when_entry_has_none() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    records.set_container(record, records.container_failure("db", "Timeout", "slow", "T1"))

    db = record["status"]["containers"][0]
    assert db["startTime"] == "T0"
    assert db["completionTime"] == "T1"
    assert db["phase"] == "Failed"
    assert record["status"]["containers"][1] == {"name": "sidecar", "phase": "Running",
                                                 "startTime": "T0"}


def test_set_container_prefers_the_entry_start_time() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    records.set_container(record, records.container_result("sidecar", "", result(0)))
    sidecar = record["status"]["containers"][1]
    assert sidecar["startTime"] == "2026-11-30T08:11:56.853Z"
    assert sidecar["phase"] == "Succeeded"
    assert len(record["status"]["containers"]) == 2


def test_set_container_appends_unknown_container() -> None:
    record: dict[str, Any] = {}
    records.set_container(record, {"name": "db", "phase": "Succeeded"})
    assert record["status"]["containers"] == [{"name": "db", "phase": "Succeeded"}]


# finish


def succeeded(name: str) -> dict[str, Any]:
    return records.container_result(name, "", result(0))


def failed(name: str, code: int) -> dict[str, Any]:
    return records.container_result(name, "", result(
        code, reason=ExecReason.NON_ZERO_EXIT_CODE, message=f"exit status {code}"))


def test_finish_succeeded_when_all_succeeded() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    for name in ("db", "sidecar"):
        records.set_container(record, succeeded(name))

    records.finish(record, "T9")

    status = record["status"]
    assert status["phase"] == "Succeeded"
    assert status["reason"] == "Completed"
    assert status["message"] == "2/2 containers succeeded"
    assert status["completionTime"] == "T9"
    assert status["startTime"] == "T0"
    assert status["conditions"] == [{
        "type": "Complete", "status": "True", "reason": "Completed",
        "message": "2/2 containers succeeded", "lastTransitionTime": "T9"}]
    assert records.is_finished(record)


def test_finish_failed_when_one_failed() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    records.set_container(record, succeeded("db"))
    records.set_container(record, failed("sidecar", 2))

    records.finish(record, "T9")

    status = record["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "NonZeroExitCode"
    assert status["message"] == "1/2 containers failed (sidecar: exit code 2)"
    assert status["containers"][0]["phase"] == "Succeeded"
    assert status["conditions"] == [{
        "type": "Failed", "status": "True", "reason": "NonZeroExitCode",
        "message": "1/2 containers failed (sidecar: exit code 2)", "lastTransitionTime": "T9"}]


def test_finish_unfinished_containers_get_the_reason() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    records.set_container(record, succeeded("db"))

    records.finish(record, "T9", records.POD_DELETED, "the pod was deleted")

    db, sidecar = record["status"]["containers"]
    assert db["phase"] == "Succeeded"
    assert sidecar == {"name": "sidecar", "phase": "Failed", "startTime": "T0",
                       "completionTime": "T9", "reason": "PodDeleted",
                       "message": "the pod was deleted"}
    assert record["status"]["phase"] == "Failed"
    assert record["status"]["reason"] == "PodDeleted"
    assert record["status"]["message"] == "the pod was deleted"


def test_finish_without_reason_marks_unfinished_interrupted() -> None:
    record = records.new_record(ask(containers=["db"]))

    records.finish(record, "T9")

    status = record["status"]
    assert status["containers"][0]["reason"] == "Interrupted"
    assert status["containers"][0]["message"] == "did not finish"
    assert status["phase"] == "Failed"
    assert status["reason"] == "Interrupted"
    assert status["message"] == "1/1 containers failed (db: Interrupted)"
    assert status["startTime"] == "T9"


def test_finish_with_no_containers_is_failed() -> None:
    record = records.new_record(ask(containers=[]))
    records.finish(record, "T9", records.POD_NOT_RUNNING, "pod is Pending")
    assert record["status"]["phase"] == "Failed"
    assert record["status"]["reason"] == "PodNotRunning"
    (condition,) = record["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "PodNotRunning")


def test_finish_again_replaces_the_condition() -> None:
    """Recovery finishes a record that may already hold a condition: one per type, never two."""
    record = records.new_record(ask(containers=["db"]))
    records.set_container(record, succeeded("db"))
    records.finish(record, "T9")
    records.finish(record, "T10")
    assert [c["type"] for c in record["status"]["conditions"]] == ["Complete"]
    assert record["status"]["conditions"][0]["lastTransitionTime"] == "T10"


def test_finished_record_matches_its_definition() -> None:
    """The conditions written are what the typed definition (and so OpenAPI) declares."""
    record = records.new_record(ask(containers=["db"]))
    records.set_container(record, failed("db", 7))
    records.finish(record, "2026-11-30T08:11:57.103Z")
    status = PodNotifierStatus.model_validate(record["status"], strict=False)
    assert status.conditions is not None
    assert status.conditions[0].type in CONDITION_TYPES
    assert status.reason in PODNOTIFIER_REASONS


def test_finish_summarises_more_than_three_failures() -> None:
    names = ["a", "b", "c", "d", "e", "ok"]
    record = records.mark_running(records.new_record(ask(containers=names)), "T0")
    for code, name in enumerate(names[:4], start=1):
        records.set_container(record, failed(name, code))
    records.set_container(record, records.container_failure("e", "Timeout", "slow", "T5"))
    records.set_container(record, succeeded("ok"))

    records.finish(record, "T9")

    assert record["status"]["message"] == (
        "5/6 containers failed (a: exit code 1; b: exit code 2; c: exit code 3 and 2 more)")
    assert record["status"]["reason"] == "NonZeroExitCode"


def test_finish_reason_defaults_to_first_failed_container() -> None:
    record = records.mark_running(records.new_record(ask()), "T0")
    records.set_container(record, records.container_failure("db", "ContainerNotRunning",
                                                            "not running", "T1"))
    records.set_container(record, failed("sidecar", 1))
    records.finish(record, "T9")
    assert record["status"]["reason"] == "ContainerNotRunning"
    assert record["status"]["message"] == (
        "2/2 containers failed (db: ContainerNotRunning; sidecar: exit code 1)")


def test_is_finished() -> None:
    assert not records.is_finished({"status": {"phase": "Running"}})
    assert not records.is_finished({})
    assert records.is_finished({"status": {"phase": "Failed"}})


# explain_signal_failure


def test_signal_failure_without_kill_explains_the_image() -> None:
    entry = {"name": "db", "phase": "Failed", "exitCode": 127,
             "message": "sh: kill: not found"}
    explained = records.explain_signal_failure(entry)
    assert explained["message"].startswith(records.NO_KILL_HINT)
    assert explained["message"].endswith("sh: kill: not found")


def test_signal_exec_error_naming_kill_is_explained() -> None:
    entry = {"name": "db", "phase": "Failed", "reason": "ExecFailed",
             "message": 'exec: "kill": executable file not found in $PATH'}
    assert records.explain_signal_failure(entry)["message"].startswith(records.NO_KILL_HINT)


def test_other_signal_failures_are_left_alone() -> None:
    entry = {"name": "db", "phase": "Failed", "exitCode": 1, "message": "kill: (1) - No such"}
    assert records.explain_signal_failure(entry) == entry
    ok = {"name": "db", "phase": "Succeeded", "exitCode": 0, "message": ""}
    assert records.explain_signal_failure(ok) == ok


def test_every_reason_the_server_sets_is_documented() -> None:
    """The reasons the definition lists (and kubectl explain prints) are exactly those the
    exec, the http action, the records and the runner set."""
    set_by_server = {*map(str, ExecReason), *map(str, HttpReason), records.COMPLETED,
                     records.INTERRUPTED, records.POD_DELETED, records.POD_NOT_RUNNING,
                     records.CONTAINER_NOT_RUNNING, "InternalError", records.RELEASED,
                     records.HOLD_EXPIRED, records.HOLD_ENDED, records.NOT_READY,
                     records.STOP_FAILED}
    assert set(PODNOTIFIER_REASONS) == set_by_server
