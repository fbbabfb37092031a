"""Shell completion: the scripts ``completion bash|zsh`` prints, and the candidates both they
and kubectl ask for.

``kubectl notify <TAB>`` is completed by kubectl (1.26+) itself, which runs the executable
``kubectl_complete-notify`` with the words typed so far and reads cobra's protocol back: one
candidate per line, then ``:4`` (no file completion). The scripts complete ``kubectl-notify``
run directly, through the hidden ``kubectl-notify __complete WORDS...`` (candidates only).
Pods and their notifiers are read from the cluster (a failure just completes nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from kubectl_notify import cli
from kubectl_notify.api import NotifierAPI
from kubectl_notify.commands.listing import declarations
from kubectl_notify.errors import PluginError
from kubectl_notify.escaping import escape_terminal
from kubectl_notify.kubeclient import KubeClient
from kubectl_notify.kubeconfig import Target, resolve

COBRA_NO_FILE_COMPLETION = ":4"
LOOKUP_TIMEOUT = 5.0

BASH = """# bash completion for kubectl-notify: source <(kubectl-notify completion bash)
_kubectl_notify() {
    local IFS=$'\\n'
    COMPREPLY=($(kubectl-notify __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -F _kubectl_notify kubectl-notify
"""

ZSH = """#compdef kubectl-notify
# zsh completion for kubectl-notify: source <(kubectl-notify completion zsh)
_kubectl_notify() {
    local -a candidates
    candidates=("${(@f)$(kubectl-notify __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -a candidates
}
compdef _kubectl_notify kubectl-notify
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH}


def candidates(words: Sequence[str]) -> list[str]:
    """What may come at the last of `words` (the word being completed, possibly "")."""
    current, before = (words[-1] if words else ""), list(words[:-1])
    scanner = _scanner()
    value_of = before[-1] if before and before[-1] in _value_flags(scanner) else ""
    try:
        scanned, _ = scanner.parse_known_intermixed_args(before[:-1] if value_of else before)
    except PluginError:
        return []
    positional: list[str] = scanned.args
    command = positional[0] if positional and positional[0] in cli.COMMANDS else ""
    if value_of in ("-o", "--output"):
        found = list(cli.LIST_OUTPUTS if command == "list" else cli.NOTIFY_OUTPUTS)
    elif current.startswith("-"):
        found = _flags(command)
    elif value_of:
        found = []
    else:
        found = _positional(command, positional, scanned)
    return [word for word in found if word.startswith(current)]


def _scanner() -> argparse.ArgumentParser:
    return cli._notify_parser(scan=True)


def _parser(command: str) -> argparse.ArgumentParser:
    return cli._PARSERS[command]() if command else cli._notify_parser()


def _flags(command: str) -> list[str]:
    return sorted(option for action in _parser(command)._actions
                  for option in action.option_strings if option.startswith("--"))


def _value_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions if action.nargs != 0
            for option in action.option_strings}


def _positional(command: str, positional: list[str], scanned: argparse.Namespace) -> list[str]:
    if command == "completion":
        return list(cli.SHELLS) if len(positional) == 1 else []
    if command in ("release", "verify-window"):
        return ["podnotifier/", "notification/"] if len(positional) == 1 else []
    if command in ("list", "can-i"):
        index = len(positional) - 1
    elif scanned.selector:
        return []
    else:
        index = len(positional)
    if index == 0:
        return ([] if command else list(cli.COMMANDS)) + _lookup(scanned, None)
    if index == 1 and command != "list":
        return _lookup(scanned, positional[-1])
    return []


def _lookup(scanned: argparse.Namespace, pod: str | None) -> list[str]:
    """Pod names, or the notifiers `pod` declares, from the cluster (nothing on any error)."""
    try:
        target = resolve(cli.Globals(scanned.kubeconfig, scanned.context, scanned.namespace))
        return asyncio.run(asyncio.wait_for(_names(target, pod), LOOKUP_TIMEOUT))
    except (PluginError, OSError, ValueError, TimeoutError):
        return []


async def _names(target: Target, pod: str | None) -> list[str]:
    kube = KubeClient(target.connection, timeout=LOOKUP_TIMEOUT)
    try:
        api = NotifierAPI(kube, target.namespace)
        if pod is None:
            return sorted(p["metadata"]["name"] for p in await api.pods(""))
        declared = declarations(await api.pod(cli._pod_name(pod)))
        return sorted({str(n.get("name")) for ns in declared.values() for n in ns})
    finally:
        await kube.aclose()


def kubectl_complete(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl_complete-notify`` console script (kubectl's plugin completion)."""
    words = list(sys.argv[1:] if argv is None else argv)
    for word in candidates(words or [""]):
        print(escape_terminal(word))
    print(COBRA_NO_FILE_COMPLETION)
    return 0
