"""`make release`: every artifact of a release, built offline into dist/ (docs/release.md).

    PYTHONPATH=hack python hack/release.py [--dist DIR] [ARTIFACT ...]

ARTIFACT is any of ARTIFACTS (default: all of them, in that order):

- server: the server's sdist and its wheel (built from the sdist, so the sdist is complete);
- plugin: the kubectl notify plugin's sdist and wheel (plugins/pypi/: kubectl_notify alone,
  its dependencies httpx and PyYAML);
- krew: kubectl-notify-krew-v<version>.tar.gz (kubectl-notify, a zipapp of the plugin and its
  pure-Python dependencies, and LICENSE) and notify.yaml, the krew manifest with the archive's
  sha256 (plugins/krew/notify.yaml.in); builds the plugin wheel too;
- chart: `helm package` of charts/container-notifier (helm from hack/build.sh);
- image: `hack/image.sh` with IMAGE_ARCHIVE (the only step that is not offline); skipped with
  one line when this machine has no container builder.

Offline: the build backend (setuptools, requirements/build.lock) and the plugin's dependencies
come from the wheelhouse `make wheels` fills ($CN_WHEELHOUSE), with no index. The version is
pyproject.toml's, the one definition; the chart's version and appVersion must equal it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import string
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import venv
import zipapp
from collections.abc import Sequence
from pathlib import Path

import yaml

from localcluster.__main__ import build_binaries
from localcluster.layout import REPO_ROOT

ARTIFACTS = ("server", "plugin", "krew", "chart", "image")
DIST = REPO_ROOT / "dist"
WHEELHOUSE = Path(os.environ.get("CN_WHEELHOUSE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "container-notifier" / "wheels")
"""Where `make wheels` put every wheel the lock files pin (the Makefile's CN_WHEELHOUSE, with
the same default)."""
SERVER_FILES = ("pyproject.toml", "LICENSE", "README.md", "apiserver", "certs")
"""What the server's sdist is made of: pyproject.toml, its licence file, and the packages its
packages.find includes (tests/unit/test_release.py checks the two agree)."""
PLUGIN_PROJECT = REPO_ROOT / "plugins" / "pypi"
PLUGIN_DISTRIBUTION = "kubectl_notify"
"""The plugin's distribution name as wheel and sdist file names spell it (kubectl-notify)."""
KREW = REPO_ROOT / "plugins" / "krew"
CHART = REPO_ROOT / "charts" / "container-notifier"
KREW_URI_BASE = "https://github.com/container-notifier/container-notifier/releases/download"
"""Where the manifest says the archive is (a GitHub release of that tag): nothing is uploaded
there by this script; override it with --krew-uri-base for where you upload it."""
NO_BUILDER = 3
"""hack/image.sh's exit code when this machine has no container builder."""
ZIPAPP_SKIPPED = (".so", ".pyd", ".pyc")
"""Files of the dependencies not put in the zipapp: compiled extensions (PyYAML's optional
libyaml binding; the pure-Python code is used instead, on any platform) and bytecode."""


class ReleaseError(Exception):
    """A step failed; the message says which and what to do."""


def version() -> str:
    return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])


def wheelhouse() -> Path:
    if not any(WHEELHOUSE.glob("setuptools-*.whl")):
        raise ReleaseError(f"no setuptools wheel in the wheelhouse {WHEELHOUSE}: run `make "
                           "wheels` first (or set CN_WHEELHOUSE)")
    return WHEELHOUSE


def run(argv: Sequence[str | Path], what: str, **kwargs: object) -> None:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise ReleaseError(f"{what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")


