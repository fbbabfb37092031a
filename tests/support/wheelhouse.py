"""The wheelhouse: every wheel the lock files pin, downloaded before the tests by `make wheels`
(`make test` runs it), so that a test that installs something does so with no index and never
talks to a package registry."""

from __future__ import annotations

import os
from pathlib import Path

WHEELHOUSE = Path(os.environ.get("CN_WHEELHOUSE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "container-notifier" / "wheels")
"""The Makefile's CN_WHEELHOUSE, with the same default."""


def missing() -> str | None:
    """Why the wheelhouse cannot serve an install (None if it can)."""
    if any(WHEELHOUSE.glob("*.whl")):
        return None
    return (f"no wheels in {WHEELHOUSE} (CN_WHEELHOUSE): run `make wheels` (`make test` runs it) "
            "to download the ones requirements/*.lock pin")
