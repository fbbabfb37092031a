"""How results are printed: kubectl-style tables (columns padded by three spaces), the
per-container result of a run, a Notification's progress (a bar redrawn in place on a
terminal, one plain line per change otherwise), and objects as YAML or JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import yaml

from kubectl_notify.api import GROUP
from kubectl_notify.durations import format_duration
from kubectl_notify.escaping import escape_terminal

OUTPUT_WIDTH = 60
"""At most this many characters of a container's output go in the OUTPUT column."""
TAIL_LINES = 10
"""Lines of each stream `-o wide` prints below the table."""
BAR_WIDTH = 30
HELD = "Held"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Rows under a header, columns padded to their widest cell plus three spaces; cells are
    escaped first (``escape_terminal``), so the columns line up as printed."""
    lines = [[escape_terminal(cell) for cell in line] for line in (header, *rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("   ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                           strict=True)).rstrip()
                     for line in lines)


def dump(obj: Any, output: str) -> str:
    if output == "json":
        return json.dumps(obj, indent=4)
    return yaml.safe_dump(obj, sort_keys=False).rstrip("\n")


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (_time(end) - _time(start)).total_seconds()


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _duration(start: str | None, end: str | None) -> str:
    seconds = seconds_between(start, end)
    return "-" if seconds is None else format_duration(seconds)


def lines_of(text: str) -> list[str]:
    """`text`'s lines as ``str.splitlines`` gives them, but split at newlines (CRLF counts as
    one) and nowhere else: a CR inside a line stays, to be shown escaped (``\\r``), instead
    of hiding what came before it."""
    lines = text.replace("\r\n", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def last_line(text: str) -> str:
    lines = [line.strip() for line in lines_of(text) if line.strip()]
    return lines[-1] if lines else ""


def _shorten(text: str, width: int = OUTPUT_WIDTH) -> str:
    """`text` escaped (``escape_terminal``), then cut to `width` characters as printed."""
    text = escape_terminal(text)
    return text if len(text) <= width else text[:width - 3] + "..."


def _exit(container: Mapping[str, Any]) -> str:
    """The exit code, an http notifier's ``HTTP <status code>``, else a failure's reason."""
    if container.get("exitCode") is not None:
        return str(container["exitCode"])
    if container.get("statusCode") is not None:
        return f"HTTP {container['statusCode']}"
    return str(container.get("reason") or "-") if container.get("phase") == "Failed" else "-"


def object_name(obj: Mapping[str, Any]) -> str:
    """The name, or the generateName of a server dry run's answer (which has no name)."""
    metadata = obj.get("metadata") or {}
    return str(metadata.get("name") or metadata.get("generateName") or "")


def record_name(record: Mapping[str, Any]) -> str:
    return f"podnotifier/{object_name(record)}"


def record_summary(record: Mapping[str, Any]) -> str:
    """``podnotifier/NAME Succeeded in 31ms`` (with the reason and message when it failed)."""
    status = record.get("status") or {}
    phase = status.get("phase") or "Pending"
    line = f"{record_name(record)} {phase}"
    if phase == "Failed" and status.get("reason"):
        line += f" ({status['reason']})"
    took = seconds_between(status.get("startTime"), status.get("completionTime"))
    if took is not None:
        line += f" in {format_duration(took)}"
    if phase == "Failed" and status.get("message"):
        line += f": {status['message']}"
    return line


def record_result(record: Mapping[str, Any], wide: bool = False) -> str:
    """The summary line, then one line per container: exit code, duration, last output; then,
    with ``wide`` or while the run is Held, the tail of each container's output (a held
    command's output so far: what it printed before it was ready, e.g. an LSN)."""
    containers = (record.get("status") or {}).get("containers") or []
    if wide:
        header = ["CONTAINER", "PHASE", "REASON", "EXIT", "DURATION", "OUTPUT"]
    else:
        header = ["CONTAINER", "PHASE", "EXIT", "DURATION", "OUTPUT"]
    rows = []
    for c in containers:
        output = (last_line(c.get("stdout") or "") or last_line(c.get("stderr") or "")
                  or last_line(c.get("responseBody") or "")
                  or (last_line(c.get("message") or "") if c.get("phase") == "Failed" else ""))
        row = [c.get("name", ""), c.get("phase") or "Pending"]
        if wide:
            row.append(c.get("reason") or "-")
        row += [_exit(c), _duration(c.get("startTime"), c.get("completionTime")),
                _shorten(output) if output else "-"]
        rows.append(row)
    parts = [record_summary(record)]
    if rows:
        parts.append(table(header, rows))
    if wide or (record.get("status") or {}).get("phase") == HELD:
        parts.extend(_tails(containers))
    return "\n".join(parts)


STREAMS = ("stdout", "stderr", "responseBody")
"""What a container entry holds of its notifier's output: an exec's tails, or the head of an
http notifier's answer."""


def _tails(containers: Iterable[Mapping[str, Any]]) -> list[str]:
    blocks = []
    for c in containers:
        for stream in STREAMS:
            head = stream == "responseBody"  # the answer's first bytes, an exec's last
            every = lines_of(c.get(stream) or "")
            lines = every[:TAIL_LINES] if head else every[-TAIL_LINES:]
            if lines:
                truncated = " (truncated)" if c.get(f"{stream}Truncated") else ""
                blocks.append(f"--- {c.get('name')} {stream}, {'first' if head else 'last'} "
                              f"{len(lines)} line{'s' if len(lines) != 1 else ''}{truncated}:")
                blocks.extend(f"    {line}" for line in lines)
        if c.get("phase") == "Failed" and c.get("message"):
            blocks.append(f"--- {c.get('name')} message: {c['message']}")
    return blocks


def notification_name(obj: Mapping[str, Any]) -> str:
    return f"notification/{object_name(obj)}"


