"""Server options and their command-line flags, defined once.

Each field of ``ServerOptions`` carries its flag (``option``): the help text, how the flag's
text is parsed and checked, and how its default is shown. ``add_flags`` turns the fields into
argparse arguments (``--secure-port`` for ``secure_port``) and ``options_from_args`` turns the
parsed arguments back into ``ServerOptions``, so ``--help``, the defaults and the options object
cannot disagree. A flag renamed to match Kubernetes keeps its old name for one release as a
deprecated alias: hidden from ``--help``, still accepted, and named by ``deprecation_warnings``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apiserver.errors import StartupError

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

LOG_LEVELS = ("debug", "info", "warning", "error")
DEBUG_VERBOSITY = 2
"""The least klog verbosity (``-v``) logged at debug; 0 and 1 are info."""
SQLITE, KUBERNETES = "sqlite", "kubernetes"
STORAGE_BACKENDS = (SQLITE, KUBERNETES)


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as ``10s``, ``1m30s`` or ``500ms`` (``0`` allowed)."""
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: use e.g. 10s, 1m30s or 500ms")
    return total


def format_duration(seconds: float) -> str:
    """The shortest of ``Nh``, ``Nm``, ``Ns`` or ``Nms`` that ``parse_duration`` reads back."""
    if seconds == 0:
        return "0"
    for unit in ("h", "m", "s"):
        count = seconds / _UNIT_SECONDS[unit]
        if count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds * 1000:g}ms"


def parse_positive(text: str) -> int:
    """A whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{text!r} is not a positive whole number")
    return value


def parse_verbosity(text: str) -> int:
    """A klog verbosity: a whole number from 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{text!r} is not a verbosity: use a whole number from 0 "
                         f"({DEBUG_VERBOSITY} and more log at debug)")
    return value


def parse_port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise ValueError(f"{text!r} is not a port: use a whole number from 1 to 65535")
    return value


@dataclass(frozen=True)
class Flag:
    """How one option is set on the command line."""

    help: str
    parse: Callable[[str], Any] = str
    """Text to value; a ValueError's message is what the user sees."""
    show: Callable[[Any], str] = str
    """Value to text, for the help's default (the inverse of ``parse``)."""
    metavar: str | None = None
    choices: Sequence[str] | None = None
    short: str | None = None
    """A one-letter spelling too, e.g. ``-v``."""
    deprecated: tuple[str, ...] = ()
    """Former names still accepted for one release (hidden from ``--help``; using one is
    warned about, naming the flag to use instead)."""


_FLAG = "flag"


