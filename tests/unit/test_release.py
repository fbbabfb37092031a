"""`make release` (hack/release.py): what dist/ holds after an offline build — the server's and
the plugin's sdist and wheel, the krew archive whose sha256 the generated manifest carries, the
packaged chart — and that the plugin's distribution does not pull the server."""

from __future__ import annotations

import email
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import release
import yaml

from localcluster.layout import REPO_ROOT
from tests.support import wheelhouse

VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
BUILT = ("server", "plugin", "krew", "chart")
"""What the test builds: all but the image (which needs a builder and the network)."""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if reason := wheelhouse.missing():
        raise AssertionError(reason)
    directory = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, str(REPO_ROOT / "hack" / "release.py"), "--dist",
                           str(directory), *BUILT], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return directory


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def test_dist_holds_every_artifact_and_nothing_else(dist: Path) -> None:
    assert sorted(path.name for path in dist.iterdir()) == sorted([
        f"container_notifier-{VERSION}.tar.gz", f"container_notifier-{VERSION}-py3-none-any.whl",
        f"kubectl_notify-{VERSION}.tar.gz", f"kubectl_notify-{VERSION}-py3-none-any.whl",
        f"kubectl-notify-krew-v{VERSION}.tar.gz", "notify.yaml",
        f"container-notifier-{VERSION}.tgz"])


def test_the_plugin_wheel_needs_only_httpx_and_pyyaml_as_the_server_pins_them(
        dist: Path) -> None:
    plugin = metadata(dist / f"kubectl_notify-{VERSION}-py3-none-any.whl")
    assert (plugin["Name"], plugin["Version"], plugin["License-Expression"]) == (
        "kubectl-notify", VERSION, "Apache-2.0")
    requires = plugin.get_all("Requires-Dist")
    assert sorted(requires) == ["httpx>=0.27", "pyyaml>=6"]
    server_dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())[
        "project"]["dependencies"]
    assert set(requires) <= set(server_dependencies)
    with zipfile.ZipFile(dist / f"kubectl_notify-{VERSION}-py3-none-any.whl") as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"kubectl_notify", f"kubectl_notify-{VERSION}.dist-info"}


def test_the_server_is_built_from_what_its_pyproject_names() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"][
        "include"]}
    assert set(release.SERVER_FILES) == {"pyproject.toml", "README.md",
                                         *project["project"]["license-files"], *packages}


def test_the_server_wheel_does_not_ship_the_plugin(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"container_notifier-{VERSION}-py3-none-any.whl") as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
        entry_points = next(wheel.read(n).decode() for n in wheel.namelist()
                            if n.endswith("entry_points.txt"))
    assert tops == {"apiserver", "certs", f"container_notifier-{VERSION}.dist-info"}
    assert "kubectl" not in entry_points
    assert metadata(dist / f"container_notifier-{VERSION}-py3-none-any.whl")[
        "License-Expression"] == "Apache-2.0"


def test_the_krew_manifest_carries_the_archives_sha256(dist: Path) -> None:
    archive = dist / f"kubectl-notify-krew-v{VERSION}.tar.gz"
    manifest = yaml.safe_load((dist / "notify.yaml").read_text())
    platform = manifest["spec"]["platforms"][0]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/v{VERSION}/{archive.name}")
    assert manifest["spec"]["version"] == f"v{VERSION}"
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-notify"]
    assert [f["from"] for f in platform["files"]] == ["kubectl-notify", "LICENSE"]
    assert platform["bin"] == "kubectl-notify"


def test_the_checked_in_manifest_is_a_template_with_no_hash() -> None:
    text = (REPO_ROOT / "plugins" / "krew" / "notify.yaml.in").read_text()
    assert 'sha256: "${sha256}"' in text
    assert not list((REPO_ROOT / "plugins" / "krew").glob("*.yaml"))


def test_the_krew_executable_runs_alone_with_python3(dist: Path, tmp_path: Path) -> None:
    """The zipapp brings its dependencies: run by an interpreter that has none of them (-I
    ignores the environment and the user's site-packages; -S the site-packages)."""
    with tarfile.open(dist / f"kubectl-notify-krew-v{VERSION}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    executable = tmp_path / "kubectl-notify"
    assert executable.stat().st_mode & 0o111
    assert executable.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    done = subprocess.run([sys.executable, "-I", "-S", str(executable), "list", "db-0"],
                          capture_output=True, text=True, env={"HOME": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: no kubeconfig: ~/.kube/config does not exist")
    with zipfile.ZipFile(executable) as app:
        assert not [n for n in app.namelist() if n.endswith((".so", ".pyc"))]
        assert {"kubectl_notify/__main__.py", "httpx/__init__.py", "yaml/__init__.py"} <= set(
            app.namelist())


def test_the_packaged_chart_is_the_charts_version(dist: Path) -> None:
    with tarfile.open(dist / f"container-notifier-{VERSION}.tgz") as chart:
        meta = yaml.safe_load(chart.extractfile("container-notifier/Chart.yaml").read())  # type: ignore[union-attr]
        names = chart.getnames()
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
    assert "container-notifier/values.schema.json" in names


def test_without_a_container_builder_the_image_is_skipped_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "sed", "head", "git", "dirname"):
        found = shutil.which(tool)
        assert found
        (tools / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    assert release.main(["--dist", str(tmp_path / "dist"), "image"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["image: skipped: make image needs a container builder: install podman "
                   "(apt-get install -y podman) or buildah, or docker with a running engine"]
    assert not list((tmp_path / "dist").iterdir())


def test_an_unknown_artifact_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        release.main(["wheel"])
    assert exited.value.code == 2
    assert "unknown artifact wheel: choose from server, plugin, krew, chart, image" in (
        capsys.readouterr().err)