class Release:
    """Builds artifacts into `dist` with the build environment made in `work`."""

    def __init__(self, dist: Path, work: Path, wheels: Path, krew_uri_base: str) -> None:
        self.dist, self.work, self.wheels = dist, work, wheels
        self.krew_uri_base = krew_uri_base.rstrip("/")
        self.version = version()
        self._python: Path | None = None

    def build_python(self) -> Path:
        """The Python of a virtual environment holding the locked build backend (setuptools
        from requirements/build.lock, hashes checked, no index), made once."""
        if self._python is None:
            directory = self.work / "build-venv"
            venv.create(directory, with_pip=True)
            python = directory / "bin" / "python"
            run([python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                 self.wheels, "--require-hashes", "-r", REPO_ROOT / "requirements" / "build.lock"],
                "installing the build backend from the wheelhouse")
            self._python = python
        return self._python

    def backend(self, project: Path, hook: str, *args: str) -> Path:
        """Call the PEP 517 `hook` (build_sdist, build_wheel) of setuptools in `project`,
        writing into dist; the file it built."""
        code = ("import sys, setuptools.build_meta as backend\n"
                f"print(backend.{hook}(*sys.argv[1:]))")
        done = subprocess.run([str(self.build_python()), "-c", code, str(self.dist), *args],
                              cwd=project, capture_output=True, text=True)
        if done.returncode != 0:
            raise ReleaseError(f"{hook} of {project} failed:\n{done.stdout}{done.stderr}")
        return self.dist / done.stdout.strip().splitlines()[-1]

    def sdist_and_wheel(self, project: Path) -> list[Path]:
        """The sdist of `project`, and the wheel built from that sdist unpacked."""
        sdist = self.backend(project, "build_sdist")
        unpacked = self.work / "sdists"
        with tarfile.open(sdist) as archive:
            archive.extractall(unpacked, filter="data")
        source = unpacked / sdist.name.removesuffix(".tar.gz")
        return [sdist, self.backend(source, "build_wheel")]

    def server(self) -> list[Path]:
        """Built from a copy of what the server's sdist holds (SERVER_FILES), so the build
        writes nothing into the checkout (no egg-info over the editable install's)."""
        project = self.work / "server"
        if project.exists():
            shutil.rmtree(project)
        project.mkdir()
        for name in SERVER_FILES:
            source = REPO_ROOT / name
            if source.is_dir():
                shutil.copytree(source, project / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy(source, project / name)
        return self.sdist_and_wheel(project)

    def plugin(self) -> list[Path]:
        """plugins/pypi/ with LICENSE, kubectl_notify/ and VERSION copied beside it."""
        project = self.work / "plugin"
        if project.exists():
            shutil.rmtree(project)
        shutil.copytree(PLUGIN_PROJECT, project)
        shutil.copy(REPO_ROOT / "LICENSE", project / "LICENSE")
        shutil.copytree(REPO_ROOT / "kubectl_notify", project / "kubectl_notify",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (project / "VERSION").write_text(self.version + "\n")
        return self.sdist_and_wheel(project)

    def plugin_wheel(self) -> Path:
        found = sorted(self.dist.glob(f"{PLUGIN_DISTRIBUTION}-{self.version}-*.whl"))
        return found[0] if found else self.plugin()[1]

    def krew(self) -> list[Path]:
        """The zipapp (the plugin wheel and its dependencies installed from dist and the
        wheelhouse, no index), its archive, and the manifest with the archive's sha256."""
        wheel = self.plugin_wheel()
        tree = self.work / "zipapp"
        if tree.exists():
            shutil.rmtree(tree)
        run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-compile",
             "--find-links", self.dist, "--find-links", self.wheels, "--target", tree, wheel],
            "installing the plugin and its dependencies for the zipapp")
        shutil.rmtree(tree / "bin", ignore_errors=True)
        shutil.copy(KREW / "zipapp_main.py", tree / "__main__.py")
        executable = self.work / "kubectl-notify"
        zipapp.create_archive(tree, executable, interpreter="/usr/bin/env python3",
                              filter=lambda path: not (path.suffix in ZIPAPP_SKIPPED
                                                       or "__pycache__" in path.parts))
        archive = self.dist / f"kubectl-notify-krew-v{self.version}.tar.gz"
        write_archive(archive, {"kubectl-notify": (executable.read_bytes(), 0o755),
                                "LICENSE": ((REPO_ROOT / "LICENSE").read_bytes(), 0o644)})
        manifest = self.dist / "notify.yaml"
        manifest.write_text(string.Template((KREW / "notify.yaml.in").read_text()).substitute(
            version=self.version, sha256=sha256(archive),
            uri=f"{self.krew_uri_base}/v{self.version}/{archive.name}"))
        return [archive, manifest]

    def chart(self) -> list[Path]:
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        if (str(chart["version"]), str(chart["appVersion"])) != (self.version, self.version):
            raise ReleaseError(f"charts/container-notifier/Chart.yaml: version {chart['version']}"
                               f" and appVersion {chart['appVersion']} must both be the "
                               f"package version {self.version} (pyproject.toml); set them")
        helm = build_binaries() / "helm"
        run([helm, "package", CHART, "--destination", self.dist], "helm package")
        return [self.dist / f"container-notifier-{self.version}.tgz"]

    def image(self) -> list[Path]:
        archive = self.dist / f"container-notifier-image-{self.version}.tar"
        done = subprocess.run(["bash", str(REPO_ROOT / "hack" / "image.sh")],
                              env={**os.environ, "IMAGE_ARCHIVE": str(archive)},
                              capture_output=True, text=True)
        if done.returncode == NO_BUILDER:
            print(f"image: skipped: {done.stderr.strip().removeprefix('error: ')}")
            return []
        if done.returncode != 0:
            raise ReleaseError(f"make image failed (exit {done.returncode}):\n"
                               f"{done.stdout}{done.stderr}")
        return [archive]


def write_archive(path: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """A tar.gz of `files` (name: content, mode), owned by root, dated 0: the same bytes for
    the same content."""
    with open(path, "wb") as raw:
        with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT,
                          compresslevel=9) as archive:
            for name, (content, mode) in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(content), mode, 0
                archive.addfile(info, io.BytesIO(content))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/release.py", description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", nargs="*", metavar="ARTIFACT",
                        help=f"what to build: any of {', '.join(ARTIFACTS)} (default: all)")
    parser.add_argument("--dist", type=Path, default=DIST,
                        help="where to write them (default: dist/ of the checkout)")
    parser.add_argument("--krew-uri-base", default=KREW_URI_BASE,
                        help="the URL the krew manifest's uri starts with, before "
                             "/v<version>/<archive> (default: %(default)s)")
    args = parser.parse_args(argv)
    if unknown := [a for a in args.artifacts if a not in ARTIFACTS]:
        parser.error(f"unknown artifact {', '.join(unknown)}: choose from {', '.join(ARTIFACTS)}")
    chosen = [a for a in ARTIFACTS if a in args.artifacts] or list(ARTIFACTS)
    args.dist.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="release-") as work:
            release = Release(args.dist.resolve(), Path(work), wheelhouse(), args.krew_uri_base)
            for artifact in chosen:
                for path in getattr(release, artifact)():
                    print(f"{artifact}: {path}")
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
