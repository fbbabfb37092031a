"""Notifier declarations: the pod annotation ``notifier.x-k8s.io/notifiers``.

The value is JSON mapping a container name to that container's notifiers::

    {"db": [{"name": "quiesce", "timeoutSeconds": 60,
             "action": {"exec": {"command": ["/bin/sh", "-c", "..."]}}},
            {"name": "lock", "timeoutSeconds": 30,
             "action": {"exec": {"command": ["/bin/sh", "-c", "..."]}},
             "hold": {"readyLine": "ready", "maxHoldSeconds": 600}},
            {"name": "reload", "action": {"signal": "SIGHUP"}}],
     "web": [{"name": "reload", "action": {"http": {"method": "POST", "port": "web",
                                                    "path": "/-/reload"}}}]}

An ``http`` action sends a request to the pod's own IP (``apiserver.notifier.http_declaration``).

A notifier with ``hold`` is *held*: its command keeps running once it is ready (it printed its
``readyLine``, or its ``readyCommand``, polled every ``readyPeriodSeconds``, exited 0;
``timeoutSeconds`` is then the time it has to become ready), until it is released, its
``maxHoldSeconds`` pass or its pod goes away (``apiserver.notifier.holds``, docs/api.md "Held
notifiers"). Only exec notifiers can be held: a signal or a request has no command that could
stay.

Validation is strict, like the Kubernetes API's own: unknown fields, repeated JSON keys, wrong
types and out-of-range values are all reported, as ``metav1.StatusCause``-shaped field errors
whose paths start at ``metadata.annotations[notifier.x-k8s.io/notifiers]``. What a declaration
is, and how a wrong one is worded, is its typed definition below (``NotifierDeclaration`` and
its parts, with the markers of api/model.py); the dataclasses are what the server runs.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from apiserver.api import json_input
from apiserver.api.decoding import path_of
from apiserver.api.field_errors import CauseReason, FieldError
from apiserver.api.model import (
    FIELD_ERRORS,
    UNKNOWN_FIELD,
    APIModel,
    Bounds,
    Check,
    Invalid,
    Problem,
    Required,
    invalid,
)
from apiserver.api.schema import field_info, json_name, model_in
from apiserver.api.types import qualified_name_problems
from apiserver.api.validation import dns1123_label_errors, qualified_name_errors
from apiserver.notifier.http_declaration import (
    HttpAction,
    HttpDeclaration,
    http_rules,
    port_problems,
)

ANNOTATION = "notifier.x-k8s.io/notifiers"
ANNOTATION_PATH = f"metadata.annotations[{ANNOTATION}]"

DEFAULT_TIMEOUT_SECONDS = 30
MIN_TIMEOUT_SECONDS = 1
DEFAULT_MAX_TIMEOUT_SECONDS = 600
DEFAULT_MAX_HOLD_SECONDS = 3600
DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 5
"""A command's time between SIGTERM and SIGKILL when its notifier declares none."""
DEFAULT_RELEASE_GRACE_PERIOD_SECONDS = 1
"""A released held command's time to end by itself once its stdin is closed, before SIGTERM,
when its notifier declares none."""
DEFAULT_MAX_GRACE_PERIOD_SECONDS = 300
DEFAULT_READY_LINE = "ready"
MAX_READY_LINE_CHARS = 256
DEFAULT_READY_PERIOD_SECONDS = 1
MAX_READY_PERIOD_SECONDS = 60
"""readyPeriodSeconds' bound: a longer period would leave a lock held unseen for minutes."""

ALLOWED_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGWINCH")

TIMEOUT_RANGE = ("must be between {low} and {high} seconds (the server's maximum); leave it "
                 f"out for the default of {DEFAULT_TIMEOUT_SECONDS}")
GRACE_RANGE = ("must be between {low} and {high} seconds (the server's maximum, "
               "--max-grace-period-seconds)")
