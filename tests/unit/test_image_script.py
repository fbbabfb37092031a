"""hack/image.sh (`make image`): the builder it picks, the command it runs (the one
docs/image.md shows), and its one-line error when there is no builder."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from localcluster.layout import REPO_ROOT
from tests.support.doc_commands import console_commands

SCRIPT = REPO_ROOT / "hack" / "image.sh"
TOOLS = ("bash", "sed", "head", "git", "dirname")
"""What the script needs besides a builder: linked into the PATH of each run."""
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH directory with only the script's tools (no builder unless a test adds one)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run hack/image.sh"
        (directory / tool).symlink_to(found)
    return directory


def fake(bin_dir: Path, name: str, info_status: int = 0) -> Path:
    """A builder named `name` that records its arguments (one a line) and exits 0, except
    `info` (docker's engine probe), which exits `info_status`."""
    record = bin_dir.parent / f"{name}.args"
    (bin_dir / name).write_text(
        f'#!/bin/sh\nif [ "$1" = info ]; then exit {info_status}; fi\n'
        f'printf "%s\\n" "$PWD" "$@" > {record}\n')
    (bin_dir / name).chmod(0o755)
    return record


def run(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], env={"PATH": str(bin_dir), **env},
                          capture_output=True, text=True, timeout=30)


def revision() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def recorded(record: Path) -> tuple[str, list[str]]:
    cwd, *args = record.read_text().splitlines()
    return cwd, args


def test_no_builder_is_one_line_naming_what_to_install(bin_dir: Path) -> None:
    result = run(bin_dir)
    assert result.returncode == 3  # make release skips the image on it
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert "install podman" in result.stderr


def test_docker_without_an_engine_says_so(bin_dir: Path) -> None:
    record = fake(bin_dir, "docker", info_status=1)
    result = run(bin_dir)
    assert result.returncode == 3
    assert len(result.stderr.splitlines()) == 1
    assert "docker is installed but its engine is not running" in result.stderr
    assert not record.exists()


def test_docker_with_an_engine_builds(bin_dir: Path) -> None:
    record = fake(bin_dir, "docker")
    assert run(bin_dir).returncode == 0
    assert recorded(record)[1][0] == "build"


def test_podman_comes_first_and_builds_the_repository_with_version_and_revision(
        bin_dir: Path) -> None:
    podman, docker = fake(bin_dir, "podman"), fake(bin_dir, "docker")
    assert run(bin_dir, IMAGE="registry.example/cn", TAG="dev").returncode == 0
    cwd, args = recorded(podman)
    assert Path(cwd) == REPO_ROOT
    assert args == ["build", "-f", "Containerfile", "--build-arg", f"VERSION={VERSION}",
                    "--build-arg", f"REVISION={revision()}", "-t", "registry.example/cn:dev", "."]
    assert not docker.exists()


def test_the_documented_build_command_is_what_make_image_runs(bin_dir: Path) -> None:
    podman = fake(bin_dir, "podman")
    assert run(bin_dir).returncode == 0
    documented = [command for command in console_commands("docs/image.md", "Build")
                  if command.startswith("podman build")]
    assert len(documented) == 1
    command = documented[0].replace("\\\n", " ").replace("$(git rev-parse HEAD)", revision())
    words = shlex.split(command)
    assert words == ["podman", *recorded(podman)[1]]


def test_every_make_target_in_the_image_page_exists() -> None:
    targets = set(re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE))
    used = {command.split()[1] for command in console_commands("docs/image.md")
            if command.startswith("make ")}
    assert used >= {"image", "lock"}
    assert used <= targets


def test_the_documented_image_name_is_the_default(bin_dir: Path) -> None:
    podman = fake(bin_dir, "podman")
    assert run(bin_dir).returncode == 0
    tag = recorded(podman)[1][-2]
    assert tag == f"container-notifier:{VERSION}"
    assert f"**`{tag.rsplit(':', 1)[0]}`**" in (REPO_ROOT / "docs" / "image.md").read_text()


def test_image_archive_saves_what_was_built(bin_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "podman.log"
    (bin_dir / "podman").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "podman").chmod(0o755)
    archive = tmp_path / "image.tar"
    assert run(bin_dir, IMAGE_ARCHIVE=str(archive), TAG="dev").returncode == 0
    build, save = log.read_text().splitlines()
    assert build.startswith("build ") and build.endswith("-t container-notifier:dev .")
    assert save == f"save --format docker-archive -o {archive} container-notifier:dev"
