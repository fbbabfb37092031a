"""Notifier declarations: the pod annotation ``notifier.x-k8s.io/notifiers``.

The value is JSON mapping a container name to that container's notifiers::

    {"db": [{"name": "quiesce", "timeoutSeconds": 60,
             "action": {"exec": {"command": ["/bin/sh", "-c", "..."]}}},
            {"name": "reload", "action": {"signal": "SIGHUP"}}]}

Validation is strict, like the Kubernetes API's own: unknown fields, repeated JSON keys, wrong
types and out-of-range values are all reported, as ``metav1.StatusCause``-shaped field errors
whose paths start at ``metadata.annotations[notifier.x-k8s.io/notifiers]``.

Signals are spelled one way only, the way Kubernetes spells them in ``Lifecycle.StopSignal``:
upper case with the ``SIG`` prefix (``SIGHUP``). ``HUP`` or ``sighup`` are refused with a message
naming the accepted spelling, so that one notifier is not written three ways across a fleet.
The allow-list holds the signals that programs conventionally treat as *requests*:

- ``SIGHUP`` (reload configuration), ``SIGUSR1`` / ``SIGUSR2`` (application defined: reopen
  logs, dump state, upgrade binaries), ``SIGWINCH`` (graceful worker stop in nginx and httpd),
  ``SIGQUIT`` (graceful stop in nginx, thread dump in the JVM), ``SIGINT`` / ``SIGTERM``
  (graceful shutdown).

Left out on purpose: ``SIGKILL`` and ``SIGSTOP`` (the kernel drops them when they are sent to a
PID-namespace init from inside the namespace, and anywhere else they would kill or freeze the
workload rather than notify it), ``SIGCONT`` (only meaningful after ``SIGSTOP``), the job-control
signals (``SIGTSTP``, ``SIGTTIN``, ``SIGTTOU``), fault signals (``SIGABRT``, ``SIGSEGV``,
``SIGBUS``, ``SIGFPE``, ``SIGILL``, ``SIGTRAP``, ``SIGSYS``) and signals the kernel raises on its
own events (``SIGALRM``, ``SIGCHLD``, ``SIGPIPE``, ``SIGURG``): a program that handles those does
not expect them to be a message from outside.

A signal is delivered by exec-ing ``kill -s NAME 1`` in the container (the POSIX spelling, which
takes the name without ``SIG``). The image therefore needs a ``kill`` program, and PID 1 must
handle the signal: the kernel discards signals a PID-namespace init has no handler for, and
``kill`` still exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apiserver.api.field_errors import FieldError
from apiserver.api.validation import dns1123_label_errors, qualified_name_errors

ANNOTATION = "notifier.x-k8s.io/notifiers"
ANNOTATION_PATH = f"metadata.annotations[{ANNOTATION}]"

DEFAULT_TIMEOUT_SECONDS = 30
MIN_TIMEOUT_SECONDS = 1
DEFAULT_MAX_TIMEOUT_SECONDS = 600

ALLOWED_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGWINCH")

_NOTIFIER_FIELDS = ("name", "timeoutSeconds", "action")
_ACTION_FIELDS = ("exec", "signal")
_EXEC_FIELDS = ("command",)



class InvalidNotifiers(ValueError):
    """The annotation does not validate; ``errors`` says where and why."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(str(error) for error in errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command


@dataclass(frozen=True)
class SignalAction:
    signal: str
    """Canonical name, e.g. ``SIGHUP``."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The command that delivers the signal to the container's PID 1."""
        return ("kill", "-s", self.signal.removeprefix("SIG"), "1")


@dataclass(frozen=True)
class Notifier:
    name: str
    timeout_seconds: int
    action: ExecAction | SignalAction

    @property
    def argv(self) -> tuple[str, ...]:
        """What to exec in the container to run this notifier."""
        return self.action.argv


Declarations = Mapping[str, tuple[Notifier, ...]]
"""Container name to the notifiers it declares, in annotation order."""


@dataclass(frozen=True)
class Selection:
    """Which containers run a notifier.

    ``selected`` maps each chosen container to its declaration of the notifier, in annotation
    order; ``undeclared`` lists requested containers that do not declare it.
    """

    selected: dict[str, Notifier]
    undeclared: tuple[str, ...]


