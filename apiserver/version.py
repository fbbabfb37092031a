"""The server's version: the installed package's, else the checkout's pyproject.toml."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

DISTRIBUTION = "container-notifier"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def version(pyproject: Path = PYPROJECT) -> str:
    """The installed distribution's version; from a checkout that is not installed, the
    version in its pyproject.toml; ``unknown`` if neither is there."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return "unknown"