HOLD_RANGE = ("must be between {low} and {high} seconds (the server's maximum, "
              "--max-hold-seconds): the longest the command may stay held")


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
class Hold:
    """A held notifier's command stays running once it is ready, at most
    ``max_hold_seconds``: once it printed ``ready_line`` on a line of its own or, with
    ``ready_command`` (then ``ready_line`` is None), once that command, run in the same
    container every ``ready_period_seconds`` (each run at most as long), first exited 0."""

    max_hold_seconds: int
    ready_line: str | None = DEFAULT_READY_LINE
    ready_command: tuple[str, ...] | None = None
    ready_period_seconds: int = DEFAULT_READY_PERIOD_SECONDS
    release_grace_period_seconds: int = DEFAULT_RELEASE_GRACE_PERIOD_SECONDS
    """On release, how long the command may take to end by itself once its stdin is closed
    (e.g. ``pg_backup_stop()``) before it is sent SIGTERM."""


@dataclass(frozen=True)
class Notifier:
    name: str
    timeout_seconds: int
    action: ExecAction | SignalAction | HttpAction
    hold: Hold | None = None
    """Set for a held notifier (exec actions only); ``timeout_seconds`` is then the time the
    command has to become ready."""
    termination_grace_period_seconds: int = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    """When the command is stopped (a timeout, a release it did not end by itself), the time
    between SIGTERM and SIGKILL."""

    @property
    def argv(self) -> tuple[str, ...]:
        """What to exec in the container to run this notifier (exec and signal actions)."""
        if isinstance(self.action, HttpAction):
            raise TypeError("an http notifier execs nothing")
        return self.action.argv


Declarations = Mapping[str, tuple[Notifier, ...]]
"""Container name to the notifiers it declares, in annotation order."""

ContainerPorts = Mapping[str, Mapping[str, int]]
"""A pod's container names, each to its named ports (``ports[].name`` to ``containerPort``)."""


def container_ports(pod: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The pod's ``ContainerPorts``, from ``spec.containers``."""
    return {container["name"]: {port["name"]: port["containerPort"]
                                for port in container.get("ports") or ()
                                if isinstance(port.get("name"), str)
                                and isinstance(port.get("containerPort"), int)}
            for container in (pod.get("spec") or {}).get("containers") or ()}


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
    max_hold_seconds: int = DEFAULT_MAX_HOLD_SECONDS,
    max_grace_period_seconds: int = DEFAULT_MAX_GRACE_PERIOD_SECONDS,
    containers: ContainerPorts | None = None,
) -> dict[str, tuple[Notifier, ...]]:
    """The declarations in the annotation value (none if the pod has no annotation).

    Raises ``InvalidNotifiers`` listing every problem if the value does not validate.
    ``containers``, if given, are the pod's containers with their named ports: a declaration
    for any other name is an error, and an http action's named port is resolved to its number
    (a name the container does not declare is an error). ``max_timeout_seconds``,
    ``max_hold_seconds`` and ``max_grace_period_seconds`` bound ``timeoutSeconds``,
    ``hold.maxHoldSeconds`` and the two grace periods (``terminationGracePeriodSeconds``,
    ``hold.releaseGracePeriodSeconds``): the server's flags.
    """
    if annotation is None:
        return {}
    declarations, errors = _read(annotation, {"max_timeout_seconds": max_timeout_seconds,
                                              "max_hold_seconds": max_hold_seconds,
                                              "max_grace_period_seconds":
                                                  max_grace_period_seconds}, containers)
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


def declared_names(annotation: str | None) -> frozenset[str]:
    """The notifier names the annotation declares, for any container, read leniently: every
    ``name`` of an entry in a container's list that is a qualified name (the only kind a request
    can ask for), whether or not the rest validates (a pod whose declaration of a notifier is
    wrong still fails its run, InvalidDeclaration, loudly). Nothing if there is no annotation or
    it is not a JSON object of lists."""
    return frozenset(name for name, _ in _lenient_entries(annotation))


def held_names(annotation: str | None) -> frozenset[str]:
    """Those of ``declared_names`` declared with a ``hold`` object (held notifiers: ending the
    hold unquiesces), read as leniently."""
    return frozenset(name for name, entry in _lenient_entries(annotation)
                     if isinstance(entry.get("hold"), dict))


