"""docs/security.md, "The server's own identity": its checks, run as the page writes them,
answer what the page shows for the server's ServiceAccount."""

from __future__ import annotations

import pytest

from tests.support.console import check_shown, run
from tests.support.doc_commands import console_transcript
from tests.support.kube import Cluster

pytestmark = pytest.mark.cluster


def test_the_servers_rights_are_what_the_page_shows(cluster: Cluster) -> None:
    steps = console_transcript("docs/security.md", "The server's own identity")
    assert steps
    for step in steps:
        assert step.output, f"every check shows its answer: {step.command}"
        check_shown(run(cluster, step.command), step.output)
