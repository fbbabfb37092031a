"""The command line: argparse parsers for each command, and the typed commands they produce.

kubectl passes every argument after ``notify`` to the plugin, its global flags included, so
the plugin parses ``--kubeconfig``, ``--context`` and ``-n/--namespace`` itself, anywhere on
the line. The first word that is not an option picks the command: ``list``, ``can-i``, ``release``,
``verify-window`` and ``completion`` are commands, anything else is a pod (``pod/NAME`` also
names a pod, for a pod called like a command). Flags with an optional value (``--wait[=30s]``,
``--dry-run[=server]``) take it only after ``=``, as kubectl's do, so ``--wait POD`` never reads
the pod as the value.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from kubectl_notify.durations import parse_duration
from kubectl_notify.errors import UsageError

PROG = "kubectl notify"
MAX_SERVER_WAIT_SECONDS = 50
"""The server's bound on ``waitSeconds``; a longer --wait watches the record afterwards."""
DEFAULT_WAIT = "30s"
"""What a bare ``--wait`` means."""
NOTIFY_OUTPUTS = ("wide", "yaml", "json", "name")
LIST_OUTPUTS = ("wide", "yaml", "json")
SHELLS = ("bash", "zsh")
COMMANDS = ("list", "can-i", "release", "verify-window", "completion")
RELEASABLE = {"podnotifier": "podnotifiers", "podnotifiers": "podnotifiers",
              "notification": "notifications", "notifications": "notifications"}
"""What ``release KIND/NAME`` and ``verify-window KIND/NAME`` accept, to the resource."""
CONCURRENCY_POLICIES = ("Forbid", "Wait")


@dataclass(frozen=True)
class Globals:
    """kubectl's connection flags; None means "as kubectl decides" (see `kubeconfig`)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotifyPod:
    """``kubectl notify POD NOTIFIER``. `wait` is seconds to wait for the run to finish:
    None until it finishes, 0 not at all."""

    pod: str
    notifier: str
    containers: tuple[str, ...] = ()
    timeout_seconds: int | None = None
    wait: float | None = None
    dry_run: bool = False
    output: str = ""


@dataclass(frozen=True)
class NotifySelector:
    """``kubectl notify -l SELECTOR NOTIFIER``: a Notification over the selected pods."""

    selector: str
    notifier: str
    containers: tuple[str, ...] = ()
    timeout_seconds: int | None = None
    parallelism: int | None = None
    rollback: str | None = None
    continue_on_failure: bool = False
    release: str | None = None
    """``spec.release.notifier``."""
    release_after_seconds: int | None = None
    max_hold_seconds: int | None = None
    concurrency_policy: str | None = None
    wait: float | None = None
    dry_run: bool = False
    output: str = ""


@dataclass(frozen=True)
class ListNotifiers:
    """``kubectl notify list POD`` or ``list -l SELECTOR``."""

    pod: str | None = None
    selector: str | None = None
    output: str = ""


@dataclass(frozen=True)
class Release:
    """``kubectl notify release podnotifier/NAME`` (end a held run) or ``notification/NAME``
    (end a Notification's quiesce window). `resource` is the plural it POSTs to."""

    resource: str
    name: str
    wait: float | None = None
    output: str = ""


@dataclass(frozen=True)
class VerifyWindow:
    """``kubectl notify verify-window notification/NAME TIME...``: whether each time lies inside
    the window (`resource` is the plural it reads)."""

    resource: str
    name: str
    times: tuple[str, ...]
    clock_skew_seconds: float = 0.0


@dataclass(frozen=True)
class CanI:
    """``kubectl notify can-i POD [NOTIFIER]``."""

    pod: str
    notifier: str | None = None


@dataclass(frozen=True)
class Completion:
    """``kubectl notify completion bash|zsh``, or the completion protocol's ``__complete``
    (`words`: the words typed so far, the last one being completed)."""

    shell: str = ""
    words: tuple[str, ...] | None = None


Command = NotifyPod | NotifySelector | ListNotifiers | CanI | Release | VerifyWindow | Completion


@dataclass(frozen=True)
class Invocation:
    globals: Globals
    command: Command


class _Parser(argparse.ArgumentParser):
    """Reports usage errors as kubectl does (``error: ...`` and a pointer to --help)."""

    def __init__(self, *args: object, command: str = "", **kwargs: object) -> None:
        self.command = command
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.command)


