"""Command line of the container-notifier extension API server.

Every startup misconfiguration is a ``StartupError`` (``apiserver.errors``), caught here once:
its one-line message goes to stderr and the process exits 1, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from apiserver import jsonlog
from apiserver.config import add_flags, deprecation_warnings, log_level, options_from_args
from apiserver.errors import StartupError
from apiserver.server import serve
from apiserver.version import DISTRIBUTION, version

PROG = "container-notifier-apiserver"

log = logging.getLogger("apiserver")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ServerOptions flag (apiserver.config defines them) and --version."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the notifier.x-k8s.io/v1alpha1 API as a kube-apiserver extension "
        "(aggregated through an APIService). Authentication and authorization are delegated to "
        "kube-apiserver.",
    )
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {version()}",
                        help="print the version and exit")
    add_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    options = options_from_args(args)
    jsonlog.configure(log_level(options))
    for warning in deprecation_warnings(args):
        log.warning(warning)
    try:
        asyncio.run(serve(options))
    except StartupError as error:
        raise SystemExit(f"{PROG}: error: {error}") from None
    except Exception:
        log.exception("server failed")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
