"""The fan-out's pure parts, without a run: the status builders (apiserver/fanout/status.py)
and the window's own ends (apiserver/fanout/window.py `window_ends`)."""

from __future__ import annotations

from apiserver.fanout import reasons, scope, status
from apiserver.fanout.scope import ScopedPod
from apiserver.fanout.status import RunFacts
from apiserver.fanout.window import window_ends
from apiserver.notifier.errors import RunConflict
from apiserver.timestamps import parse_timestamp

STARTED = "2026-12-03T10:00:00Z"


def pod(name: str, state: str, reason: str = "", **more: str) -> ScopedPod:
    return ScopedPod(name, f"uid-{name}", state, reason=reason, **more)  # type: ignore[arg-type]


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    before = {"type": "Quiesced", "status": "True", "reason": "r", "message": "m",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}
    same = status.condition_now(before, "Quiesced", "r2", "m2", now=STARTED)
    flipped = status.condition_now(before, "Quiesced", "r2", "m2", now=STARTED, status="False")
    assert same["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same["reason"] == "r2" and same["message"] == "m2"
    assert flipped["lastTransitionTime"] == STARTED


def test_a_condition_that_changes_takes_the_facts_time() -> None:
    waiting = status.waiting_for_pods("db", "app=pg", "2026-01-01T00:00:00Z")
    joined = status.conditions([waiting], RunFacts("quiesce", [pod("a", scope.PENDING)],
                                                   now=STARTED))[0]
    assert (joined["status"], joined["lastTransitionTime"]) == ("False", STARTED)
    final = status.final_condition(scope.OUTCOME_SUCCEEDED, reasons.PODS_SUCCEEDED, "",
                                   RunFacts("quiesce", [pod("a", scope.SUCCEEDED)], now=STARTED))
    assert final["lastTransitionTime"] == STARTED


def test_skipped_pods_are_named_up_to_five_and_counted_beyond() -> None:
    pods = [pod(f"p{i}", scope.SKIPPED) for i in range(7)] + [pod("q", scope.SUCCEEDED)]
    found = status.conditions([], RunFacts("quiesce", pods))
    skipped = next(c for c in found if c["type"] == "PodsSkipped")
    assert skipped["reason"] == reasons.NOT_DECLARED
    assert skipped["message"] == ('7 of 8 pods do not declare notifier "quiesce" and were '
                                  "skipped: p0, p1, p2, p3, p4 and 2 more")


def test_waiting_for_pods_turns_false_when_the_first_pod_joins() -> None:
    waiting = status.waiting_for_pods("db", "app=pg", STARTED)
    assert waiting["status"] == "True" and waiting["reason"] == reasons.NO_PODS_SELECTED
    assert status.conditions([waiting], RunFacts("quiesce", []))[0] == waiting
    joined = status.conditions([waiting], RunFacts("quiesce", [pod("a", scope.PENDING)]))[0]
    assert (joined["status"], joined["reason"]) == ("False", reasons.PODS_JOINED)


def test_quiesced_is_shown_only_for_a_window_and_turns_false_at_the_release() -> None:
    pods = [pod("a", scope.SUCCEEDED), pod("b", scope.SUCCEEDED)]
    assert status.quiesced_condition(None, RunFacts("quiesce", pods)) is None
    assert status.quiesced_condition(None, RunFacts("quiesce", pods, window={})) is None
    open_window = {"quiescedTime": STARTED}
    opened = status.quiesced_condition(None, RunFacts("quiesce", pods, window=open_window))
    assert opened is not None and opened["status"] == "True"
    assert opened["message"] == (f"all 2 pods quiesced at {STARTED}; they stay quiesced until "
                                 "the release")
    closed = status.quiesced_condition(opened, RunFacts("quiesce", pods, window={
        **open_window, "releaseTime": STARTED, "releaseReason": reasons.RELEASED_AFTER_MAX_HOLD}))
    assert closed is not None and closed["status"] == "False"
    assert closed["reason"] == reasons.RELEASED_AFTER_MAX_HOLD


def test_waiting_for_notification_names_the_other_and_clears_once_none_waits() -> None:
    facts = RunFacts("quiesce", [pod("a", scope.PENDING)], waiting={"a": "nightly"})
    waiting = status.waiting_condition(None, facts)
    assert waiting is not None and waiting["status"] == "True"
    assert 'a for notification "nightly"' in waiting["message"]
    assert "1 pod waits" in waiting["message"]
    cleared = status.waiting_condition(waiting, RunFacts("quiesce", facts.pods))
    assert cleared is not None and (cleared["status"], cleared["reason"]) == (
        "False", reasons.NO_POD_WAITING)
    assert status.waiting_condition(None, RunFacts("quiesce", facts.pods)) is None


def test_the_failed_message_counts_reasons_conflicts_and_running_records() -> None:
    pods = [pod("a", scope.FAILED, reasons.QUIESCE_CONFLICT),
            pod("b", scope.FAILED, RunConflict.__name__), pod("c", scope.PENDING),
            pod("d", scope.SUCCEEDED, rollback=scope.ROLLBACK_DONE)]
    facts = RunFacts("quiesce", pods, rollback=True, conflicts={"a": "other"},
                     run_conflicts={"b": "b-quiesce-x"})
    final = status.final_condition(scope.OUTCOME_FAILED, reasons.FAIL_FAST, "why", facts)
    assert (final["type"], final["reason"]) == ("Failed", reasons.FAIL_FAST)
    assert final["message"] == (
        "why; 2 of 4 pods failed (QuiesceConflict: 1, RunConflict: 1); 1 not started; "
        "rolled back 1; being quiesced by another Notification: a by other; "
        'notifier "quiesce" was already running on: b (podnotifier b-quiesce-x)')


def test_the_complete_message_counts_releases_of_a_window() -> None:
    pods = [pod("a", scope.SUCCEEDED, release=scope.RELEASE_DONE),
            pod("b", scope.SUCCEEDED, release=scope.RELEASE_FAILED), pod("c", scope.SKIPPED)]
    final = status.final_condition(scope.OUTCOME_SUCCEEDED, reasons.PODS_SUCCEEDED, "",
                                   RunFacts("quiesce", pods, window={}))
    assert final["type"] == "Complete"
    assert final["message"] == "2 pods succeeded, 1 skipped; released 1 of 2"


def test_pods_whose_undo_step_ran_again_are_counted_and_named() -> None:
    pods = [ScopedPod("a", "uid-a", scope.SUCCEEDED, release=scope.RELEASE_DONE,
                      release_attempts=2),
            ScopedPod("b", "uid-b", scope.SUCCEEDED, release=scope.RELEASE_DONE,
                      release_attempts=1),
            ScopedPod("c", "uid-c", scope.SUCCEEDED, rollback=scope.ROLLBACK_DONE,
                      rollback_attempts=3, release=scope.RELEASE_DONE, release_attempts=1)]
    facts = RunFacts("quiesce", pods, window={})
    assert facts.counts()["mayHaveRunTwice"] == 2
    final = status.final_condition(scope.OUTCOME_SUCCEEDED, reasons.PODS_SUCCEEDED, "", facts)
    assert final["message"] == (
        "3 pods succeeded, 0 skipped; released 3 of 3; 2 may have run their release or "
        "rollback twice (an attempt was interrupted, then run again): a, c")
    once = RunFacts("quiesce", pods[1:2], window={})
    assert "mayHaveRunTwice" not in once.counts()


def test_a_release_request_stored_by_another_replica_is_kept() -> None:
    ours = {"phase": "Running", "window": {"quiescedTime": STARTED}}
    stored = {"window": {"releaseRequestedTime": "2026-12-03T10:00:05Z"}}
    kept = status.keep_release_request(stored, ours)
    assert kept["window"] == {"quiescedTime": STARTED,
                              "releaseRequestedTime": "2026-12-03T10:00:05Z"}
    assert status.keep_release_request({}, ours) is ours
    assert status.keep_release_request(stored, {"phase": "Running"}) == {"phase": "Running"}


def test_a_window_ends_by_itself_at_max_hold_after_seconds_and_the_deadline() -> None:
    start = parse_timestamp(STARTED)
    assert start is not None
    spec = {"release": {"maxHoldSeconds": 600, "afterSeconds": 30},
            "activeDeadlineSeconds": 900}
    ends = window_ends(spec, STARTED, "2026-12-03T10:00:10Z", start + 20)
    assert sorted(ends) == [(start + 40, reasons.AFTER_SECONDS),
                            (start + 600, reasons.RELEASED_AFTER_MAX_HOLD),
                            (start + 900, reasons.DEADLINE_EXCEEDED)]
    unopened = window_ends({"release": {"maxHoldSeconds": 5, "afterSeconds": 1}}, "", None,
                           start + 20)
    assert sorted(unopened) == [(start + 21, reasons.AFTER_SECONDS),
                                (start + 25, reasons.RELEASED_AFTER_MAX_HOLD)]