def _add_globals(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("kubectl flags")
    group.add_argument("--kubeconfig", metavar="PATH",
                       help="kubeconfig file (default: $KUBECONFIG, a list separated by ':', "
                            "else ~/.kube/config)")
    group.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    group.add_argument("-n", "--namespace", metavar="NAME",
                       help="namespace (default: the context's, else default)")
    group.add_argument("--as", dest="impersonate", metavar="USER",
                       help="act as this user (needs impersonate rights)")
    group.add_argument("--as-group", dest="impersonate_groups", action="append", default=[],
                       metavar="GROUP", help="act as a member of this group (repeatable)")


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--container", action="append", default=[], metavar="NAME",
                        help="run only in this container (repeatable; default: every container "
                             "that declares the notifier)")
    parser.add_argument("--timeout", metavar="DURATION",
                        help="per-container timeout overriding the declaration's (e.g. 60s)")
    parser.add_argument("--wait", metavar="DURATION",
                        help=f"wait at most this long for the end (bare --wait: {DEFAULT_WAIT}; "
                             "default: until it ends; --wait=0: do not wait)")
    parser.add_argument("--dry-run", metavar="server", dest="dry_run",
                        help="--dry-run=server: the server validates and authorizes, and runs "
                             "and stores nothing")


def _notify_parser(scan: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, add_help=not scan,
        usage=f"{PROG} POD NOTIFIER [flags]\n       {PROG} -l SELECTOR NOTIFIER [flags]\n"
              f"       {PROG} list|can-i|completion ...",
        description="Run a notifier that a pod declares (annotation notifier.x-k8s.io/"
                    "notifiers), or one over every pod a selector matches (a Notification), "
                    "and print what each container did.",
        epilog="Commands:\n"
               "  list POD | -l SELECTOR   the notifiers pods declare, and whether you may run "
               "them\n"
               "  can-i POD [NOTIFIER]     may you create pods/notify on POD (and run "
               "NOTIFIER)?\n"
               "  release podnotifier/NAME | notification/NAME\n"
               "                           end a held run, or a Notification's quiesce window\n"
               "  completion bash|zsh      a shell completion script\n\n"
               "Exit codes: 0 succeeded, 1 failed (or not finished in --wait, or the server "
               "could not take it now), 2 usage, permission, not found or invalid.\n"
               "Reference: docs/kubectl-notify.md",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("args", nargs="*", metavar="POD NOTIFIER", help=argparse.SUPPRESS)
    parser.add_argument("-l", "--selector", metavar="SELECTOR",
                        help="notify every pod this label selector matches (a Notification)")
    _add_run_flags(parser)
    parser.add_argument("-o", "--output", metavar="FORMAT", default="",
                        help="wide, yaml, json or name (default: a line per container, or per "
                             "failed pod with -l)")
    fanout = parser.add_argument_group("with -l")
    fanout.add_argument("--parallelism", type=int, metavar="N",
                        help="pods notified at once (default 1)")
    fanout.add_argument("--rollback", metavar="NOTIFIER",
                        help="run this notifier on the pods that succeeded if the run fails")
    fanout.add_argument("--continue-on-failure", action="store_true",
                        help="notify every pod even after a failure (failurePolicy Continue)")
    window = parser.add_argument_group(
        "quiesce window (with -l; any of these sets spec.release: the command returns once "
        "every pod is quiesced, and the pods stay quiesced until released)")
    window.add_argument("--release", metavar="NOTIFIER",
                        help="run this notifier on every quiesced pod when the window ends "
                             "(e.g. unquiesce; not needed for a held notifier)")
    window.add_argument("--release-after", metavar="DURATION",
                        help="end the window this long after every pod is quiesced")
    window.add_argument("--max-hold", metavar="DURATION",
                        help="the longest the window may last (default: the server's "
                             "--max-hold-seconds)")
    fanout.add_argument("--concurrency-policy", choices=CONCURRENCY_POLICIES, metavar="POLICY",
                        help="Forbid (default) or Wait: when another Notification quiesces the "
                             "same pod with the same notifier")
    _add_globals(parser)
    return parser


def _list_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"{PROG} list", command="list",
                     usage=f"{PROG} list POD [flags]\n       {PROG} list -l SELECTOR [flags]",
                     description="The notifiers each pod declares, per container, and whether "
                                 "you may run them: the server's own answer to a dry run of "
                                 "each (nothing runs). Needs get (or list) on pods.")
    parser.add_argument("command", choices=["list"], help=argparse.SUPPRESS)
    parser.add_argument("pod", nargs="?", metavar="POD", help="the pod")
    parser.add_argument("-l", "--selector", metavar="SELECTOR", help="the pods this selects")
    parser.add_argument("-o", "--output", metavar="FORMAT", default="",
                        help="wide (adds the server's message), yaml or json")
    _add_globals(parser)
    return parser