def option(default: Any = dataclasses.MISSING, *, help: str,
           parse: Callable[[str], Any] = str, show: Callable[[Any], str] = str,
           metavar: str | None = None, choices: Sequence[str] | None = None,
           short: str | None = None, deprecated: tuple[str, ...] = ()) -> Any:
    """A ``ServerOptions`` field and its flag; without ``default`` the flag is required."""
    flag = Flag(help=help, parse=parse, show=show, metavar=metavar, choices=choices,
                short=short, deprecated=deprecated)
    return dataclasses.field(default=default, metadata={_FLAG: flag})


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """What the server is told on its command line; field order is the order of ``--help``."""

    bind_address: str = option("0.0.0.0", help="address to listen on for HTTPS")
    secure_port: int = option(8443, parse=parse_port, help="port to listen on for HTTPS")
    tls_cert_file: Path | None = option(
        None, parse=Path, help="PEM serving certificate (with any intermediates after it); re-read "
        "when the file changes. Give it with --tls-private-key-file to serve your own "
        "certificate (cert-manager, a hand-made Secret): nothing is written and no APIService "
        "is touched. Give neither to bootstrap one (--cert-dir, --serving-cert-secret; "
        "docs/certificates.md)")
    tls_private_key_file: Path | None = option(
        None, parse=Path, help="PEM private key of --tls-cert-file; re-read when the file "
        "changes")
    cert_dir: Path = option(
        Path("/var/run/container-notifier/serving-cert"), parse=Path,
        help="bootstrap mode (no --tls-cert-file): the directory (created if missing) where "
        "this replica writes the tls.crt and tls.key it serves, taken from the "
        "--serving-cert-secret Secret")
    serving_cert_secret: str = option(
        "container-notifier-serving-cert", metavar="NAME",
        help="bootstrap mode: the Secret every replica shares, holding the CA, the serving "
        "certificate and the CA bundle to trust; created, renewed and rotated by the server")
    serving_cert_secret_namespace: str = option(
        "container-notifier", metavar="NAMESPACE",
        help="bootstrap mode: the namespace of --serving-cert-secret (the server's own; also "
        "the namespace in the certificate's names)")
    serving_cert_service: str = option(
        "container-notifier", metavar="NAME",
        help="bootstrap mode: the Service the aggregator dials; the certificate is for <svc>, "
        "<svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local "
        "(ns: --serving-cert-secret-namespace)")
    apiservice_name: str = option(
        "v1alpha1.notifier.x-k8s.io", metavar="NAME",
        help="bootstrap mode: the APIService whose spec.caBundle the server keeps equal to the "
        "Secret's CA bundle; '' leaves every APIService alone")
    serving_cert_validity: float = option(
        720 * 3600.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="bootstrap mode: how long a serving certificate is valid (never past its CA); it "
        "is renewed after 2/3 of it")
    serving_cert_ca_validity: float = option(
        8760 * 3600.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="bootstrap mode: how long a CA is valid; after 2/3 of it a next CA joins the "
        "bundle, and signs once the bundle has been published for 1/6 of it; at least "
        "--serving-cert-validity")
    kubeconfig: Path | None = option(
        None, parse=Path, help="kubeconfig used to reach kube-apiserver (its current context); "
        "without it, the in-cluster service account is used")
    authentication_kubeconfig: Path | None = option(
        None, parse=Path, help="kubeconfig of the identity that creates TokenReviews and reads "
        "the trust ConfigMap (kube-system/extension-apiserver-authentication), as "
        "k8s.io/apiserver's flag; default: the --kubeconfig connection (or in-cluster)")
    authorization_kubeconfig: Path | None = option(
        None, parse=Path, help="kubeconfig of the identity that creates SubjectAccessReviews, as "
        "k8s.io/apiserver's flag; default: the --kubeconfig connection (or in-cluster)")
    authentication_token_webhook_cache_ttl: float = option(
        10.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        deprecated=("--authentication-token-cache-ttl",),
        help="how long TokenReview answers (success and failure) are cached")
    authorization_webhook_cache_authorized_ttl: float = option(
        10.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        deprecated=("--authorization-allowed-cache-ttl",),
        help="how long 'allowed' SubjectAccessReview answers are cached")
    authorization_webhook_cache_unauthorized_ttl: float = option(
        10.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        deprecated=("--authorization-denied-cache-ttl",),
        help="how long 'denied' SubjectAccessReview answers are cached")
    data_dir: Path = option(
        Path("/var/lib/container-notifier"), parse=Path,
        help="directory of the embedded SQLite store (--storage=sqlite only); one server "
        "process per directory")
    storage: str = option(
        KUBERNETES, choices=STORAGE_BACKENDS,
        help="where PodNotifier records, Notifications and their scopes are "
        "kept: 'kubernetes' (custom resources of storage.notifier.x-k8s.io, "
        "apiservice/storage-crds.yaml, which must be Established; served from a cache; shared "
        "by every replica; nothing on local disk; docs/storage.md) or 'sqlite' (the database "
        "in --data-dir; one replica only)")
    storage_namespace: str = option(
        "container-notifier", help="--storage=kubernetes: the namespace every storage object "
        "is kept in, whatever its public object's namespace: the server's own, where nobody "
        "but the server and cluster admins may have rights (docs/security.md)")
    max_records_per_pod: int = option(
        10, parse=parse_positive, metavar="K",
        help="PodNotifier records kept per pod; creating one more deletes the oldest finished "
        "ones, or answers 429 if K are unfinished")
    max_timeout_seconds: int = option(
        600, parse=parse_positive, help="upper bound of a notifier's timeoutSeconds")
    max_hold_seconds: int = option(
        3600, parse=parse_positive,
        help="upper bound of a held notifier's maxHoldSeconds and of a Notification's "
        "spec.release.maxHoldSeconds: the longest any pod stays quiesced")
    max_grace_period_seconds: int = option(
        300, parse=parse_positive,
        help="upper bound of a notifier's terminationGracePeriodSeconds (SIGTERM to SIGKILL) "
        "and hold.releaseGracePeriodSeconds (stdin closed to SIGTERM)")
    default_ttl_seconds_after_finished: int = option(
        3600, parse=parse_positive, help="how long finished records are kept when the request "
        "sets no spec.ttlSecondsAfterFinished")
    max_concurrent_executions: int = option(
        64, parse=parse_positive, help="notifier runs in flight across the server; a request "
        "beyond it gets 429")
    output_tail_bytes: int = option(
        4096, parse=parse_positive,
        help="bytes of stdout and of stderr kept per container, from the end")
    max_notification_parallelism: int = option(
        100, parse=parse_positive, help="upper bound of a Notification's spec.parallelism")
    shutdown_delay_duration: float = option(
        0.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="after the first SIGTERM, keep serving this long with /readyz failing and every "
        "response closing its connection, so that load balancers and clients move to other "
        "replicas before this one stops (as k8s.io/apiserver's flag); then stop listening, "
        "answer a request still arriving on an open connection 429 with Retry-After (it "
        "started nothing: clients such as kubectl retry it elsewhere), close the idle "
        "connections left 2s later, and shut down once none is left. The deploy manifests set "
        "10s, the local control plane 3s")
    leader_elect_lease_duration: float = option(
        15.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="how long a candidate waits after the fan-out leader's last renewal before it takes "
        "the leader Lease over; also the duration of every replica's heartbeat Lease, after "
        "which a replica that stopped renewing counts as dead (docs/high-availability.md)")
    leader_elect_renew_deadline: float = option(
        10.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="how long the fan-out leader keeps trying to renew its Lease before it stops "
        "leading; shorter than --leader-elect-lease-duration")
    leader_elect_retry_period: float = option(
        2.0, parse=parse_duration, show=format_duration, metavar="DURATION",
        help="how often candidates try to acquire, and the leader to renew, the leader Lease; "
        "also how often each replica renews its heartbeat Lease; shorter than "
        "--leader-elect-renew-deadline")
    leader_elect_resource_name: str = option(
        "container-notifier-fanout", help="name of the Lease that elects the replica running "
        "the Notification fan-outs")
    leader_elect_resource_namespace: str = option(
        "container-notifier", help="namespace of the leader Lease and of every replica's "
        "heartbeat Lease (container-notifier-replica-<replica>)")
    log_level: str = option(
        "info", choices=LOG_LEVELS,
        help="least severe level written to stderr as JSON lines; -v/--v wins when both are "
        "given")
    v: int | None = option(
        None, parse=parse_verbosity, short="-v", metavar="N",
        help=f"log verbosity as Kubernetes components take it: 0 and 1 log at info, "
        f"{DEBUG_VERBOSITY} and more at debug; when given, it wins over --log-level")


