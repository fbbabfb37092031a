"""The ``kubectl-notify`` console script: parse, find the cluster, run the command, exit with
its code (see `errors` for what each code means)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence

import httpx

from kubectl_notify import completion, kubeconfig
from kubectl_notify.api import REQUEST_TIMEOUT, NotifierAPI
from kubectl_notify.cli import (
    CanI,
    Command,
    Completion,
    ListNotifiers,
    NotifyPod,
    NotifySelector,
    Release,
    VerifyWindow,
    parse,
)
from kubectl_notify.commands import access, fanout, listing, notify, release, verify_window
from kubectl_notify.errors import SUCCEEDED, PluginError
from kubectl_notify.escaping import escape_terminal
from kubectl_notify.impersonation import Impersonating
from kubectl_notify.kubeclient import KubeClient
from kubectl_notify.terminal import Terminal

INTERRUPTED = 130


class EscapingFormatter(logging.Formatter):
    """Log lines (on stderr) escaped as everything else the plugin prints."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_terminal(super().format(record))


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("error: %(message)s"))
    logging.basicConfig(level=logging.ERROR, handlers=[handler])
    terminal = Terminal(sys.stdout, sys.stdout.isatty())
    try:
        invocation = parse(list(sys.argv[1:] if argv is None else argv))
        command = invocation.command
        if isinstance(command, Completion):
            return _completion(command, terminal)
        flags = invocation.globals
        target = kubeconfig.resolve(flags, environ)
        transport = (Impersonating(target.connection, flags.impersonate,
                                   flags.impersonate_groups) if flags.impersonate else None)
        return asyncio.run(_run(target, command, terminal, transport))
    except PluginError as error:
        print(escape_terminal(str(error)), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted: what was started goes on on the server", file=sys.stderr)
        return INTERRUPTED


def _completion(command: Completion, terminal: Terminal) -> int:
    if command.words is not None:
        for word in completion.candidates(command.words or ("",)):
            terminal.line(word)
    else:
        terminal.out.write(completion.SCRIPTS[command.shell])
    return SUCCEEDED


async def _run(target: kubeconfig.Target, command: Command, terminal: Terminal,
               transport: httpx.AsyncBaseTransport | None) -> int:
    kube = KubeClient(target.connection, timeout=REQUEST_TIMEOUT, transport=transport)
    try:
        return await run_command(NotifierAPI(kube, target.namespace), command, terminal)
    finally:
        await kube.aclose()


async def run_command(api: NotifierAPI, command: Command, terminal: Terminal) -> int:
    """Run `command`; its exit code (a PluginError propagates, with its own)."""
    if isinstance(command, NotifyPod):
        return await notify.run(api, command, terminal)
    if isinstance(command, NotifySelector):
        return await fanout.run(api, command, terminal)
    if isinstance(command, ListNotifiers):
        return await listing.run(api, command, terminal)
    if isinstance(command, CanI):
        return await access.run(api, command, terminal)
    if isinstance(command, Release):
        return await release.run(api, command, terminal)
    if isinstance(command, VerifyWindow):
        return await verify_window.run(api, command, terminal)
    raise AssertionError(f"no runner for {command!r}")


if __name__ == "__main__":
    sys.exit(main())