def _can_i_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"{PROG} can-i", command="can-i",
                     usage=f"{PROG} can-i POD [NOTIFIER] [flags]",
                     description="Whether you may create pods/notify on POD (group "
                                 "notifier.x-k8s.io), as a SelfSubjectAccessReview answers, "
                                 "with its reason; with NOTIFIER also whether the pod's trust "
                                 "rules let you run it (a dry run: nothing runs). Exit 0 if "
                                 "every answer is yes, 1 if one is no. kubectl alone asks the "
                                 "first: kubectl auth can-i create pods.notifier.x-k8s.io/POD "
                                 "--subresource=notify.")
    parser.add_argument("command", choices=["can-i"], help=argparse.SUPPRESS)
    parser.add_argument("pod", metavar="POD", help="the pod")
    parser.add_argument("notifier", nargs="?", metavar="NOTIFIER", help="a notifier it declares")
    _add_globals(parser)
    return parser


def _release_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"{PROG} release", command="release",
                     usage=f"{PROG} release podnotifier/NAME | notification/NAME [flags]",
                     description="End a held notifier's run (podnotifier/NAME: its command is "
                                 "stopped) or a Notification's quiesce window "
                                 "(notification/NAME: every quiesced pod is released), then "
                                 "wait until it has ended. Needs create on podnotifiers/release "
                                 "(and pods/notify on the pod) or notifications/release.")
    parser.add_argument("command", choices=["release"], help=argparse.SUPPRESS)
    parser.add_argument("target", metavar="KIND/NAME",
                        help="podnotifier/NAME or notification/NAME")
    parser.add_argument("--wait", metavar="DURATION",
                        help=f"wait at most this long for the end (bare --wait: {DEFAULT_WAIT}; "
                             "default: until it ends; --wait=0: do not wait)")
    parser.add_argument("-o", "--output", metavar="FORMAT", default="",
                        help="wide, yaml, json or name")
    _add_globals(parser)
    return parser


def _verify_window_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{PROG} verify-window", command="verify-window",
        usage=f"{PROG} verify-window notification/NAME | podnotifier/NAME TIME... [flags]",
        description="Say for each TIME (RFC 3339, e.g. a VolumeSnapshot's status.creationTime) "
                    "whether it lies inside the quiesce window: a Notification's "
                    "status.window.quiescedTime to status.window.releaseTime, or a held "
                    "PodNotifier's status.heldTime to status.releaseRequestedTime (the server's "
                    "clock, milliseconds). A TIME stands for the whole interval its last digit "
                    "allows (2026-12-01T12:00:05Z: 12:00:05.000 to 12:00:06.000, as a "
                    "creationTime is whole seconds), widened by --clock-skew on each side; it "
                    "is inside only if all of it is. Exit code 1 if any TIME is not inside. "
                    "Needs get on the resource.")
    parser.add_argument("command", choices=["verify-window"], help=argparse.SUPPRESS)
    parser.add_argument("target", metavar="KIND/NAME",
                        help="notification/NAME or podnotifier/NAME")
    parser.add_argument("times", metavar="TIME", nargs="+", help="RFC 3339 times")
    parser.add_argument("--clock-skew", metavar="DURATION", default="0s",
                        help="how far the clock that wrote the times may be off the server's "
                             "(e.g. 500ms, 2s); default 0s")
    _add_globals(parser)
    return parser