def parse_notifiers(
    annotation: str | None,
    *,
    max_timeout_seconds: int = DEFAULT_MAX_TIMEOUT_SECONDS,
    containers: Collection[str] | None = None,
) -> dict[str, tuple[Notifier, ...]]:
    """The declarations in the annotation value (none if the pod has no annotation).

    Raises ``InvalidNotifiers`` listing every problem if the value does not validate.
    ``containers``, if given, are the pod's container names: a declaration for any other name
    is an error.
    """
    if annotation is None:
        return {}
    declarations, errors = _read(annotation, max_timeout_seconds, containers)
    if errors:
        raise InvalidNotifiers(errors)
    return declarations


def select_containers(
    declarations: Declarations, notifier: str, containers: Sequence[str] | None = None
) -> Selection:
    """The containers that run ``notifier``: all that declare it, or those of ``containers``.

    An empty ``containers`` means all, as an unset list does in the Kubernetes API.
    """
    requested = set(containers) if containers else None
    selected = {
        container: declared
        for container, notifiers in declarations.items()
        if requested is None or container in requested
        for declared in notifiers
        if declared.name == notifier
    }
    undeclared = tuple(dict.fromkeys(c for c in containers or () if c not in selected))
    return Selection(selected, undeclared)


def annotation_matches_template(pod_value: str | None, template_value: str | None) -> bool:
    """Trust rule 1: the pod's annotation is exactly its controlling owner's template's.

    The raw strings are compared, not the parsed JSON. Controllers copy template annotations to
    pods byte for byte, so equal declarations are equal strings in practice, and a mismatch only
    falls back to the access review (rule 2). Semantic equality would have to agree with every
    JSON parser on the way about duplicate keys, number forms and escapes; exact equality means
    that what runs is exactly what the template's author wrote, so it cannot say yes wrongly.
    A pod without the annotation has nothing to trust.
    """
    return pod_value is not None and pod_value == template_value


def _read(
    annotation: str, max_timeout_seconds: int, containers: Collection[str] | None
) -> tuple[dict[str, tuple[Notifier, ...]], list[FieldError]]:
    try:
        document = json.loads(annotation, object_pairs_hook=_unique_keys)
    except _DuplicateKey as duplicate:
        return {}, [
            FieldError.duplicate(
                ANNOTATION_PATH, duplicate.key, "a JSON object repeats this key; keep only one"
            )
        ]
    except RecursionError:
        return {}, [
            FieldError.invalid(ANNOTATION_PATH, annotation, "must not nest JSON this deeply")
        ]
    except json.JSONDecodeError as error:
        return {}, [
            FieldError.invalid(
                ANNOTATION_PATH,
                annotation,
                f"must be JSON ({error.msg} at line {error.lineno} column {error.colno})",
            )
        ]
    if not isinstance(document, dict):
        return {}, [
            FieldError.invalid(
                ANNOTATION_PATH,
                document,
                "must be a JSON object mapping container names to lists of notifiers",
            )
        ]
    errors: list[FieldError] = []
    declarations: dict[str, tuple[Notifier, ...]] = {}
    for container, notifiers in document.items():
        path = _container_path(container)
        if dns1123_label_errors(container):
            errors.append(
                FieldError.invalid(
                    path, container, "must be a container name (a lowercase RFC 1123 label)"
                )
            )
        elif containers is not None and container not in containers:
            errors.append(
                FieldError.not_supported(
                    path, container, sorted(containers), "the pod has no such container"
                )
            )
        if not isinstance(notifiers, list):
            errors.append(FieldError.invalid(path, notifiers, "must be a list of notifiers"))
            continue
        parsed = [
            _notifier(item, f"{path}[{i}]", max_timeout_seconds, errors)
            for i, item in enumerate(notifiers)
        ]
        _report_duplicate_names(notifiers, path, errors)
        declarations[container] = tuple(n for n in parsed if n is not None)
    return declarations, errors


