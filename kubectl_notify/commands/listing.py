"""``kubectl notify list POD|-l SELECTOR``: what each pod declares and whether the user may
run it, asked of the server (a dry run per notifier, nothing runs)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kubectl_notify import output
from kubectl_notify.api import ANNOTATION, NotifierAPI
from kubectl_notify.cli import ListNotifiers
from kubectl_notify.commands.access import Answer, exec_attributes, may_run, review
from kubectl_notify.errors import SUCCEEDED
from kubectl_notify.terminal import Terminal

DEFAULT_TIMEOUT_SECONDS = 30
"""The contract's default ``timeoutSeconds`` of a declared notifier."""
ACTION_WIDTH = 40


@dataclass(frozen=True)
class Declared:
    """One notifier a container declares, and the user's answer for it (field names as in
    ``-o json|yaml``)."""

    pod: str
    container: str
    notifier: str
    action: str
    timeoutSeconds: int | None  # noqa: N815
    mayRun: bool  # noqa: N815
    why: str
    """Short: template, pods/exec or busy when allowed; the refusal's reason otherwise."""
    message: str
    """The server's message (a refusal's, or why it cannot run now); "" if none."""

    def may_run_column(self) -> str:
        return f"{'yes' if self.mayRun else 'no'} ({self.why})"


def declarations(pod: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The pod's annotation, by container; ValueError if it is not the expected shape."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if raw is None:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"annotation {ANNOTATION} is not JSON: {error}") from None
    if not isinstance(parsed, dict) or not all(
            isinstance(v, list) and all(isinstance(n, dict) for n in v) for v in parsed.values()):
        raise ValueError(f"annotation {ANNOTATION} must map container names to lists of "
                         "notifiers")
    return parsed


def describe_action(notifier: dict[str, Any]) -> str:
    action = notifier.get("action") or {}
    if "signal" in action:
        return f"signal {action['signal']}"
    if isinstance(action.get("http"), dict):
        http = action["http"]
        tls = " (HTTPS)" if http.get("scheme") == "HTTPS" else ""
        path = http.get("path") or "/"
        text = f"http {http.get('method', '')} :{http.get('port', '')}{path}{tls}"
        return text if len(text) <= ACTION_WIDTH else text[:ACTION_WIDTH - 3] + "..."
    command = (action.get("exec") or {}).get("command") or []
    text = "exec " + " ".join(str(part) for part in command)
    return text if len(text) <= ACTION_WIDTH else text[:ACTION_WIDTH - 3] + "..."


def why(answer: Answer, may_exec: bool) -> str:
    if not answer.allowed:
        return answer.kind or "refused"
    if answer.kind == "busy":
        return "busy"
    return "pods/exec" if may_exec else "template"


async def pod_rows(api: NotifierAPI, pod: dict[str, Any]) -> list[Declared]:
    name = pod["metadata"]["name"]
    try:
        declared = declarations(pod)
    except ValueError as error:
        return [Declared(name, "-", "-", "-", None, False, "InvalidAnnotation", str(error))]
    answers: dict[str, Answer] = {}
    for notifier_name in sorted({str(n.get("name")) for ns in declared.values() for n in ns}):
        answers[notifier_name] = await may_run(api, name, notifier_name)
    may_exec = (any(a.allowed for a in answers.values())
                and (await review(api, exec_attributes(name))).allowed)
    rows: list[Declared] = []
    for container, notifiers in declared.items():
        for notifier in notifiers:
            answer = answers[str(notifier.get("name"))]
            rows.append(Declared(name, container, str(notifier.get("name")),
                                 describe_action(notifier), notifier.get("timeoutSeconds"),
                                 answer.allowed, why(answer, may_exec), answer.reason))
    return rows


async def run(api: NotifierAPI, command: ListNotifiers, terminal: Terminal) -> int:
    pods = ([await api.pod(command.pod)] if command.pod
            else await api.pods(str(command.selector)))
    if not pods:
        terminal.line(f"No resources found in {api.namespace} namespace.")
        return SUCCEEDED
    per_pod = [(pod["metadata"]["name"], await pod_rows(api, pod)) for pod in pods]
    if command.output in ("yaml", "json"):
        rows = [asdict(row) for _, found in per_pod for row in found]
        terminal.line(output.dump(rows, command.output))
        return SUCCEEDED
    wide = command.output == "wide"
    header = ["POD", "CONTAINER", "NOTIFIER", "ACTION", "TIMEOUT", "MAY RUN"]
    lines = []
    for name, found in per_pod:
        if not found:
            lines.append([name, "-", "<none>", "-", "-", "-"] + (["-"] if wide else []))
        for row in found:
            cells = [row.pod, row.container, row.notifier, row.action,
                     f"{row.timeoutSeconds or DEFAULT_TIMEOUT_SECONDS}s", row.may_run_column()]
            lines.append(cells + ([row.message or "-"] if wide else []))
    terminal.line(output.table(header + (["MESSAGE"] if wide else []), lines))
    return SUCCEEDED