def _completion_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"{PROG} completion", command="completion",
                     usage=f"{PROG} completion bash|zsh",
                     description="Print a completion script. bash: "
                                 "source <(kubectl-notify completion bash); zsh: "
                                 "source <(kubectl-notify completion zsh). `kubectl notify "
                                 "<TAB>` completes through the kubectl_complete-notify "
                                 "command installed with the plugin (kubectl 1.26+).")
    parser.add_argument("command", choices=["completion"], help=argparse.SUPPRESS)
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")
    return parser


_PARSERS = {"list": _list_parser, "can-i": _can_i_parser, "release": _release_parser,
            "verify-window": _verify_window_parser, "completion": _completion_parser}


def parse(argv: Sequence[str]) -> Invocation:
    """The invocation `argv` (the arguments after ``kubectl notify``) asks for.

    Raises UsageError for a wrong command line; --help prints and exits (SystemExit 0)."""
    args = _normalise(argv)
    if args[:1] == ["__complete"]:
        return Invocation(Globals(), Completion(words=tuple(args[1:])))
    words, _ = _notify_parser(scan=True).parse_known_intermixed_args(args)
    first = words.args[0] if words.args else ""
    if first in _PARSERS:
        parsed = _PARSERS[first]().parse_intermixed_args(args)
        return Invocation(_globals(parsed), _subcommand(first, parsed))
    parsed = _notify_parser().parse_intermixed_args(args)
    return Invocation(_globals(parsed), _notify(parsed))


def _normalise(argv: Sequence[str]) -> list[str]:
    normalised = []
    for arg in argv:
        if arg == "--wait":
            arg = f"--wait={DEFAULT_WAIT}"
        elif arg == "--dry-run":
            arg = "--dry-run=server"
        normalised.append(arg)
    return normalised


def _globals(parsed: argparse.Namespace) -> Globals:
    flags = vars(parsed)
    groups = tuple(flags.get("impersonate_groups") or ())
    if groups and not flags.get("impersonate"):
        raise UsageError("requesting groups with --as-group requires --as (a user)")
    return Globals(kubeconfig=flags.get("kubeconfig") or None,
                   context=flags.get("context") or None, namespace=flags.get("namespace") or None,
                   impersonate=flags.get("impersonate") or None, impersonate_groups=groups)


def _subcommand(name: str, parsed: argparse.Namespace) -> Command:
    if name == "list":
        if bool(parsed.pod) == bool(parsed.selector):
            raise UsageError("list needs a POD or -l SELECTOR (one of them)", "list")
        _check_output(parsed.output, LIST_OUTPUTS, "list")
        return ListNotifiers(pod=_pod_name(parsed.pod) if parsed.pod else None,
                             selector=parsed.selector, output=parsed.output)
    if name == "can-i":
        return CanI(pod=_pod_name(parsed.pod), notifier=parsed.notifier)
    if name == "release":
        _check_output(parsed.output, NOTIFY_OUTPUTS, "release")
        kind, slash, target = parsed.target.partition("/")
        if not slash or kind not in RELEASABLE or not target:
            raise UsageError(f"{parsed.target!r}: give podnotifier/NAME or notification/NAME",
                             "release")
        return Release(resource=RELEASABLE[kind], name=target,
                       wait=_wait_seconds(parsed.wait), output=parsed.output)
    if name == "verify-window":
        kind, slash, target = parsed.target.partition("/")
        if not slash or kind not in RELEASABLE or not target:
            raise UsageError(f"{parsed.target!r}: give notification/NAME or podnotifier/NAME",
                             "verify-window")
        return VerifyWindow(resource=RELEASABLE[kind], name=target, times=tuple(parsed.times),
                            clock_skew_seconds=_duration("--clock-skew", parsed.clock_skew))
    return Completion(shell=parsed.shell)


