"""`kubectl notify` escapes terminal control characters (issue 20), end to end: a notifier on a
real pod (kwok runs its command) prints ESC, BEL, CR and OSC sequences; the installed plugin,
run as a subprocess against the local control plane, prints them escaped, never raw
(docs/kubectl-notify.md, "Control characters")."""

from __future__ import annotations

import pytest

from tests.support.kube import Cluster, User
from tests.support.notify import declare, exec_notifier
from tests.support.plugin import Plugin, bind_cluster_role, install

pytestmark = pytest.mark.cluster

HOSTILE = (r"printf '\033]0;owned\007\033]8;;https://evil.example/\033\\click\033]8;;\033\\"
           r"\033[2J\033[31mred\033[0m\rfake ok\007\n'; printf 'bold \033[1merror\n' >&2; exit 1")
"""Sets the window title (OSC 0, ended by BEL), plants a hyperlink (OSC 8, ended by ST),
clears the screen and colours (CSI), overwrites the line (CR) and rings the bell; then fails."""
SHOWN = r"^[]0;owned\a^[]8;;https://evil.example/^[\click^[]8;;^[\^[[2J^[[31mred^[[0m\rfake ok\a"
CONTROLS = {chr(code) for code in (*range(0x20), *range(0x7f, 0xa0))} - {"\n", "\t"}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Plugin:
    return install(tmp_path_factory.mktemp("kubectl-notify-escaping"))


@pytest.fixture
def pod(cluster: Cluster, namespace: str) -> str:
    (deployed,) = cluster.deploy(namespace, "term", containers=("app",),
                                 annotations=declare(app=[exec_notifier("hostile", HOSTILE)]))
    return str(deployed["metadata"]["name"])


@pytest.fixture
def bot(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("kn-term-bot")
    bind_cluster_role(cluster, namespace, "container-notifier:notifier", user=user.name)
    bind_cluster_role(cluster, namespace, "view", user=user.name)
    return user


@pytest.mark.parametrize("wide", [False, True])
def test_a_notifiers_control_characters_are_printed_escaped(
        plugin: Plugin, namespace: str, pod: str, bot: User, wide: bool) -> None:
    result = plugin.run(pod, "hostile", "-n", namespace, *(["-o", "wide"] if wide else []),
                        kubeconfig=bot.kubeconfig)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert set(result.stdout + result.stderr) & CONTROLS == set(), repr(result.stdout)
    lines = result.stdout.splitlines()
    assert lines[0].split()[1:3] == ["Failed", "(NonZeroExitCode)"], lines
    header, row = lines[1], lines[2]
    output = header.index("OUTPUT")
    assert row[output:] == (SHOWN[:57] + "..."), lines  # the OUTPUT column, cut to 60
    if wide:
        assert "    " + SHOWN in lines
        assert r"    bold ^[[1merror" in lines
