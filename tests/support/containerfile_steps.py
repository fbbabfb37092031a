"""Perform a Containerfile's steps without a container engine: every stage in a scratch root
directory, this interpreter standing in for the base image's Python.

An image path ``/p`` is ``<root>/p``: WORKDIR and COPY destinations are mapped, and so is every
``ARG``/``ENV`` value that is a literal absolute path (RUN steps name image paths only through
such variables, e.g. ``"$VENV/bin/pip"``, or relative to the WORKDIR). Every stage uses the same
root (so a virtual environment keeps its paths when a later stage copies it); when a stage ends
its root is moved aside for ``COPY --from``, and all of them are deleted when the last stage
ends, so what the final stage runs needs only what it copied.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from containerfile import Containerfile, Instruction, expand, read, variables_after, walk

BASE_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The base image's PATH after /usr/local/bin (which the stand-in interpreter replaces)."""


class StepFailed(RuntimeError):
    """A RUN step exited non-zero (the step, its exit status and output)."""


@dataclass(frozen=True)
class Result:
    root: Path
    """The final stage's root directory (image path ``/`` of the result)."""
    env: dict[str, str]
    """The final stage's environment with image paths mapped into `root`."""
    workdir: Path
    entrypoint: list[str]


def _ignored(relative: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if fnmatch.fnmatch(relative, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(relative, pattern[3:])) or (
                pattern.startswith("**/") and fnmatch.fnmatch(posixpath.basename(relative),
                                                              pattern[3:])):
            return True
    return False


def ignore_patterns(context: Path) -> list[str]:
    """The patterns of the context's .containerignore (else .dockerignore), as builders read
    them (without ``!`` exceptions, which this repository does not use)."""
    for name in (".containerignore", ".dockerignore"):
        path = context / name
        if path.is_file():
            lines = [line.strip() for line in path.read_text().splitlines()]
            return [line.rstrip("/") for line in lines if line and not line.startswith("#")]
    return []


class StageRunner:
    def __init__(self, containerfile: Containerfile, context: Path, scratch: Path,
                 build_args: dict[str, str], overrides: dict[str, str | None],
                 timeout: float) -> None:
        self.containerfile = containerfile
        self.context = context
        self.root = scratch / "root"
        self.saved = scratch / "stages"
        self.bin = scratch / "base-bin"
        self.build_args = build_args
        self.overrides = overrides
        self.timeout = timeout
        self.ignore = ignore_patterns(context)
        self.bin.mkdir(parents=True)
        for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
            (self.bin / name).symlink_to(getattr(sys, "_base_executable", sys.executable))

    def place(self, image_path: str) -> str:
        return str(self.root) + posixpath.normpath(image_path)

    def base_env(self, mapped: bool) -> dict[str, str]:
        prefix = str(self.bin) if mapped else "/usr/local/bin"
        env = {"PATH": f"{prefix}:{BASE_PATH}", "LANG": "C.UTF-8"}
        env["HOME"] = self.place("/root") if mapped else "/root"
        return env

    def run(self) -> Result:
        stage_roots: dict[str, Path] = {}
        for index, stage in enumerate(self.containerfile.stages):
            if self.root.exists():
                raise AssertionError("a stage root was left behind")
            self.root.mkdir()
            (self.root / "root").mkdir()
            image_env = {instruction.line: env for instruction, env in walk(
                self.containerfile, stage, self.base_env(False), self.build_args)}
            workdir, entrypoint = "/", []
            for instruction, env in walk(self.containerfile, stage, self.base_env(True),
                                         self.build_args, self.place):
                image = image_env[instruction.line]
                if instruction.keyword == "WORKDIR":
                    workdir = posixpath.normpath(posixpath.join(
                        workdir, expand(instruction.args, image)))
                    Path(self.place(workdir)).mkdir(parents=True, exist_ok=True)
                elif instruction.keyword == "COPY":
                    self.copy(instruction, image, workdir, stage_roots)
                elif instruction.keyword == "RUN":
                    self.shell(instruction, env, workdir)
                elif instruction.keyword == "ENTRYPOINT":
                    entrypoint = instruction.exec_form()
            if index == len(self.containerfile.stages) - 1:
                shutil.rmtree(self.saved, ignore_errors=True)
                env = variables_after(self.containerfile, stage, self.base_env(True),
                                      self.build_args, self.place)
                return Result(self.root, env, Path(self.place(workdir)), entrypoint)
            self.saved.mkdir(exist_ok=True)
            kept = self.saved / str(index)
            self.root.rename(kept)
            stage_roots[str(index)] = kept
            if stage.name:
                stage_roots[stage.name] = kept
        raise AssertionError("no stage")

    def copy(self, instruction: Instruction, env: dict[str, str], workdir: str,
             stage_roots: dict[str, Path]) -> None:
        flags, words = instruction.flags_and_words()
        *sources, destination = [expand(word, env) for word in words]
        into_directory = destination.endswith("/") or len(sources) > 1
        target = Path(self.place(posixpath.join(workdir, destination)))
        for source in sources:
            if "from" in flags:
                origin = stage_roots[flags["from"]] / source.lstrip("/")
            else:
                origin = self.context / posixpath.normpath(source)
            if origin.is_dir():
                self._copy_tree(origin, target, from_context="from" not in flags)
            else:
                path = target / origin.name if into_directory else target
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, path)

    def _copy_tree(self, origin: Path, target: Path, from_context: bool) -> None:
        def ignore(directory: str, names: list[str]) -> set[str]:
            if not from_context:
                return set()
            relative = os.path.relpath(directory, self.context)
            return {name for name in names if _ignored(
                posixpath.normpath(posixpath.join(relative, name)), self.ignore)}

        shutil.copytree(origin, target, symlinks=True, ignore=ignore, dirs_exist_ok=True)

    def shell(self, instruction: Instruction, env: dict[str, str], workdir: str) -> None:
        run_env = dict(env)
        for key, value in self.overrides.items():
            if value is None:
                run_env.pop(key, None)
            else:
                run_env[key] = value
        result = subprocess.run(["/bin/sh", "-c", instruction.args], cwd=self.place(workdir),
                                env=run_env, capture_output=True, text=True,
                                timeout=self.timeout)
        if result.returncode != 0:
            raise StepFailed(f"Containerfile:{instruction.line}: RUN exited {result.returncode}"
                             f"\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


def perform(containerfile: Path, context: Path, scratch: Path, *,
            build_args: dict[str, str] | None = None,
            overrides: dict[str, str | None] | None = None, timeout: float = 300) -> Result:
    """Perform every stage of `containerfile` with build context `context` under the empty
    directory `scratch`. `overrides` change (or, None, remove) variables of every RUN step only:
    where the build finds what it installs (e.g. a local wheel directory instead of an index),
    never what it installs."""
    runner = StageRunner(read(containerfile), context, scratch, build_args or {},
                         overrides or {}, timeout)
    return runner.run()