def _notify(parsed: argparse.Namespace) -> NotifyPod | NotifySelector:
    words: list[str] = parsed.args
    _check_output(parsed.output, NOTIFY_OUTPUTS, "")
    if parsed.dry_run not in (None, "server", "none"):
        raise UsageError(f"invalid --dry-run value {parsed.dry_run!r}: only --dry-run=server "
                         "(or none) is supported; a client dry run has nothing to check")
    common = {
        "notifier": words[-1] if words else "",
        "containers": tuple(parsed.container),
        "timeout_seconds": _whole_seconds("--timeout", parsed.timeout, 1),
        "wait": _wait_seconds(parsed.wait),
        "dry_run": parsed.dry_run == "server",
        "output": parsed.output,
    }
    if parsed.selector is not None:
        if len(words) != 1:
            raise UsageError("with -l SELECTOR give exactly one argument, the NOTIFIER "
                             f"(got {len(words)}: {' '.join(words) or 'none'})")
        if not parsed.selector.strip():
            raise UsageError("-l needs a non-empty label selector, e.g. -l app=db")
        if parsed.parallelism is not None and parsed.parallelism < 1:
            raise UsageError(f"--parallelism must be at least 1 (got {parsed.parallelism})")
        if parsed.rollback and parsed.release:
            raise UsageError("--rollback and --release are exclusive: the release notifier "
                             "also runs when the run fails")
        return NotifySelector(selector=parsed.selector, parallelism=parsed.parallelism,
                              rollback=parsed.rollback,
                              continue_on_failure=parsed.continue_on_failure,
                              release=parsed.release,
                              release_after_seconds=_whole_seconds(
                                  "--release-after", parsed.release_after, 0),
                              max_hold_seconds=_whole_seconds("--max-hold", parsed.max_hold, 1),
                              concurrency_policy=parsed.concurrency_policy, **common)
    for flag, value in (("--parallelism", parsed.parallelism), ("--rollback", parsed.rollback),
                        ("--continue-on-failure", parsed.continue_on_failure or None),
                        ("--release", parsed.release), ("--release-after", parsed.release_after),
                        ("--max-hold", parsed.max_hold),
                        ("--concurrency-policy", parsed.concurrency_policy)):
        if value is not None:
            raise UsageError(f"{flag} applies to -l SELECTOR only")
    if len(words) != 2:
        raise UsageError("give a POD and a NOTIFIER (or -l SELECTOR NOTIFIER); got "
                         f"{len(words)} argument{'s' if len(words) != 1 else ''}"
                         f"{': ' + ' '.join(words) if words else ''}")
    return NotifyPod(pod=_pod_name(words[0]), **common)


def _pod_name(word: str) -> str:
    """``NAME``, ``pod/NAME`` or ``pods/NAME``."""
    kind, slash, name = word.partition("/")
    if not slash:
        return word
    if kind not in ("pod", "pods", "po") or not name:
        raise UsageError(f"{word!r} is not a pod: give NAME or pod/NAME")
    return name


def _check_output(output: str, allowed: tuple[str, ...], command: str) -> None:
    if output and output not in allowed:
        raise UsageError(f"unable to match a printer suitable for the output format "
                         f"{output!r}, allowed formats are: {','.join(allowed)}", command)


def _whole_seconds(flag: str, text: str | None, least: int) -> int | None:
    """A duration flag as whole seconds, rounded up; at least `least`."""
    if text is None:
        return None
    seconds = _duration(flag, text)
    if seconds < least:
        raise UsageError(f"{flag} must be at least {least}s (got {text!r})")
    return math.ceil(seconds)


def _wait_seconds(text: str | None) -> float | None:
    """None (no --wait: until the end), or seconds; ``true``/``false`` as kubectl's boolean
    flags take them."""
    if text is None:
        return None
    return _duration("--wait", {"true": DEFAULT_WAIT, "false": "0"}.get(text, text))


def _duration(flag: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise UsageError(f"{flag}: {error}") from None
