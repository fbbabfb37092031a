"""Table output: kubectl's human durations, the PodNotifier columns and cells, Table shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apiserver.api.status import status_body
from apiserver.api.tables import (
    NOTIFICATION_TABLE,
    PODNOTIFIER_TABLE,
    Column,
    IncludeObject,
    TableConvertor,
    age,
    field,
    human_duration,
    partial_object_metadata,
)
from apiserver.errors import APIError

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
MINUTE, HOUR, DAY = 60, 3600, 86400


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def podnotifier(*, status: dict | None = None, created_ago: float = 30) -> dict:
    return {
        "apiVersion": "notifier.x-k8s.io/v1alpha1",
        "kind": "PodNotifier",
        "metadata": {"name": "web-0-quiesce-x7k2p", "namespace": "ns", "uid": "u1",
                     "resourceVersion": "7", "creationTimestamp": ts(created_ago),
                     "labels": {"notifier.x-k8s.io/pod": "web-0"}},
        "spec": {"podName": "web-0", "notifier": "quiesce"},
        "status": status if status is not None else {"phase": "Pending"},
    }


def cells(obj: dict) -> dict:
    names = [column.name for column in PODNOTIFIER_TABLE.columns]
    return dict(zip(names, PODNOTIFIER_TABLE.row(obj, now=NOW)["cells"], strict=True))


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"),
    (1.9, "1s"),
    (-0.5, "0s"),
    (-1.5, "0s"),
    (-2, "<invalid>"),
    (59, "59s"),
    (119, "119s"),
    (120, "2m"),
    (125, "2m5s"),
    (9 * MINUTE + 59, "9m59s"),
    (10 * MINUTE + 30, "10m"),
    (179 * MINUTE + 59, "179m"),
    (3 * HOUR, "3h"),
    (3 * HOUR + 5 * MINUTE + 40, "3h5m"),
    (7 * HOUR + 59 * MINUTE, "7h59m"),
    (8 * HOUR + 30 * MINUTE, "8h"),
    (47 * HOUR + 59 * MINUTE, "47h"),
    (48 * HOUR, "2d"),
    (7 * DAY + 23 * HOUR, "7d23h"),
    (8 * DAY + 5 * HOUR, "8d"),
    (729 * DAY, "729d"),
    (730 * DAY, "2y"),
    (745 * DAY, "2y15d"),
    (8 * 365 * DAY + 100 * DAY, "8y"),
])
def test_human_duration_matches_kubectl(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_age_from_creation_timestamp() -> None:
    assert age(podnotifier(created_ago=5), NOW) == "5s"
    assert age(podnotifier(created_ago=3 * MINUTE), NOW) == "3m"
    assert age(podnotifier(created_ago=2 * DAY), NOW) == "2d"
    assert age({"metadata": {}}, NOW) == "<unknown>"


def test_podnotifier_column_definitions() -> None:
    definitions = PODNOTIFIER_TABLE.column_definitions()

    assert [d["name"] for d in definitions] == [
        "Name", "Pod", "Notifier", "Phase", "Exit", "Duration", "Age", "Reason"]
    assert definitions[0]["format"] == "name"
    assert all(set(d) == {"name", "type", "format", "description", "priority"}
               for d in definitions)
    assert all(d["type"] == "string" and d["description"] for d in definitions)
    assert [d["priority"] for d in definitions] == [0, 0, 0, 0, 0, 0, 0, 1]


def test_pending_record_cells() -> None:
    assert cells(podnotifier(created_ago=5)) == {
        "Name": "web-0-quiesce-x7k2p", "Pod": "web-0", "Notifier": "quiesce",
        "Phase": "Pending", "Exit": "-", "Duration": "", "Age": "5s", "Reason": ""}


def test_running_single_container_counts_duration_to_now() -> None:
    row = cells(podnotifier(status={
        "phase": "Running", "startTime": ts(125),
        "containers": [{"name": "db", "phase": "Running", "startTime": ts(125)}]}))

    assert row["Phase"] == "Running"
    assert row["Exit"] == "-"
    assert row["Duration"] == "2m5s"


def test_finished_single_container_shows_exit_code_and_run_time() -> None:
    row = cells(podnotifier(created_ago=3 * HOUR, status={
        "phase": "Failed", "reason": "NonZeroExitCode",
        "startTime": ts(2 * HOUR), "completionTime": ts(2 * HOUR - 3),
        "containers": [{"name": "db", "phase": "Failed", "exitCode": 3}]}))

    assert (row["Phase"], row["Exit"], row["Duration"], row["Age"], row["Reason"]) == (
        "Failed", "3", "3s", "3h", "NonZeroExitCode")


def test_exit_code_zero_is_shown() -> None:
    row = cells(podnotifier(status={
        "phase": "Succeeded", "containers": [{"name": "db", "phase": "Succeeded",
                                              "exitCode": 0}]}))

    assert row["Exit"] == "0"


def test_several_containers_show_finished_over_total() -> None:
    row = cells(podnotifier(status={"phase": "Running", "containers": [
        {"name": "a", "phase": "Succeeded", "exitCode": 0},
        {"name": "b", "phase": "Succeeded", "exitCode": 0},
        {"name": "c", "phase": "Running"},
    ]}))

    assert row["Exit"] == "2/3"


def test_a_failed_container_shows_its_exit_code_not_finished_over_total() -> None:
    """Two containers, one exited 7: EXIT says 7, not 2/2 (which reads like success)."""
    row = cells(podnotifier(status={"phase": "Failed", "containers": [
        {"name": "a", "phase": "Succeeded", "exitCode": 0},
        {"name": "b", "phase": "Failed", "exitCode": 7},
        {"name": "c", "phase": "Failed", "exitCode": 9},
    ]}))

    assert row["Exit"] == "7"


@pytest.mark.parametrize(("container", "shown"), [
    ({"reason": "Timeout"}, "Timeout"),
    ({"reason": "ExecFailed", "exitCode": 0}, "ExecFailed"),
    ({}, "Failed"),
])
def test_a_failed_container_without_exit_code_shows_its_reason(container: dict, shown: str
                                                                ) -> None:
    row = cells(podnotifier(status={"phase": "Failed", "containers": [
        {"name": "a", "phase": "Succeeded", "exitCode": 0},
        {"name": "b", "phase": "Failed", **container}]}))

    assert row["Exit"] == shown


def ms(seconds_ago: float) -> str:
    """A status time as the server writes it: RFC 3339 with milliseconds."""
    moment = NOW - timedelta(seconds=seconds_ago)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(("seconds", "text"), [
    (0.027, "27ms"), (0.0, "0ms"), (0.999, "999ms"), (1.0, "1s"), (1.45, "1.4s"),
    (9.99, "9.9s"), (10.2, "10s"), (59, "59s"), (123, "2m3s"),
])
def test_duration_is_precise_below_ten_seconds(seconds: float, text: str) -> None:
    row = cells(podnotifier(status={
        "phase": "Succeeded", "startTime": ms(3600), "completionTime": ms(3600 - seconds),
        "containers": [{"name": "db", "phase": "Succeeded", "exitCode": 0}]}))

    assert row["Duration"] == text


def test_running_duration_counts_milliseconds_to_now() -> None:
    row = cells(podnotifier(status={"phase": "Running", "startTime": ms(0.25)}))

    assert row["Duration"] == "250ms"


def test_malformed_status_does_not_break_the_row() -> None:
    obj = podnotifier(status={"containers": "nonsense", "startTime": "not a time"})
    obj["spec"] = None

    row = cells(obj)

    assert (row["Pod"], row["Phase"], row["Exit"], row["Duration"]) == ("", "", "-", "")


def test_row_object_is_partial_object_metadata_by_default() -> None:
    obj = podnotifier()

    row = PODNOTIFIER_TABLE.row(obj, now=NOW)

    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
    assert partial_object_metadata(obj) == row["object"]


def test_include_object_object_and_none() -> None:
    obj = podnotifier()

    assert PODNOTIFIER_TABLE.row(obj, include=IncludeObject.OBJECT, now=NOW)["object"] == obj
    assert PODNOTIFIER_TABLE.row(obj, include=IncludeObject.NONE, now=NOW)["object"] is None


def test_include_object_parsing() -> None:
    assert IncludeObject.parse(None) is IncludeObject.METADATA
    assert IncludeObject.parse("") is IncludeObject.METADATA
    assert IncludeObject.parse("Object") is IncludeObject.OBJECT
    assert IncludeObject.parse("None") is IncludeObject.NONE
    with pytest.raises(APIError) as raised:
        IncludeObject.parse("object")
    assert raised.value.code == 400
    assert "includeObject" in status_body(raised.value)["message"]


def test_table_shape_with_list_metadata() -> None:
    table = PODNOTIFIER_TABLE.table([podnotifier(), podnotifier()], resource_version="42",
                                    continue_token="tok", now=NOW)

    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42", "continue": "tok"}
    assert table["columnDefinitions"] == PODNOTIFIER_TABLE.column_definitions()
    assert len(table["rows"]) == 2


def test_table_without_headers_has_null_column_definitions() -> None:
    table = PODNOTIFIER_TABLE.table([podnotifier()], headers=False, now=NOW)

    assert table["columnDefinitions"] is None
    assert table["metadata"] == {}
    assert table["rows"][0]["cells"][0] == "web-0-quiesce-x7k2p"


def test_generic_convertor_with_other_columns() -> None:
    convertor = TableConvertor((
        Column("Name", field("metadata", "name"), format="name"),
        Column("Total", field("status", "counts", "total", default="0"), type="integer"),
    ))

    row = convertor.row({"metadata": {"name": "n"}, "status": {"counts": {"total": 4}}}, now=NOW)
    empty = convertor.row({"metadata": {"name": "m"}}, now=NOW)

    assert row["cells"] == ["n", 4]
    assert empty["cells"] == ["m", "0"]
    assert convertor.column_definitions()[1]["type"] == "integer"


def test_notification_table_columns_and_cells() -> None:
    obj = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
           "metadata": {"name": "pre-snapshot", "namespace": "prod",
                        "creationTimestamp": "2026-11-30T08:00:00Z"},
           "spec": {"notifier": "quiesce"},
           "status": {"phase": "Failed", "counts": {"total": 5, "succeeded": 3, "failed": 1,
                                                    "skipped": 1, "rolledBack": 3}}}
    table = NOTIFICATION_TABLE.table([obj])
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:7] == ["Name", "Notifier", "Phase", "Succeeded/Total", "Failed", "Window",
                         "Age"]
    cells = table["rows"][0]["cells"]
    assert cells[:6] == ["pre-snapshot", "quiesce", "Failed", "3/5", 1, ""]
    assert cells[7:] == [1, 3]
    assert [c["priority"] for c in table["columnDefinitions"]][5:] == [0, 0, 1, 1]


def test_notification_table_before_any_status() -> None:
    row = NOTIFICATION_TABLE.row({"metadata": {"name": "n"}, "spec": {"notifier": "q"}})
    assert row["cells"][2:6] == ["", "0/0", 0, ""]


def windowed(phase: str, **window: str) -> dict:
    return {"metadata": {"name": "snap"},
            "spec": {"notifier": "quiesce", "release": {"maxHoldSeconds": 600}},
            "status": {"phase": phase, "window": window}}


@pytest.mark.parametrize(("obj", "cell"), [
    (windowed("Running"), "quiescing"),
    (windowed("Running", quiescedTime=ts(12)), "open 12s"),
    (windowed("Running", quiescedTime=ts(3 * MINUTE)), "open 3m"),
    (windowed("Succeeded", quiescedTime=ts(10), releaseTime=ts(7), unquiescedTime=ts(6)),
     "closed 3s"),
    (windowed("Failed"), "never opened"),
    (windowed("Running", releaseTime=ts(1)), "never opened"),
    ({"metadata": {"name": "plain"}, "spec": {"notifier": "reload"},
      "status": {"phase": "Running"}}, ""),
])
def test_the_window_column_shows_an_open_window_and_how_long(obj: dict, cell: str) -> None:
    names = [c["name"] for c in NOTIFICATION_TABLE.column_definitions()]
    assert NOTIFICATION_TABLE.row(obj, now=NOW)["cells"][names.index("Window")] == cell
