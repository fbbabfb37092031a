"""hack/check_containerfile.py: the repository's Containerfile passes, and each kind of mistake
it guards against, made in a copy, is reported."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from check_containerfile import Checker, lock_problems, main, read_lock
from localcluster.layout import REPO_ROOT

FILES = ["Containerfile", "pyproject.toml", "LICENSE", "requirements/runtime.lock",
         "requirements/build.lock", "apiservice/deployment.yaml"]

OLD_CONTAINERFILE = """\
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY apiserver ./apiserver
COPY certs ./certs
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
ENTRYPOINT ["container-notifier-apiserver"]
"""
"""The Containerfile before issue 13: it removed its WORKDIR, among other things."""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A build context with the repository's Containerfile, pyproject.toml, locks and
    Deployment, and the packages as empty modules."""
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    for package in ("apiserver", "certs"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def problems(root: Path) -> list[str]:
    return Checker(root).run()


def edit(root: Path, name: str, change: Callable[[str], str]) -> None:
    path = root / name
    text = path.read_text()
    changed = change(text)
    assert changed != text, f"the edit of {name} changed nothing"
    path.write_text(changed)


def test_the_repository_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(REPO_ROOT)]) == 0
    assert capsys.readouterr().err == ""


def test_the_copy_passes(checkout: Path) -> None:
    assert problems(checkout) == []


def test_the_old_containerfile_fails_on_each_of_its_mistakes(checkout: Path) -> None:
    (checkout / "Containerfile").write_text(OLD_CONTAINERFILE)
    (checkout / "README.md").write_text("")
    found = "\n".join(problems(checkout))
    assert "Containerfile:1: FROM 'python:3.11-slim' is not pinned by digest" in found
    assert "Containerfile:6: `rm -rf /src` removes the WORKDIR /src" in found
    assert "pip install . without --no-deps" in found
    assert "no RUN installs requirements/runtime.lock" in found
    assert "PYTHONDONTWRITEBYTECODE=1" in found
    assert "no LABEL org.opencontainers.image.revision" in found


def _replace(old: str, new: str) -> Callable[[str], str]:
    return lambda text: text.replace(old, new)


def _sub(pattern: str, new: str) -> Callable[[str], str]:
    return lambda text: re.sub(pattern, new, text, count=1, flags=re.MULTILINE)