def _counts(obj: Mapping[str, Any]) -> dict[str, int]:
    counts = (obj.get("status") or {}).get("counts") or {}
    return {key: int(counts.get(key) or 0) for key in
            ("total", "pending", "running", "succeeded", "failed", "skipped", "rolledBack",
             "released", "mayHaveRunTwice")}


def progress_line(obj: Mapping[str, Any]) -> str:
    """A plain progress line (not a terminal): phase and every count."""
    c = _counts(obj)
    done = c["succeeded"] + c["failed"] + c["skipped"]
    phase = (obj.get("status") or {}).get("phase") or "Pending"
    return (f"{notification_name(obj)} {phase}: {done}/{c['total']} done ({c['succeeded']} "
            f"succeeded, {c['failed']} failed, {c['skipped']} skipped, {c['running']} running, "
            f"{c['pending']} pending)")


def progress_bar(obj: Mapping[str, Any], width: int = BAR_WIDTH) -> str:
    """``[=======xx        ] 9/20 done: 7 succeeded, 2 failed, 3 running``: ``=`` succeeded
    (and skipped), ``x`` failed, blank still to do. Each count comes after its number, as in
    the plain line, so ``1/3 done: 0 succeeded, 1 failed`` cannot read as one pod succeeded."""
    c = _counts(obj)
    total = max(c["total"], 1)
    ok = round(width * (c["succeeded"] + c["skipped"]) / total)
    bad = min(width - ok, round(width * c["failed"] / total))
    bar = "=" * ok + "x" * bad + " " * (width - ok - bad)
    done = c["succeeded"] + c["failed"] + c["skipped"]
    text = (f"[{bar}] {done}/{c['total']} done: {c['succeeded']} succeeded, {c['failed']} "
            f"failed, {c['running']} running")
    return text + (f", {c['skipped']} skipped" if c["skipped"] else "")


def notification_summary(obj: Mapping[str, Any]) -> str:
    """``notification/NAME Succeeded: 3 succeeded, 0 failed, 1 skipped of 4 pods`` and, when
    it did not succeed, the condition's message."""
    c = _counts(obj)
    status = obj.get("status") or {}
    phase = status.get("phase") or "Pending"
    line = (f"{notification_name(obj)} {phase}: {c['succeeded']} succeeded, {c['failed']} "
            f"failed, {c['skipped']} skipped of {c['total']} pod{'s' if c['total'] != 1 else ''}")
    if c["rolledBack"]:
        line += f", {c['rolledBack']} rolled back"
    if c["released"]:
        line += f", {c['released']} released"
    if c["mayHaveRunTwice"]:
        line += f" ({c['mayHaveRunTwice']} may have run their rollback or release twice)"
    took = seconds_between(status.get("startTime"), status.get("completionTime"))
    if took is not None:
        line += f" in {format_duration(took)}"
    window = status.get("window") or {}
    if window:
        line += "\nwindow: " + ", ".join(
            f"{label} {window[key]}" for key, label in WINDOW_TIMES if window.get(key))
    failed = [cond for cond in status.get("conditions") or []
              if cond.get("type") == "Failed" and cond.get("status") == "True"]
    if failed:
        line += f"\n{failed[0].get('reason', '')}: {failed[0].get('message', '')}"
    return line


WINDOW_TIMES = (("quiescedTime", "quiesced"), ("releaseRequestedTime", "release requested"),
                ("releaseTime", "release started"), ("unquiescedTime", "unquiesced"))
"""``status.window``'s times, in order, as the summary names them."""


def window_summary(obj: Mapping[str, Any]) -> str:
    """``notification/NAME Quiesced: 3 pods quiesced at T`` and when the window ends by itself
    (``spec.release.afterSeconds``, else ``maxHoldSeconds``)."""
    c = _counts(obj)
    status = obj.get("status") or {}
    release = (obj.get("spec") or {}).get("release") or {}
    quiesced = (status.get("window") or {}).get("quiescedTime") or "?"
    line = (f"{notification_name(obj)} Quiesced: {c['succeeded']} pod"
            f"{'s' if c['succeeded'] != 1 else ''} quiesced at {quiesced}")
    if c["skipped"]:
        line += f", {c['skipped']} skipped"
    if release.get("afterSeconds") is not None:
        line += f"; released automatically after {release['afterSeconds']}s"
    elif release.get("maxHoldSeconds") is not None:
        line += f"; released at the latest after {release['maxHoldSeconds']}s"
    return line


def failed_pods(records: Iterable[Mapping[str, Any]], failed_count: int) -> str:
    """The failed pods with their reasons (from their records); a note for failures that have
    no record (refused before a run started: counted in the condition's message)."""
    rows = []
    for record in records:
        status = record.get("status") or {}
        exits = [_exit(c) for c in status.get("containers") or []
                 if c.get("exitCode") not in (None, 0) or c.get("statusCode") is not None
                 and c.get("phase") == "Failed"]
        rows.append([record["spec"].get("podName", ""), status.get("reason") or "-",
                     exits[0] if exits else "-", _shorten(status.get("message") or "", 80)
                     or "-"])
    parts = []
    if rows:
        parts.append("Failed pods:\n" + table(["POD", "REASON", "EXIT", "MESSAGE"], rows))
    unrecorded = failed_count - len(rows)
    if unrecorded > 0:
        parts.append(f"{unrecorded} pod{'s' if unrecorded != 1 else ''} failed before a run "
                     "started (no record; the reasons are counted above)")
    return "\n".join(parts)


def full_name(resource: str, obj: Mapping[str, Any]) -> str:
    """``-o name``: ``podnotifier.notifier.x-k8s.io/NAME``."""
    return f"{resource}.{GROUP}/{object_name(obj)}"