def log_level(options: ServerOptions) -> str:
    """The level logged at: from ``-v`` if given (klog levels), else ``--log-level``."""
    if options.v is None:
        return options.log_level
    return "debug" if options.v >= DEBUG_VERBOSITY else "info"


class InvalidOptions(StartupError, ValueError):
    """Options that are each valid but do not fit together; the message names the flags."""


def tls_files(options: ServerOptions) -> tuple[Path, Path] | None:
    """Files mode's --tls-cert-file and --tls-private-key-file; None in bootstrap mode, when
    neither is given and the server bootstraps its serving certificate (``check`` refuses one
    without the other)."""
    if options.tls_cert_file is None or options.tls_private_key_file is None:
        return None
    return options.tls_cert_file, options.tls_private_key_file


def check(options: ServerOptions) -> None:
    """Raise InvalidOptions (one line) unless the options fit together: both TLS files or
    neither; serving certificate validity > 0 and at most the CA validity; leader election
    needs lease duration > renew deadline > retry period > 0."""
    if (options.tls_cert_file is None) != (options.tls_private_key_file is None):
        given, missing = (("--tls-cert-file", "--tls-private-key-file")
                          if options.tls_private_key_file is None
                          else ("--tls-private-key-file", "--tls-cert-file"))
        raise InvalidOptions(
            f"{given} is given without {missing}: give both (serve your own certificate) or "
            "neither (bootstrap one into --serving-cert-secret)")
    serving, ca = options.serving_cert_validity, options.serving_cert_ca_validity
    if not 0 < serving <= ca:
        raise InvalidOptions(
            f"--serving-cert-validity ({format_duration(serving)}) must be more than 0 and at "
            f"most --serving-cert-ca-validity ({format_duration(ca)}): a certificate cannot "
            "outlive the CA that signed it")
    lease = options.leader_elect_lease_duration
    deadline = options.leader_elect_renew_deadline
    retry = options.leader_elect_retry_period
    if not lease > deadline > retry > 0:
        raise InvalidOptions(
            f"--leader-elect-lease-duration ({format_duration(lease)}) must be longer than "
            f"--leader-elect-renew-deadline ({format_duration(deadline)}), which must be longer "
            f"than --leader-elect-retry-period ({format_duration(retry)}), which must be more "
            "than 0: a leader must stop leading before another can take over")


