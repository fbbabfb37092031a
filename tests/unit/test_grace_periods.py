"""Grace periods per notifier: ``terminationGracePeriodSeconds`` (SIGTERM to SIGKILL) and
``hold.releaseGracePeriodSeconds`` (stdin closed to SIGTERM), their defaults and bounds, and that
the runner and a held command use the declared values."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from apiserver.notifier.declarations import (
    DEFAULT_RELEASE_GRACE_PERIOD_SECONDS,
    DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
    InvalidNotifiers,
    Notifier,
    parse_notifiers,
)
from apiserver.notifier.exec_protocol import Stop
from apiserver.notifier.exec_stream import ExecResult, OutputTails
from apiserver.notifier.held_exec import HeldCommand
from apiserver.notifier.runner import ContainerPlan, Plan
from apiserver.notifier.stopping import GRACE_SECONDS, Stopped
from tests.unit.test_holds import Held, held  # noqa: F401 (the fixture)
from tests.unit.test_runner import Setup, result, setup  # noqa: F401 (the fixture)

EXEC = {"exec": {"command": ["/bin/sh", "-c", "echo ready; exec sleep 60"]}}
PATH = "metadata.annotations[notifier.x-k8s.io/notifiers].db[0]"


def _parse(notifier: dict[str, Any], **limits: int) -> Notifier:
    return parse_notifiers(json.dumps({"db": [notifier]}), **limits)["db"][0]


def _errors(notifier: dict[str, Any], **limits: int) -> list[str]:
    with pytest.raises(InvalidNotifiers) as raised:
        _parse(notifier, **limits)
    return [str(error) for error in raised.value.errors]


def test_the_defaults_are_todays_waits() -> None:
    notifier = _parse({"name": "lock", "action": EXEC, "hold": {"maxHoldSeconds": 60}})
    assert notifier.termination_grace_period_seconds == DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    assert notifier.termination_grace_period_seconds == GRACE_SECONDS == 5
    assert notifier.hold is not None
    assert notifier.hold.release_grace_period_seconds == DEFAULT_RELEASE_GRACE_PERIOD_SECONDS == 1


def test_each_grace_period_is_declared_per_notifier_and_zero_is_allowed() -> None:
    notifier = _parse({"name": "backup", "action": EXEC, "terminationGracePeriodSeconds": 0,
                       "hold": {"maxHoldSeconds": 60, "releaseGracePeriodSeconds": 30}})
    assert notifier.termination_grace_period_seconds == 0
    assert notifier.hold is not None and notifier.hold.release_grace_period_seconds == 30


def test_each_grace_period_is_bounded_by_the_flag_and_the_error_names_the_field() -> None:
    declared = {"name": "backup", "action": EXEC, "terminationGracePeriodSeconds": 61,
                "hold": {"maxHoldSeconds": 60, "releaseGracePeriodSeconds": 61}}
    assert _parse(declared, max_grace_period_seconds=61).termination_grace_period_seconds == 61
    assert sorted(_errors(declared, max_grace_period_seconds=60)) == [
        f"{PATH}.hold.releaseGracePeriodSeconds: Invalid value: 61: must be between 0 and 60 "
        "seconds (the server's maximum, --max-grace-period-seconds)",
        f"{PATH}.terminationGracePeriodSeconds: Invalid value: 61: must be between 0 and 60 "
        "seconds (the server's maximum, --max-grace-period-seconds)"]


@pytest.mark.parametrize("value", [-1, 1.5, "5"])
def test_a_grace_period_is_a_whole_number_of_seconds(value: Any) -> None:
    errors = _errors({"name": "lock", "action": EXEC, "terminationGracePeriodSeconds": value})
    assert len(errors) == 1 and errors[0].startswith(f"{PATH}.terminationGracePeriodSeconds: ")


def test_a_signal_notifier_has_no_grace_period() -> None:
    assert _errors({"name": "reload", "action": {"signal": "SIGHUP"},
                    "terminationGracePeriodSeconds": 3}) == [
        f"{PATH}.terminationGracePeriodSeconds: Invalid value: 3: a signal notifier leaves no "
        "command to stop, so it has no grace period; remove terminationGracePeriodSeconds or "
        "use an exec action"]


# What runs with them


class SlowShutdown:
    """A held exec whose command, once its stdin is closed, takes `shutdown` seconds to end
    by itself (as psql running pg_backup_stop()); `stop` records a signal."""

    def __init__(self, shutdown: float) -> None:
        self.shutdown = shutdown
        self.signalled: list[int] = []
        self._stopped = asyncio.Event()

    async def __call__(self, argv: Sequence[str], timeout: float, stdout_filter: Any,
                       close_stdin: asyncio.Event, tails: OutputTails) -> ExecResult:
        tails.stdout.write(stdout_filter.feed(b"container-notifier-pid 41\nready\n"))
        await close_stdin.wait()
        try:
            await asyncio.wait_for(self._stopped.wait(), self.shutdown)
        except TimeoutError:
            return result(0, b"ready\n0/3000028\n")
        return result(143, b"ready\n")

    async def stop(self, pid: int) -> Stopped:
        self.signalled.append(pid)
        self._stopped.set()
        return Stopped(Stop.TERMINATED, f"the command (PID {pid}) was stopped with SIGTERM")


async def test_release_waits_the_release_grace_for_the_command_to_end_with_no_signal() -> None:
    stream = SlowShutdown(shutdown=0.3)
    command = HeldCommand(stream, stream.stop, ["psql"], "ready", 60, release_grace_seconds=5)
    await asyncio.wait_for(command.ready.wait(), 1)
    ended, stopped = await command.release()
    assert (stopped.stop, stream.signalled, ended.exit_code) == (Stop.EXITED, [], 0)
    assert ended.stdout == b"ready\n0/3000028\n"


async def test_a_command_slower_than_its_release_grace_gets_sigterm() -> None:
    stream = SlowShutdown(shutdown=30)
    command = HeldCommand(stream, stream.stop, ["psql"], "ready", 60, release_grace_seconds=0)
    await asyncio.wait_for(command.ready.wait(), 1)
    ended, stopped = await command.release()
    assert (stopped.stop, stream.signalled, ended.exit_code) == (Stop.TERMINATED, [41], 143)


async def test_the_runner_stops_a_timed_out_command_with_its_declared_grace(
        setup: Setup) -> None:  # noqa: F811
    plan = await setup.plan("app")
    declared = Notifier("quiesce", 30, plan.containers[0].notifier.action,
                        termination_grace_period_seconds=42)
    await setup.run(Plan(plan.namespace, plan.record, plan.pod, plan.pod_uid,
                         (ContainerPlan("app", declared, "cid-app"),), plan.timeout_seconds,
                         plan.tail_bytes, requester="u"))
    assert setup.execute.grace_seconds == [42]


async def test_the_runner_holds_with_the_declared_grace_periods(held: Held) -> None:  # noqa: F811
    await held.start("db", release_grace=30, termination_grace=7)
    assert held.holding.graces == [(30, 7)]
