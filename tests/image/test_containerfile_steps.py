"""The Containerfile's steps work, performed without a container engine
(tests/support/containerfile_steps.py): the locked dependencies install with --require-hashes,
offline (no index: only the wheels `make wheels` downloaded into $CN_WHEELHOUSE, by default
~/.cache/container-notifier/wheels; `make test` runs it first), the package with --no-deps, and
the server's script then runs from the final stage's WORKDIR as it would in a read-only
container: nothing needs $HOME and nothing is written, bytecode included.

What only a real build shows is not covered: the base image's own Python (this interpreter
stands in for it), USER and file ownership, the OCI labels (hack/check_containerfile.py checks
those statically)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.layout import REPO_ROOT
from tests.support import wheelhouse
from tests.support.containerfile_steps import Result, StepFailed, perform
from tests.support.wheelhouse import WHEELHOUSE

VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Result]:
    if reason := wheelhouse.missing():
        pytest.fail(reason, pytrace=False)
    # no index, only the wheelhouse; this machine's pip configuration files stay out, as they
    # are out of an image build (a file: URL, as pip splits PIP_FIND_LINKS at whitespace)
    overrides: dict[str, str | None] = {
        "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELHOUSE.as_uri(), "PIP_CONFIG_FILE": os.devnull}
    scratch = tmp_path_factory.mktemp("image")
    try:
        result = perform(REPO_ROOT / "Containerfile", REPO_ROOT, scratch,
                         build_args={"VERSION": VERSION, "REVISION": "test"}, overrides=overrides)
    except StepFailed as error:
        error.add_note(f"pip had no index, only {WHEELHOUSE}: if a pinned wheel is missing "
                       "there, run `make wheels`")
        raise
    yield result
    shutil.rmtree(scratch)  # about 150 MB: not kept among pytest's last temporary directories


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time."""
    found = {}
    for directory, names, files in os.walk(root):
        for name in names + files:
            path = Path(directory, name)
            status = path.lstat()
            found[str(path.relative_to(root))] = (status.st_size, status.st_mtime_ns)
    return found


def run_entrypoint(image: Result, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    """The ENTRYPOINT with `args`, from the WORKDIR, in the final stage's environment and a
    HOME that does not exist (`env` changes or, None, removes variables)."""
    run_env: dict[str, str] = {**image.env, "HOME": str(image.root / "nonexistent")}
    for key, value in env.items():
        if value is None:
            run_env.pop(key, None)
        else:
            run_env[key] = value
    return subprocess.run([*image.entrypoint, *args], cwd=image.workdir, env=run_env,
                          capture_output=True, text=True, timeout=60)


def test_the_entrypoint_prints_the_package_version_from_the_workdir(image: Result) -> None:
    assert image.entrypoint == ["container-notifier-apiserver"]
    assert image.workdir.is_dir()
    before = snapshot(image.root)
    result = run_entrypoint(image, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"container-notifier {VERSION}\n"
    assert snapshot(image.root) == before


def test_help_imports_the_server_without_writing_bytecode_or_anything_else(
        image: Result) -> None:
    """Even allowed to write bytecode, importing the whole server writes nothing: every module
    was compiled at build time."""
    before = snapshot(image.root)
    result = run_entrypoint(image, "--help", PYTHONDONTWRITEBYTECODE=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: container-notifier-apiserver")
    assert "--secure-port" in result.stdout
    assert snapshot(image.root) == before


def test_the_image_runs_the_installed_package_and_keeps_no_build_leftovers(
        image: Result) -> None:
    python = [str(path) for path in image.root.glob("opt/*/venv/bin/python")]
    assert len(python) == 1
    result = subprocess.run(
        [*python, "-c", "import apiserver, certs, fastapi, kubernetes\n"
         "for module in (apiserver, certs):\n    print(module.__file__)"],
        cwd=image.workdir, env=image.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    files = result.stdout.split()
    assert len(files) == 2
    assert all(Path(file).is_relative_to(image.root) for file in files), files
    assert not (image.root / "src").exists()
    assert not list(image.root.glob("opt/build-venv"))
    assert not list(image.root.glob("tmp/wheels"))
