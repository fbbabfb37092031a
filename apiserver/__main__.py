"""Command line of the container-notifier extension API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from apiserver import jsonlog
from apiserver.config import ServerOptions, parse_duration
from apiserver.server import serve

LOG_LEVELS = ("debug", "info", "warning", "error")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="container-notifier-apiserver",
        description="Serve the notifier.x-k8s.io/v1alpha1 API as a kube-apiserver extension "
        "(aggregated through an APIService). Authentication and authorization are delegated to "
        "kube-apiserver.",
    )
    parser.add_argument("--bind-address", default="0.0.0.0",
                        help="address to listen on for HTTPS (default: %(default)s)")
    parser.add_argument("--secure-port", type=int, default=8443,
                        help="port to listen on for HTTPS (default: %(default)s)")
    parser.add_argument("--tls-cert-file", type=Path, required=True,
                        help="PEM serving certificate (with any intermediates after it); "
                        "re-read when the file changes")
    parser.add_argument("--tls-private-key-file", type=Path, required=True,
                        help="PEM private key of --tls-cert-file; re-read when the file changes")
    parser.add_argument("--kubeconfig", type=Path,
                        help="kubeconfig used to reach kube-apiserver (its current context); "
                        "without it, the in-cluster service account is used")
    parser.add_argument("--authentication-token-cache-ttl", type=_duration, default="10s",
                        metavar="DURATION",
                        help="how long TokenReview answers (success and failure) are cached "
                        "(default: %(default)s)")
    parser.add_argument("--authorization-allowed-cache-ttl", type=_duration, default="10s",
                        metavar="DURATION",
                        help="how long 'allowed' SubjectAccessReview answers are cached "
                        "(default: %(default)s)")
    parser.add_argument("--authorization-denied-cache-ttl", type=_duration, default="10s",
                        metavar="DURATION",
                        help="how long 'denied' SubjectAccessReview answers are cached "
                        "(default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=Path("/var/lib/container-notifier"),
                        help="directory of the embedded SQLite store; one server process per "
                        "directory (default: %(default)s)")
    parser.add_argument("--max-records-per-pod", type=_positive, default=10, metavar="K",
                        help="PodNotifier records kept per pod; creating one more deletes the "
                        "oldest finished ones, or answers 429 if K are unfinished "
                        "(default: %(default)s)")
    parser.add_argument("--max-timeout-seconds", type=_positive, default=600,
                        help="upper bound of a notifier's timeoutSeconds (default: %(default)s)")
    parser.add_argument("--default-ttl-seconds-after-finished", type=_positive, default=3600,
                        help="how long finished records are kept when the request sets no "
                        "spec.ttlSecondsAfterFinished (default: %(default)s)")
    parser.add_argument("--max-concurrent-executions", type=_positive, default=64,
                        help="notifier runs in flight across the server; a request beyond it "
                        "gets 429 (default: %(default)s)")
    parser.add_argument("--output-tail-bytes", type=_positive, default=4096,
                        help="bytes of stdout and of stderr kept per container, from the end "
                        "(default: %(default)s)")
    parser.add_argument("--max-notification-parallelism", type=_positive, default=100,
                        help="upper bound of a Notification's spec.parallelism "
                        "(default: %(default)s)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                        help="least severe level written to stderr as JSON lines "
                        "(default: %(default)s)")
    return parser


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        bind_address=args.bind_address,
        secure_port=args.secure_port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        kubeconfig=args.kubeconfig,
        authentication_token_cache_ttl=args.authentication_token_cache_ttl,
        authorization_allowed_cache_ttl=args.authorization_allowed_cache_ttl,
        authorization_denied_cache_ttl=args.authorization_denied_cache_ttl,
        log_level=args.log_level,
        data_dir=args.data_dir,
        max_records_per_pod=args.max_records_per_pod,
        max_timeout_seconds=args.max_timeout_seconds,
        default_ttl_seconds_after_finished=args.default_ttl_seconds_after_finished,
        max_concurrent_executions=args.max_concurrent_executions,
        output_tail_bytes=args.output_tail_bytes,
        max_notification_parallelism=args.max_notification_parallelism,
    )


def main(argv: list[str] | None = None) -> None:
    options = options_from_args(build_parser().parse_args(argv))
    jsonlog.configure(options.log_level)
    try:
        asyncio.run(serve(options))
    except Exception:
        logging.getLogger("apiserver").exception("server failed")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
