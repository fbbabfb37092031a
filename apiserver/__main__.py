"""Command line of the container-notifier extension API server."""

from __future__ import annotations

import argparse
import asyncio
import logging

from apiserver import jsonlog
from apiserver.config import add_flags, options_from_args
from apiserver.server import serve


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ServerOptions flag (apiserver.config defines them)."""
    parser = argparse.ArgumentParser(
        prog="container-notifier-apiserver",
        description="Serve the notifier.x-k8s.io/v1alpha1 API as a kube-apiserver extension "
        "(aggregated through an APIService). Authentication and authorization are delegated to "
        "kube-apiserver.",
    )
    add_flags(parser)
    return parser


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
