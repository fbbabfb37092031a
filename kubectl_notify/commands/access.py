"""``kubectl notify can-i POD [NOTIFIER]``, and the two answers it and ``list`` share: may the
user create pods/notify on a pod (a SelfSubjectAccessReview, as ``kubectl auth can-i`` sends
one, but with group notifier.x-k8s.io), and may they run one of its notifiers (the server's
answer to a ``dryRun=All`` notify: trust rules included, nothing runs)."""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_notify.api import GROUP, NotifierAPI
from kubectl_notify.cli import CanI, NotifyPod
from kubectl_notify.commands.notify import request_body
from kubectl_notify.errors import FAILED, SUCCEEDED, ServerError
from kubectl_notify.terminal import Terminal

BUSY_CODES = (409, 429)
"""Answers that come after the trust check: the user may run it, just not at this moment."""


@dataclass(frozen=True)
class Answer:
    allowed: bool
    reason: str
    """Why (the review's reason, or the server's message); "" if it gave none."""
    kind: str = ""
    """A short word for tables: the Status reason of a refusal, or "busy"."""

    def text(self) -> str:
        """``yes``, ``no``, or either followed by `` - reason`` (kubectl auth can-i's form)."""
        word = "yes" if self.allowed else "no"
        return f"{word} - {self.reason}" if self.reason else word


def notify_attributes(pod: str) -> dict[str, str]:
    return {"verb": "create", "group": GROUP, "resource": "pods", "subresource": "notify",
            "name": pod}


def exec_attributes(pod: str) -> dict[str, str]:
    return {"verb": "create", "group": "", "resource": "pods", "subresource": "exec",
            "name": pod}


async def review(api: NotifierAPI, attributes: dict[str, str]) -> Answer:
    status = await api.access_review(attributes)
    reasons = [str(status[key]) for key in ("reason", "evaluationError") if status.get(key)]
    return Answer(bool(status.get("allowed")), " - ".join(reasons))


async def may_run(api: NotifierAPI, pod: str, notifier: str) -> Answer:
    """The server's answer to a dry run of `notifier` on `pod`."""
    try:
        await api.notify(pod, request_body(NotifyPod(pod=pod, notifier=notifier)),
                         dry_run=True)
    except ServerError as error:
        if error.code in BUSY_CODES:
            return Answer(True, f"allowed, but not now: {error.message}", "busy")
        if error.code in (401, 403, 404, 422):
            return Answer(False, error.message, error.reason)
        raise
    return Answer(True, "")


async def run(api: NotifierAPI, command: CanI, terminal: Terminal) -> int:
    answers = [await review(api, notify_attributes(command.pod))]
    terminal.line(f"create pods/notify ({GROUP}) on pod {command.pod}: {answers[0].text()}")
    if command.notifier:
        answers.append(await may_run(api, command.pod, command.notifier))
        terminal.line(f'run notifier "{command.notifier}": {answers[1].text()}')
    return SUCCEEDED if all(answer.allowed for answer in answers) else FAILED
