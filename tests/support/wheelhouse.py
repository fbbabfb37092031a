"""The wheelhouse: every wheel the lock files pin, downloaded before the tests by `make wheels`
(`make test` runs it), so that a test that installs something does so with no index and never
talks to a package registry."""

from __future__ import annotations

from release import WHEELHOUSE

__all__ = ["WHEELHOUSE", "missing"]


def missing() -> str | None:
    """Why the wheelhouse cannot serve an install (None if it can)."""
    if any(WHEELHOUSE.glob("*.whl")):
        return None
    return (f"no wheels in {WHEELHOUSE} (CN_WHEELHOUSE): run `make wheels` (`make test` runs it) "
            "to download the ones requirements/*.lock pin")