def _lenient_entries(annotation: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each entry of the annotation's container lists that names a notifier with a qualified
    name, with that name; nothing if the annotation is absent or not a JSON object of lists."""
    if annotation is None:
        return
    try:
        document = json.loads(annotation, parse_int=json_input.integer)
    except (ValueError, RecursionError):
        return
    if not isinstance(document, dict):
        return
    for notifiers in document.values():
        for item in notifiers if isinstance(notifiers, list) else ():
            if (isinstance(item, dict) and isinstance(item.get("name"), str)
                    and not qualified_name_errors(item["name"])):
                yield item["name"], item


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


# The annotation's typed definition: what one notifier declaration is, and how a wrong one is
# worded. The dataclasses above are what the server runs; these models are what a pod writes.


def _argv(command: list[str]) -> Iterable[Problem]:
    if not command[0]:
        yield invalid("the program must be named", at="[0]", value=command[0])


def _signal(value: Any) -> Iterable[Problem]:
    if value in ALLOWED_SIGNALS:
        return
    detail = "not an allowed signal"
    if isinstance(value, str):
        canonical = "SIG" + value.upper().removeprefix("SIG")
        if canonical in ALLOWED_SIGNALS:
            detail = f"write it as {canonical}"
    yield Problem(CauseReason.NOT_SUPPORTED, detail, supported=ALLOWED_SIGNALS, quoted=True)


class ExecDeclaration(APIModel):
    """Run a command in the container."""

    command: Annotated[list[str] | None, Field(
        description="The argv to exec; the program is not run through a shell."),
        Check(_argv), Invalid("must be a list of strings (an argv)"),
        Required('give the argv to run, e.g. ["/bin/sh", "-c", "..."]')] = None


class ActionDeclaration(APIModel):
    """What the notifier does: exactly one of exec, signal or http."""

    exec: Annotated[ExecDeclaration | None, Field(description="Run a command."),
                    Invalid("must be an object with command")] = None
    signal: Annotated[str | None, Field(
        description="Send a signal to the container's PID 1, e.g. SIGHUP."),
        Check(_signal, before=True)] = None
    http: Annotated[HttpDeclaration | None, Field(
        description="Send an HTTP request to the pod's own IP."), Check(http_rules),
        Invalid("must be an object with method, port and optionally path, scheme, httpHeaders "
                "and body")] = None

    def chosen(self) -> list[str]:
        """The actions set, by their field names."""
        return [name for name, value in (("exec", self.exec), ("signal", self.signal),
                                         ("http", self.http)) if value is not None]


def _ready_line(value: str) -> Iterable[Problem]:
    if not value:
        yield invalid("must not be empty; leave it out for the default "
                      f'"{DEFAULT_READY_LINE}"')
    elif len(value) > MAX_READY_LINE_CHARS:
        yield invalid(f"must be no more than {MAX_READY_LINE_CHARS} characters")
    elif "\n" in value or "\r" in value:
        yield invalid("must be one line: the command prints it on a line of its own")


def _ready_command(command: list[str]) -> Iterable[Problem]:
    if not command:
        yield invalid('must name the program to run, e.g. ["pg_isready"]')
    else:
        yield from _argv(command)


READY_PERIOD_RANGE = ("must be between {low} and {high} seconds: how often the ready command "
                      f"runs (and how long each run may take); leave it out for the default of "
                      f"{DEFAULT_READY_PERIOD_SECONDS}")


class HoldDeclaration(APIModel):
    """Keep the command running once it is ready, until it is released: ready when it prints
    readyLine, or when readyCommand exits 0 (at most one of the two)."""

    ready_line: Annotated[str | None, Field(
        description="The command is ready when it prints this line on standard output (a line "
                    f'equal to it, without its line ending); default "{DEFAULT_READY_LINE}".'),
        Check(_ready_line), Invalid("must be a string (a line of output)")
    ] = None
    ready_command: Annotated[list[str] | None, Field(
        description="Instead of readyLine: an argv run in the same container (exec, no "
                    "shell) every readyPeriodSeconds until it first exits 0, which makes the "
                    "command ready."),
        Check(_ready_command), Invalid("must be a list of strings (an argv)")] = None
    ready_period_seconds: Annotated[int | None, Field(
        description="With readyCommand: seconds between its runs, and the longest each run "
                    f"may take; default {DEFAULT_READY_PERIOD_SECONDS}."),
        Bounds(MIN_TIMEOUT_SECONDS, MAX_READY_PERIOD_SECONDS, READY_PERIOD_RANGE),
        Invalid("must be a whole number of seconds")] = None
    max_hold_seconds: Annotated[int | None, Field(
        description="The longest the command stays held after it became ready; then it is "
                    "stopped and the run fails HoldExpired. Bounded by --max-hold-seconds."),
        Bounds(MIN_TIMEOUT_SECONDS, "max_hold_seconds", HOLD_RANGE),
        Invalid("must be a whole number of seconds")] = None
    release_grace_period_seconds: Annotated[int | None, Field(
        description="On release, stdin is closed first: the seconds the command then has to end "
                    "by itself (e.g. a session running pg_backup_stop()) before it is sent "
                    f"SIGTERM; default {DEFAULT_RELEASE_GRACE_PERIOD_SECONDS}. Bounded by "
                    "--max-grace-period-seconds."),
        Bounds(0, "max_grace_period_seconds", GRACE_RANGE),
        Invalid("must be a whole number of seconds")] = None

    def hold(self) -> Hold:
        assert self.max_hold_seconds is not None
        grace = self.release_grace_period_seconds
        release_grace = DEFAULT_RELEASE_GRACE_PERIOD_SECONDS if grace is None else grace
        if self.ready_command:
            return Hold(self.max_hold_seconds, ready_line=None,
                        ready_command=tuple(self.ready_command),
                        ready_period_seconds=self.ready_period_seconds
                        or DEFAULT_READY_PERIOD_SECONDS,
                        release_grace_period_seconds=release_grace)
        return Hold(self.max_hold_seconds, ready_line=self.ready_line or DEFAULT_READY_LINE,
                    release_grace_period_seconds=release_grace)


def _hold_rules(hold: HoldDeclaration) -> Iterable[Problem]:
    """maxHoldSeconds is required; readyLine and readyCommand are exclusive; readyPeriodSeconds
    goes with readyCommand (checked here, so that the paths name the fields as written)."""
    if hold.max_hold_seconds is None:
        yield Problem(CauseReason.REQUIRED, "give the longest the command may stay held, in "
                      "seconds, e.g. 600 (at most the server's --max-hold-seconds)",
                      at=".maxHoldSeconds")
    if hold.ready_line is not None and hold.ready_command is not None:
        yield invalid("readyLine and readyCommand are exclusive (the command is ready by its "
                      "output or by the ready command's exit code); keep only one",
                      at=".readyCommand", value=hold.ready_command)
    if hold.ready_period_seconds is not None and hold.ready_command is None:
        yield invalid("only a readyCommand is polled; set readyCommand or remove "
                      "readyPeriodSeconds", at=".readyPeriodSeconds",
                      value=hold.ready_period_seconds)


def _one_action(action: ActionDeclaration) -> Iterable[Problem]:
    chosen = action.chosen()
    if not chosen:
        yield Problem(CauseReason.REQUIRED, ONE_ACTION)
    elif len(chosen) > 1:
        yield invalid(f"{' and '.join(chosen)} are exclusive; keep only one",
                      value=action.model_dump(by_alias=True, exclude_none=True))


ONE_ACTION = "set exactly one of exec, signal or http"


class NotifierDeclaration(APIModel):
    """One notifier a container declares."""

    name: Annotated[str | None, Field(
        description="The notifier's name (a qualified name, e.g. quiesce or example.com/flush), "
                    "unique per container."),
        Check(qualified_name_problems), Invalid("must be a string"),
        Required("give the notifier a name", empty=False)] = None
    timeout_seconds: Annotated[int | None, Field(
        description=f"Seconds the notifier may run; default {DEFAULT_TIMEOUT_SECONDS}."),
        Bounds(MIN_TIMEOUT_SECONDS, "max_timeout_seconds", TIMEOUT_RANGE),
        Invalid("must be a whole number of seconds")] = None
    termination_grace_period_seconds: Annotated[int | None, Field(
        description="When the command is stopped (its timeout passed, or a released held "
                    "command did not end by itself), the seconds between SIGTERM and SIGKILL; "
                    f"default {DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS}. Bounded by "
                    "--max-grace-period-seconds."),
        Bounds(0, "max_grace_period_seconds", GRACE_RANGE),
        Invalid("must be a whole number of seconds")] = None
    action: Annotated[ActionDeclaration | None, Field(description="What the notifier does."),
                      Check(_one_action), Invalid("must be an object with exec, signal or http"),
                      Required(ONE_ACTION, empty=False)] = None
    hold: Annotated[HoldDeclaration | None, Field(
        description="Make the notifier held: its command keeps running once it is ready (its "
                    "ready line printed, or its ready command exited 0), until released (exec "
                    "actions only)."),
        Check(_hold_rules),
        Invalid("must be an object with maxHoldSeconds and optionally readyLine or "
                "readyCommand, and releaseGracePeriodSeconds")] = None

    def notifier(self) -> Notifier:
        """The notifier this declares (validated: name and action are set)."""
        assert self.name is not None and self.action is not None
        action: ExecAction | SignalAction | HttpAction
        if self.action.exec is not None and self.action.exec.command:
            action = ExecAction(tuple(self.action.exec.command))
        elif self.action.http is not None:
            action = self.action.http.action()
        else:
            action = SignalAction(str(self.action.signal))
        grace = self.termination_grace_period_seconds
        return Notifier(self.name, self.timeout_seconds or DEFAULT_TIMEOUT_SECONDS, action,
                        None if self.hold is None else self.hold.hold(),
                        DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS if grace is None else grace)


def _commandless(declaration: NotifierDeclaration) -> str:
    """The action with its article, if it runs no command that could be held or stopped: "a
    signal" or "an http"; else ""."""
    action = declaration.action
    if action is None or action.exec is not None:
        return ""
    return ("a signal" if action.signal is not None
            else "an http" if action.http is not None else "")


def _held_only_exec(declaration: NotifierDeclaration) -> Iterable[Problem]:
    kind = _commandless(declaration)
    if declaration.hold is not None and kind:
        yield invalid(f"{kind} notifier cannot be held (it leaves no command running to "
                      "hold); remove hold or use an exec action", at=".hold",
                      value=declaration.hold.model_dump(by_alias=True, exclude_none=True))


def _stopped_only_exec(declaration: NotifierDeclaration) -> Iterable[Problem]:
    kind = _commandless(declaration)
    if declaration.termination_grace_period_seconds is not None and kind:
        yield invalid(f"{kind} notifier leaves no command to stop, so it has no grace "
                      "period; remove terminationGracePeriodSeconds or use an exec action",
                      at=".terminationGracePeriodSeconds",
                      value=declaration.termination_grace_period_seconds)


_CONTAINER_NOTIFIERS = TypeAdapter(Annotated[
    list[Annotated[NotifierDeclaration, Check(_held_only_exec), Check(_stopped_only_exec),
                   Invalid("must be an object with name, action and optionally timeoutSeconds, "
                           "terminationGracePeriodSeconds and hold")]],
    Invalid("must be a list of notifiers")])
"""The value of one container's entry: its notifiers."""


def _duplicate_names(notifiers: Any, path: str) -> list[FieldError]:
    """Names repeated in a container's list, found in the raw list so that they are reported
    along with any other problem of its items."""
    if not isinstance(notifiers, list):
        return []
    names = [item.get("name") if isinstance(item, dict) else None for item in notifiers]
    return [FieldError.duplicate(f"{path}[{i}].name", name,
                                 "notifier names must be unique per container")
            for i, name in enumerate(names) if isinstance(name, str) and name in names[:i]]


def _read(
    annotation: str, limits: Mapping[str, int], containers: ContainerPorts | None
) -> tuple[dict[str, tuple[Notifier, ...]], list[FieldError]]:
    document, errors = _load(annotation)
    if not isinstance(document, dict):
        return {}, errors
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
        try:
            declared = _CONTAINER_NOTIFIERS.validate_python(
                notifiers, strict=True, context=dict(limits))
        except ValidationError as error:
            errors += [found for detail in error.errors(include_url=False)
                       for found in _field_errors(path, detail)]
        else:
            ports = None if containers is None else containers.get(container)
            declarations[container] = tuple(_resolved(item.notifier(), ports)
                                            for item in declared)
        errors += _duplicate_names(notifiers, path)
        if containers is not None and container in containers:
            errors += _undeclared_ports(notifiers, path, containers[container])
    return declarations, errors


def _resolved(notifier: Notifier, ports: Mapping[str, int] | None) -> Notifier:
    """``notifier`` with its http action's named port resolved in the container's ``ports``
    (left a name when they are not known: ``_undeclared_ports`` reports a name they lack)."""
    action = notifier.action
    if not isinstance(action, HttpAction) or not isinstance(action.port, str) or (
            ports is None or action.port not in ports):
        return notifier
    return replace(notifier, action=replace(action, port=ports[action.port]))


def _undeclared_ports(notifiers: Any, path: str, ports: Mapping[str, int]) -> list[FieldError]:
    """http actions' port names the container does not declare, found in the raw list (as
    ``_duplicate_names``) so that they are reported along with any other problem."""
    found = []
    for i, item in enumerate(notifiers if isinstance(notifiers, list) else ()):
        action = item.get("action") if isinstance(item, dict) else None
        http = action.get("http") if isinstance(action, dict) else None
        port = http.get("port") if isinstance(http, dict) else None
        if isinstance(port, str) and not list(port_problems(port)) and port not in ports:
            found.append(FieldError.not_supported(
                f"{path}[{i}].action.http.port", port, sorted(ports),
                "the container has no port of this name; name one of its ports[].name, or "
                "give the number"))
    return found


def _load(annotation: str) -> tuple[Any, list[FieldError]]:
    """The annotation's JSON document; an error unless it is an object."""
    try:
        document = json.loads(annotation, object_pairs_hook=_unique_keys,
                              parse_int=json_input.integer)  # no digit-limit ValueError
    except _DuplicateKey as duplicate:
        return None, [
            FieldError.duplicate(
                ANNOTATION_PATH, duplicate.key, "a JSON object repeats this key; keep only one"
            )
        ]
    except RecursionError:
        return None, [
            FieldError.invalid(ANNOTATION_PATH, annotation, "must not nest JSON this deeply")
        ]
    except json.JSONDecodeError as error:
        return None, [
            FieldError.invalid(
                ANNOTATION_PATH,
                annotation,
                f"must be JSON ({error.msg} at line {error.lineno} column {error.colno})",
            )
        ]
    if not isinstance(document, dict):
        return None, [
            FieldError.invalid(
                ANNOTATION_PATH,
                document,
                "must be a JSON object mapping container names to lists of notifiers",
            )
        ]
    return document, []


def _field_errors(container_path: str, detail: ErrorDetails) -> list[FieldError]:
    """The field errors of one pydantic error in a container's list of notifiers.

    Unknown fields are field errors here (the annotation is not a request body), listing the
    fields the definition has."""
    loc = detail["loc"]
    path = container_path + path_of(loc)
    if detail["type"] == UNKNOWN_FIELD:
        names = [str(part) for part in loc[1:-1]]
        model = model_in(field_info(NotifierDeclaration, *names).annotation) if names else (
            NotifierDeclaration)
        known = [json_name(name, info) for name, info in model.model_fields.items()]
        return [FieldError.not_supported(path, loc[-1], known, "unknown field; remove it")]
    if detail["type"] == FIELD_ERRORS:
        return [problem.at_path(path, detail["input"])
                for problem in (detail.get("ctx") or {})["problems"]]
    return [FieldError.invalid(path, detail["input"], detail["msg"])]


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