def flag_name(field: dataclasses.Field[Any]) -> str:
    """``--secure-port`` for the field ``secure_port``."""
    return "--" + field.name.replace("_", "-")


def flag_default(name: str) -> tuple[str, Any]:
    """The flag of the ``ServerOptions`` field `name` and its default, e.g.
    ``("--max-hold-seconds", 3600)``: for descriptions that name a server default."""
    field = next(f for f in dataclasses.fields(ServerOptions) if f.name == name)
    return flag_name(field), field.default


def flag_of(field: dataclasses.Field[Any]) -> Flag:
    flag = field.metadata.get(_FLAG)
    if not isinstance(flag, Flag):
        raise TypeError(f"ServerOptions.{field.name} has no flag: declare it with option()")
    return flag


def _argument_type(flag: Flag) -> Callable[[str], Any]:
    """``flag.parse`` with its ValueError turned into argparse's usage error."""

    def parse(text: str) -> Any:
        try:
            return flag.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


_DEPRECATED_USED = "deprecated_flags_used"
"""The namespace attribute listing the deprecated aliases given, as (alias, flag) pairs."""


class _DeprecatedAlias(argparse.Action):
    """Sets the option as its flag does and records that the former name was used."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        used = getattr(namespace, _DEPRECATED_USED, [])
        setattr(namespace, _DEPRECATED_USED, [*used, (option_string, self.replacement)])


def deprecation_warnings(args: argparse.Namespace) -> list[str]:
    """One message per deprecated alias given, worded as Kubernetes words it."""
    return [f"Flag {alias} has been deprecated, use {flag} instead"
            for alias, flag in getattr(args, _DEPRECATED_USED, [])]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One argument per ``ServerOptions`` field, its default shown in the help if it has one;
    one hidden argument per deprecated alias."""
    for field in dataclasses.fields(ServerOptions):
        flag = flag_of(field)
        required = field.default is dataclasses.MISSING
        help_text = flag.help
        if flag.deprecated:
            help_text += f" (deprecated former name: {', '.join(flag.deprecated)})"
        if not required and field.default is not None:
            shown = flag.show(field.default).replace("%", "%%")
            help_text = f"{help_text} (default: {shown})"
        names = [flag.short, flag_name(field)] if flag.short else [flag_name(field)]
        parser.add_argument(
            *names, dest=field.name, type=_argument_type(flag),
            required=required, default=None if required else field.default,
            metavar=flag.metavar, choices=flag.choices, help=help_text)
        for alias in flag.deprecated:
            parser.add_argument(
                alias, dest=field.name, type=_argument_type(flag), action=_DeprecatedAlias,
                replacement=flag_name(field), default=argparse.SUPPRESS,
                metavar=flag.metavar, choices=flag.choices, help=argparse.SUPPRESS)


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """The options of arguments parsed by a parser given ``add_flags``."""
    return ServerOptions(**{field.name: getattr(args, field.name)
                            for field in dataclasses.fields(ServerOptions)})
