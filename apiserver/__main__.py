"""Command line of the container-notifier extension API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from apiserver import jsonlog
from apiserver.config import ServerOptions, parse_duration
from apiserver.serving.server import serve

LOG_LEVELS = ("debug", "info", "warning", "error")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