MISTAKES = {
    "unpinned base": (_sub(r"@sha256:[0-9a-f]{64}", ""), "is not pinned by digest"),
    "short digest": (_sub(r"(@sha256:[0-9a-f]{60})[0-9a-f]{4}", r"\1"), "not pinned by digest"),
    "workdir removed": (_replace(' check \\\n', ' check && rm -rf /src \\\n'),
                        "`rm -rf /src` removes the WORKDIR /src"),
    "workdir removed relatively": (_replace(' check \\\n', ' check && cd .. && rm -r ./ \\\n'),
                                   "removes the WORKDIR /src"),
    "a parent of the workdir removed": (
        _replace("WORKDIR /opt/container-notifier\n",
                 "WORKDIR /opt/container-notifier\nRUN rm -rf /opt\n"),
        "`rm -rf /opt` removes the WORKDIR /opt/container-notifier"),
    "missing copy source": (_replace("COPY pyproject.toml LICENSE ./",
                                     "COPY pyproject.toml LICENSE README.md ./"),
                            "COPY source 'README.md' does not exist"),
    "package not copied": (_replace("COPY certs ./certs\n", ""),
                           "builds /src, but no COPY put certs at /src/certs"),
    "package copied elsewhere": (_replace("COPY certs ./certs", "COPY certs ./lib/certs"),
                                 "no COPY put certs at /src/certs"),
    "lock without hashes checked": (_replace(" install --require-hashes \\", " install \\"),
                                    "without --require-hashes"),
    "lock not copied": (_replace("build.lock requirements/runtime.lock ./", "build.lock ./"),
                        "pip -r requirements/runtime.lock: no COPY put that file in the image"),
    "a package from the index": (_replace("WORKDIR /opt/container-notifier",
                                          "RUN pip install requests\nWORKDIR /opt/x"),
                                 "pip install 'requests': not a local directory"),
    "package with its dependencies": (_replace(" install --no-deps --no-index", " install"),
                                      "without --no-deps"),
    "build isolation fetches setuptools": (
        _replace(" --no-deps --no-build-isolation", " --no-deps"),
        "may fetch unhashed build dependencies"),
    "no final workdir": (_replace("WORKDIR /opt/container-notifier\n", ""),
                         "the final stage sets no WORKDIR"),
    "user by name": (_replace("USER 65532:65532", "USER nobody"), "is not numeric"),
    "root user": (_replace("USER 65532:65532", "USER 0:0"), "is root"),
    "user unlike the deployment": (_replace("USER 65532:65532", "USER 1000:1000"),
                                   "differs from the runAsUser [65532]"),
    "no user": (_sub(r"^USER .*\n", ""), "the final stage sets no USER"),
    "bytecode written at runtime": (
        _replace("    PYTHONDONTWRITEBYTECODE=1 \\\n    PYTHONUNBUFFERED", "    PYTHONUNBUFFERED"),
        "does not set ENV PYTHONDONTWRITEBYTECODE=1"),
    "shell-form entrypoint": (_replace('ENTRYPOINT ["container-notifier-apiserver"]',
                                       "ENTRYPOINT container-notifier-apiserver"),
                              "is not in exec form"),
    "entrypoint not a script": (_replace('["container-notifier-apiserver"]', '["python"]'),
                                "does not start with a script of pyproject.toml"),
    "label missing": (_sub(r'^\s*org\.opencontainers\.image\.source=.*\n', ""),
                      "no LABEL org.opencontainers.image.source"),
    "version label not a build argument": (_replace('image.version="${VERSION}"',
                                                    'image.version="0.1.0"'),
                                           "image.version='0.1.0' does not come from a build"),
    "license unlike pyproject": (_replace('licenses="Apache-2.0"', 'licenses="MIT"'),
                                 "pyproject.toml declares 'Apache-2.0'"),
    "unknown instruction": (_replace("COPY pyproject.toml LICENSE ./",
                                     "ADD pyproject.toml LICENSE ./"),
                            "ADD is not an instruction"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_in_the_containerfile_is_reported(checkout: Path, mistake: str) -> None:
    change, expected = MISTAKES[mistake]
    edit(checkout, "Containerfile", change)
    found = problems(checkout)
    assert any(expected in problem for problem in found), found


def test_removing_another_directory_is_no_problem(checkout: Path) -> None:
    edit(checkout, "Containerfile", _replace(' check \\\n', ' check && rm -rf "$WHEELS" \\\n'))
    assert problems(checkout) == []


def test_the_deployment_user_must_match(checkout: Path) -> None:
    edit(checkout, "apiservice/deployment.yaml", _replace("runAsUser: 65532", "runAsUser: 1001"))
    assert any("differs from the runAsUser [1001]" in problem for problem in problems(checkout))


def test_a_dependency_missing_from_the_lock(checkout: Path) -> None:
    edit(checkout, "requirements/runtime.lock", _sub(r"^httpx==.*\n(^\s+--hash.*\n)+", ""))
    found = problems(checkout)
    assert any("httpx (pyproject.toml requires 'httpx>=0.27') is not locked" in problem
               for problem in found), found


def test_a_dependency_pyproject_dropped_is_stale_in_the_lock(checkout: Path) -> None:
    edit(checkout, "pyproject.toml", _replace('    "httpx>=0.27",\n', ""))
    found = problems(checkout)
    assert any("httpx is locked for container-notifier (pyproject.toml), which no longer "
               "requires it" in problem for problem in found), found


def test_the_build_lock_pins_the_build_system(checkout: Path) -> None:
    edit(checkout, "pyproject.toml", _replace('requires = ["setuptools>=77"]',
                                              'requires = ["setuptools>=999"]'))
    found = problems(checkout)
    assert any(problem.startswith("requirements/build.lock:") and "does not satisfy "
               "pyproject.toml's 'setuptools>=999'" in problem for problem in found), found


def test_a_lock_resolved_for_another_python(checkout: Path) -> None:
    edit(checkout, "requirements/runtime.lock", _replace("with Python 3.11", "with Python 3.12"))
    assert any("resolved with Python 3.12, but the image runs Python 3.11" in problem
               for problem in problems(checkout))


LOCK = """\
alpha==1.0 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via demo (pyproject.toml)
beta==2.0
    # via
    #   alpha
    #   gamma
"""


def test_read_lock_reads_pins_hashes_and_parents() -> None:
    entries = read_lock(LOCK)
    assert entries["alpha"].version == "1.0"
    assert entries["alpha"].hashes == ("sha256:aa", "sha256:bb")
    assert entries["alpha"].via == ("demo (pyproject.toml)",)
    assert entries["beta"].hashes == ()
    assert entries["beta"].via == ("alpha", "gamma")


def test_read_lock_refuses_an_unpinned_requirement() -> None:
    with pytest.raises(ValueError, match="'alpha>=1' is not pinned with =="):
        read_lock("alpha>=1\n")


def test_lock_problems_name_each_gap() -> None:
    found = lock_problems(LOCK, ["alpha>=2", "delta", "windows-only; sys_platform == 'win32'"],
                          "demo")
    assert any("beta==2.0 has no --hash" in problem for problem in found)
    assert any("alpha==1.0 does not satisfy pyproject.toml's 'alpha>=2'" in problem
               for problem in found)
    assert any("delta (pyproject.toml requires 'delta') is not locked" in problem
               for problem in found)
    assert any("beta is locked for gamma, which is not locked itself" in problem
               for problem in found)
    assert not any("windows-only" in problem for problem in found)


def test_lock_problems_find_what_an_installed_locked_package_requires() -> None:
    """httpx is installed here at the version the repository locks: without httpcore, its
    requirement, the lock is incomplete."""
    entries = read_lock((REPO_ROOT / "requirements/runtime.lock").read_text())
    httpx = entries["httpx"]
    lock = f"httpx=={httpx.version} \\\n    --hash={httpx.hashes[0]}\n"
    found = lock_problems(lock, [], "demo")
    assert any("requires 'httpcore" in problem and "which is not locked" in problem
               for problem in found), found