def _notifier(
    item: Any, path: str, max_timeout_seconds: int, errors: list[FieldError]
) -> Notifier | None:
    if not isinstance(item, dict):
        errors.append(
            FieldError.invalid(
                path, item, "must be an object with name, action and optionally timeoutSeconds"
            )
        )
        return None
    count = len(errors)
    _reject_unknown_fields(item, path, _NOTIFIER_FIELDS, errors)
    name = item.get("name")
    if name is None:
        errors.append(FieldError.required(f"{path}.name", "give the notifier a name"))
    elif not isinstance(name, str):
        errors.append(FieldError.invalid(f"{path}.name", name, "must be a string"))
    else:
        errors.extend(
            FieldError.invalid(f"{path}.name", name, problem)
            for problem in qualified_name_errors(name)
        )
    timeout = _timeout(item.get("timeoutSeconds"), f"{path}.timeoutSeconds", max_timeout_seconds)
    if isinstance(timeout, FieldError):
        errors.append(timeout)
    action = _action(item.get("action"), f"{path}.action", errors)
    if len(errors) > count or action is None or isinstance(timeout, FieldError):
        return None
    return Notifier(name, timeout, action)


def _timeout(value: Any, path: str, max_timeout_seconds: int) -> int | FieldError:
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int):
        return FieldError.invalid(path, value, "must be a whole number of seconds")
    if not MIN_TIMEOUT_SECONDS <= value <= max_timeout_seconds:
        return FieldError.invalid(
            path,
            value,
            f"must be between {MIN_TIMEOUT_SECONDS} and {max_timeout_seconds} seconds (the "
            "server's maximum); leave it out for the default of "
            f"{DEFAULT_TIMEOUT_SECONDS}",
        )
    return value


def _action(value: Any, path: str, errors: list[FieldError]) -> ExecAction | SignalAction | None:
    if value is None:
        errors.append(FieldError.required(path, "set exactly one of exec or signal"))
        return None
    if not isinstance(value, dict):
        errors.append(FieldError.invalid(path, value, "must be an object with exec or signal"))
        return None
    _reject_unknown_fields(value, path, _ACTION_FIELDS, errors)
    present = [key for key in _ACTION_FIELDS if key in value]
    if not present:
        errors.append(FieldError.required(path, "set exactly one of exec or signal"))
        return None
    if len(present) > 1:
        errors.append(
            FieldError.invalid(path, value, "exec and signal are exclusive; keep only one")
        )
        return None
    if present == ["exec"]:
        return _exec(value["exec"], f"{path}.exec", errors)
    return _signal(value["signal"], f"{path}.signal", errors)


def _exec(value: Any, path: str, errors: list[FieldError]) -> ExecAction | None:
    if not isinstance(value, dict):
        errors.append(FieldError.invalid(path, value, "must be an object with command"))
        return None
    _reject_unknown_fields(value, path, _EXEC_FIELDS, errors)
    command = value.get("command")
    path = f"{path}.command"
    if command is None or command == []:
        errors.append(
            FieldError.required(path, 'give the argv to run, e.g. ["/bin/sh", "-c", "..."]')
        )
        return None
    if not isinstance(command, list) or not all(isinstance(arg, str) for arg in command):
        errors.append(FieldError.invalid(path, command, "must be a list of strings (an argv)"))
        return None
    if not command[0]:
        errors.append(FieldError.invalid(f"{path}[0]", command[0], "the program must be named"))
        return None
    return ExecAction(tuple(command))


def _signal(value: Any, path: str, errors: list[FieldError]) -> SignalAction | None:
    if value in ALLOWED_SIGNALS:
        return SignalAction(value)
    detail = "not an allowed signal"
    if isinstance(value, str):
        canonical = "SIG" + value.upper().removeprefix("SIG")
        if canonical in ALLOWED_SIGNALS:
            detail = f"write it as {canonical}"
    errors.append(FieldError.not_supported(path, value, ALLOWED_SIGNALS, detail))
    return None


def _report_duplicate_names(notifiers: list[Any], path: str, errors: list[FieldError]) -> None:
    seen: set[str] = set()
    for i, item in enumerate(notifiers):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            errors.append(
                FieldError.duplicate(
                    f"{path}[{i}].name", name, "notifier names must be unique per container"
                )
            )
        seen.add(name)


def _reject_unknown_fields(
    value: dict[str, Any], path: str, known: tuple[str, ...], errors: list[FieldError]
) -> None:
    errors.extend(
        FieldError.not_supported(f"{path}.{key}", key, known, "unknown field; remove it")
        for key in value
        if key not in known
    )


def _container_path(container: str) -> str:
    if not dns1123_label_errors(container):
        return f"{ANNOTATION_PATH}.{container}"
    return f"{ANNOTATION_PATH}[{json.dumps(container)}]"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


