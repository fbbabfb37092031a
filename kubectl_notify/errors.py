"""The plugin's errors and exit codes, worded like kubectl's.

Exit codes (what scripts rely on):

- 0: the command did what was asked (the notifier, or the Notification, Succeeded; a dry run
  was accepted; `can-i` answered yes);
- 1: it ran and failed, or was still unfinished when the wait ended, or the server could not
  take it now (409 the same notifier is running, 429, 5xx, unreachable): trying again later
  may help; `can-i` answered no;
- 2: the command cannot work as given: usage, kubeconfig, authentication or authorization
  (401, 403 — including a notifier the pod's trust rules refuse), not found (404: the pod, or
  a notifier the pod does not declare; or the cluster does not serve notifier.x-k8s.io at all),
  invalid (400, 422). Repeating it will not help.

kube-apiserver answers for an API group it cannot serve itself, in plain text: ``404 page not
found`` when no APIService registers the group, ``service unavailable`` (503) when its
APIService is not Available. The plugin says so and points at the APIService (`APIMissing`,
`APIUnavailable`) instead of printing those words or "unable to reach the server".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUCCEEDED = 0
FAILED = 1
USAGE = 2

PERMANENT_CODES = frozenset({400, 401, 403, 404, 405, 415, 422})
"""HTTP codes of answers that repeating the same command cannot change (exit 2)."""


class PluginError(Exception):
    """An error the plugin reports on stderr (`str(error)`) before exiting with `exit_code`."""

    exit_code = FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(PluginError):
    """The command line is wrong; printed with a pointer to --help."""

    exit_code = USAGE

    def __init__(self, message: str, command: str = "") -> None:
        help_command = " ".join(["kubectl notify", *([command] if command else []), "--help"])
        super().__init__(f"error: {message}\nSee '{help_command}' for usage.")


class ConfigError(PluginError):
    """The kubeconfig (or in-cluster configuration) cannot be used."""

    exit_code = USAGE

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


class ServerError(PluginError):
    """The server answered an error Status: printed as kubectl prints it,
    ``Error from server (Reason): message``."""

    def __init__(self, code: int, status: Mapping[str, Any]) -> None:
        self.code = code
        self.status = dict(status)
        reason = str(self.status.get("reason") or _REASONS.get(code, "Unknown"))
        message = str(self.status.get("message") or f"the server answered {code}")
        super().__init__(f"Error from server ({reason}): {message}",
                         USAGE if code in PERMANENT_CODES else FAILED)

    @property
    def reason(self) -> str:
        return str(self.status.get("reason") or _REASONS.get(self.code, ""))

    @property
    def message(self) -> str:
        return str(self.status.get("message") or "")


class Unreachable(PluginError):
    """The server could not be reached or could not answer (502/503/504)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"error: unable to reach the server: {detail}")


APISERVICE = "v1alpha1.notifier.x-k8s.io"
"""The APIService that registers notifier.x-k8s.io/v1alpha1 with kube-apiserver."""
_CHECK = f"kubectl get apiservice {APISERVICE}"
_TROUBLESHOOTING = 'docs/troubleshooting.md, "The APIService is not Available"'


class APIMissing(PluginError):
    """kube-apiserver does not serve notifier.x-k8s.io/v1alpha1: no APIService registers it
    (its plain-text 404, `answer`)."""

    exit_code = USAGE

    def __init__(self, answer: str) -> None:
        super().__init__(
            f"error: this cluster does not serve notifier.x-k8s.io/v1alpha1 (kube-apiserver "
            f"answered 404: {answer.strip() or 'not found'}): the APIService {APISERVICE} is "
            f"not registered. Install container-notifier (docs/install.md), then check it: "
            f"{_CHECK}")


class APIUnavailable(PluginError):
    """kube-apiserver cannot reach the server behind notifier.x-k8s.io: the APIService is not
    Available (`why`: its Available condition's reason and message, when readable)."""

    def __init__(self, code: int, answer: str, why: str = "") -> None:
        condition = f" ({why})" if why else ""
        super().__init__(
            f"error: the notifier.x-k8s.io API is unavailable (kube-apiserver answered {code}: "
            f"{answer.strip() or 'service unavailable'}): its APIService {APISERVICE} is not "
            f"Available{condition}. See why: {_CHECK}; what to do: {_TROUBLESHOOTING}")


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            405: "MethodNotAllowed", 409: "Conflict", 413: "RequestEntityTooLarge",
            415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable"}
