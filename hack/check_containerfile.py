"""Check the Containerfile's steps against the package layout and the lock file (make lint).

Usage: ``python hack/check_containerfile.py [--root DIR]``; prints one line per problem
(``Containerfile:LINE: what is wrong and what to do``) and exits 1 if there is any.

What it checks (docs/image.md):
- every FROM is pinned by digest (``name:tag@sha256:<64 hex>``) or names an earlier stage;
- every COPY source exists in the build context, and the directory each local ``pip wheel`` /
  ``pip install`` builds holds pyproject.toml and every package pyproject.toml installs;
- no RUN removes the directory it runs in (or a parent of it), and the final stage sets one;
- pip installs requirements only from a lock file copied into the image, with
  ``--require-hashes``; anything else it installs is local, with ``--no-deps`` and without
  fetching build dependencies (``--no-index`` or ``--no-build-isolation``);
- requirements/runtime.lock pins every runtime dependency of pyproject.toml with hashes, and
  what those need (as the lock's ``# via`` comments and the installed metadata tell);
- the final stage: a numeric non-root USER equal to the Deployment's ``runAsUser``,
  ``PYTHONDONTWRITEBYTECODE=1``, an exec-form ENTRYPOINT naming a script of the package, and
  the OCI labels (version and revision from build arguments).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata
import posixpath
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from containerfile import (
    Containerfile,
    ContainerfileError,
    Instruction,
    expand,
    read,
    resolved_base,
    variables_after,
    walk,
)
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = "Containerfile"
RUNTIME_LOCK = "requirements/runtime.lock"
DEPLOYMENT = "apiservice/deployment.yaml"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}
"""The environment of the python images before the Containerfile's own."""

LABELS = ("title", "description", "source", "licenses", "version", "revision")
"""The org.opencontainers.image.* labels the final stage must set."""
LABELS_FROM_BUILD_ARGS = ("version", "revision")

_DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_NUMERIC_USER = re.compile(r"^(\d+)(?::(\d+))?$")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
_PIP_VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-w", "--wheel-dir", "-t", "--target", "--prefix", "--root",
    "--only-binary", "--no-binary", "--python", "--platform", "--python-version",
    "--implementation", "--abi", "--progress-bar", "--cache-dir", "--src", "-e", "--editable",
}


@dataclass(frozen=True)
class LockEntry:
    name: str
    """Canonical (PEP 503) name."""
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]
    """The ``# via`` parents pip-compile wrote (canonical names; the project as written)."""
    line: int


@dataclass
class _PendingEntry:
    name: str
    version: str
    line: int
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)

    def entry(self) -> LockEntry:
        return LockEntry(self.name, self.version, tuple(self.hashes), tuple(self.via), self.line)


def read_lock(text: str) -> dict[str, LockEntry]:
    """The entries of a pip-compile lock file (``name==version`` lines with ``--hash`` options
    and ``# via`` comments), by canonical name. ValueError: a requirement not pinned with ==."""
    entries: list[_PendingEntry] = []
    in_via = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        current = entries[-1] if entries else None
        if line.startswith("#"):
            comment = line[1:].strip()
            if current is not None and comment.startswith("via"):
                rest = comment[3:].strip()
                in_via = not rest
                current.via += [rest] if rest else []
            elif current is not None and in_via and raw.startswith("#   "):
                current.via.append(comment)
            else:
                in_via = False
            continue
        in_via = False
        words = line.replace("\\", " ").split()
        if not words[0].startswith("--hash="):
            name, equals, version = words.pop(0).partition("==")
            if not equals:
                raise ValueError(f"line {number}: {line!r} is not pinned with ==: "
                                 f"regenerate the lock with `make lock`")
            entries.append(_PendingEntry(canonicalize_name(name), version, number))
        elif current is None:
            raise ValueError(f"line {number}: a --hash before any requirement")
        entries[-1].hashes += [word.removeprefix("--hash=") for word in words
                               if word.startswith("--hash=")]
    return {pending.name: pending.entry() for pending in entries}


def _parent_name(via: str) -> str | None:
    """The canonical name of a ``# via`` parent, None for the project or a requirements file."""
    if via.startswith("-r ") or "(" in via:
        return None
    return canonicalize_name(via)


def lock_problems(lock_text: str, dependencies: list[str], project: str) -> list[str]:
    """Problems of a runtime lock: an entry without a hash, a dependency of pyproject.toml
    missing or at a version its specifier excludes, a parent or an installed requirement of an
    entry that is not locked."""
    where = RUNTIME_LOCK
    try:
        entries = read_lock(lock_text)
    except ValueError as error:
        return [f"{where}:{error}"]
    problems = [f"{where}:{entry.line}: {entry.name}=={entry.version} has no --hash: "
                f"regenerate with `make lock`" for entry in entries.values() if not entry.hashes]
    for text in dependencies:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate():
            continue
        entry = entries.get(canonicalize_name(requirement.name))
        if entry is None:
            problems.append(f"{where}: {requirement.name} (pyproject.toml dependency {text!r}) "
                            f"is not locked: run `make lock`")
        elif not requirement.specifier.contains(entry.version, prereleases=True):
            problems.append(f"{where}:{entry.line}: {entry.name}=={entry.version} does not "
                            f"satisfy pyproject.toml's {text!r}: run `make lock`")
    for entry in entries.values():
        for via in entry.via:
            parent = _parent_name(via)
            if parent is not None and parent != canonicalize_name(project) \
                    and parent not in entries:
                problems.append(f"{where}:{entry.line}: {entry.name} is locked for {via}, "
                                f"which is not locked itself: run `make lock`")
        problems += _installed_requirement_problems(entry, entries)
    return problems


def _installed_requirement_problems(entry: LockEntry, entries: dict[str, LockEntry]) -> list[str]:
    """What the installed distribution of `entry` requires (if this environment has exactly
    the locked version) that the lock does not pin."""
    try:
        distribution = importlib.metadata.distribution(entry.name)
    except importlib.metadata.PackageNotFoundError:
        return []
    if distribution.version != entry.version:
        return []
    environment = {**default_environment(), "extra": ""}
    problems = []
    for text in distribution.requires or []:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        if canonicalize_name(requirement.name) not in entries:
            problems.append(f"{RUNTIME_LOCK}:{entry.line}: {entry.name}=={entry.version} "
                            f"requires {text!r}, which is not locked: run `make lock`")
    return problems


@dataclass
class _Copied:
    """Where a COPY put a context path in the image."""
    image: str
    context: str
    directory: bool


@dataclass
class _StageState:
    workdir: str = "/"
    copied: list[_Copied] = field(default_factory=list)

    def context_of(self, image_path: str) -> str | None:
        """The build context path a COPY put at `image_path`, None if none did."""
        for copied in reversed(self.copied):
            if image_path == copied.image:
                return copied.context
            if copied.directory and image_path.startswith(copied.image.rstrip("/") + "/"):
                return posixpath.normpath(posixpath.join(
                    copied.context, image_path[len(copied.image.rstrip("/")) + 1:]))
        return None


def _absolute(path: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir, path))


def _commands(script: str, variables: dict[str, str]) -> list[list[str]]:
    """The simple commands of a shell-form RUN, variables expanded."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [[expand(word, variables) for word in command] for command in commands if command]


def _pip_arguments(command: list[str]) -> list[str] | None:
    """The arguments after ``pip`` of a pip command line, None if it does not run pip."""
    program = posixpath.basename(command[0])
    if re.fullmatch(r"pip(3(\.\d+)?)?", program):
        return command[1:]
    if re.fullmatch(r"python(3(\.\d+)?)?", program) and command[1:3] == ["-m", "pip"]:
        return command[3:]
    return None


@dataclass
class _PipCall:
    subcommand: str
    options: set[str]
    requirements: list[str]
    targets: list[str]


def _pip_call(arguments: list[str]) -> _PipCall | None:
    """The install/wheel/download call of pip `arguments` (after pip's general options)."""
    arguments = list(arguments)
    while arguments and arguments[0].startswith("-"):
        option = arguments.pop(0)
        if option in _PIP_VALUE_OPTIONS and "=" not in option and arguments:
            arguments.pop(0)
    if not arguments or arguments[0] not in ("install", "wheel", "download"):
        return None
    call = _PipCall(arguments[0], set(), [], [])
    words = iter(arguments[1:])
    for word in words:
        if word.startswith("-"):
            name, equals, value = word.partition("=")
            if name.startswith("-r") and name not in ("-r", "--requirement") \
                    and not name.startswith("--"):
                call.requirements.append(name[2:])
                continue
            if name in _PIP_VALUE_OPTIONS and not equals:
                value = next(words, "")
            if name in ("-r", "--requirement"):
                call.requirements.append(value)
            call.options.add(name)
        else:
            call.targets.append(word)
    return call


class Checker:
    """The checks of one repository checkout (the build context) at `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        self.problems: list[str] = []

    def problem(self, instruction: Instruction | int | None, message: str) -> None:
        line = instruction.line if isinstance(instruction, Instruction) else instruction
        self.problems.append(f"{CONTAINERFILE}:{line}: {message}" if line
                             else f"{CONTAINERFILE}: {message}")

    def packages(self) -> list[str]:
        """The top-level packages pyproject.toml installs: the directories its
        ``packages.find`` include patterns match, and the modules of its scripts."""
        patterns = (self.pyproject.get("tool", {}).get("setuptools", {}).get("packages", {})
                    .get("find", {}).get("include", []))
        names = {path.name for path in self.root.iterdir()
                 if (path / "__init__.py").is_file()
                 and any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)}
        for target in self.pyproject["project"].get("scripts", {}).values():
            names.add(target.split(":")[0].split(".")[0])
        return sorted(names)

    def run(self) -> list[str]:
        try:
            containerfile = read(self.root / CONTAINERFILE)
        except (OSError, ContainerfileError) as error:
            self.problem(None, str(error))
            return self.problems
        self.check_bases(containerfile)
        runtime_lock_installed = package_built = False
        for stage in containerfile.stages:
            state = _StageState()
            for instruction, variables in walk(containerfile, stage, BASE_ENV):
                if instruction.keyword == "WORKDIR":
                    state.workdir = _absolute(expand(instruction.args, variables),
                                              state.workdir)
                elif instruction.keyword == "COPY":
                    self.check_copy(instruction, variables, state)
                elif instruction.keyword == "RUN":
                    locks, builds = self.check_run(instruction, variables, state)
                    runtime_lock_installed |= RUNTIME_LOCK in locks
                    package_built |= builds
        if not runtime_lock_installed:
            self.problem(None, f"no RUN installs {RUNTIME_LOCK} with "
                               f"`pip install --require-hashes -r {RUNTIME_LOCK}`")
        if not package_built:
            self.problem(None, "no RUN builds or installs the package itself with "
                               "`pip wheel --no-deps --no-build-isolation .` or "
                               "`pip install --no-deps --no-index <wheel or directory>`")
        self.check_final(containerfile)
        self.check_lock()
        return self.problems

    def check_bases(self, containerfile: Containerfile) -> None:
        names: set[str] = set()
        for stage in containerfile.stages:
            base = resolved_base(containerfile, stage)
            if base not in names and base != "scratch" and not _DIGEST.match(base):
                self.problem(stage.line, f"FROM {base!r} is not pinned by digest: write "
                                         f"name:tag@sha256:<digest> (docs/image.md: refresh "
                                         f"the base digest)")
            if stage.name:
                names.add(stage.name)

    def check_copy(self, instruction: Instruction, variables: dict[str, str],
                   state: _StageState) -> None:
        flags, words = instruction.flags_and_words()
        words = [expand(word, variables) for word in words]
        if len(words) < 2:
            self.problem(instruction, "COPY needs at least one source and a destination")
            return
        *sources, destination = words
        into_directory = destination.endswith("/") or len(sources) > 1
        destination = _absolute(destination, state.workdir)
        for source in sources:
            if "from" in flags:
                state.copied.append(_Copied(destination, "", True))  # from another stage
                continue
            context = posixpath.normpath(source)
            path = self.root / context
            if not path.exists():
                self.problem(instruction, f"COPY source {source!r} does not exist in the build "
                                          f"context {self.root}")
                continue
            image = (posixpath.join(destination, posixpath.basename(context))
                     if into_directory and not path.is_dir() else destination)
            state.copied.append(_Copied(image, context, path.is_dir()))

    def check_run(self, instruction: Instruction, variables: dict[str, str],
                  state: _StageState) -> tuple[set[str], bool]:
        """The context paths of the lock files this RUN installs, and whether it builds or
        installs the package itself; problems recorded."""
        locks: set[str] = set()
        builds = False
        for command in _commands(instruction.args, variables):
            program = posixpath.basename(command[0])
            if program in ("rm", "rmdir"):
                for target in (word for word in command[1:] if not word.startswith("-")):
                    removed = _absolute(target, state.workdir)
                    if removed == "/" or state.workdir == removed \
                            or state.workdir.startswith(removed.rstrip("/") + "/"):
                        self.problem(instruction, f"`{' '.join(command)}` removes the WORKDIR "
                                                  f"{state.workdir}: the next steps and the "
                                                  f"container would start in a missing "
                                                  f"directory; remove what is in it instead, or "
                                                  f"build in another stage")
            arguments = _pip_arguments(command)
            call = _pip_call(arguments) if arguments is not None else None
            if call is None:
                continue
            if call.requirements:
                locks |= self._check_locked_install(instruction, call, state)
            else:
                builds |= self._check_local_install(instruction, call, state)
        return locks, builds

    def _check_locked_install(self, instruction: Instruction, call: _PipCall,
                              state: _StageState) -> set[str]:
        locks: set[str] = set()
        if "--require-hashes" not in call.options:
            self.problem(instruction, f"pip {call.subcommand} -r "
                                      f"{' '.join(call.requirements)} without --require-hashes: "
                                      f"add it so every download is checked against the lock")
        if call.targets:
            self.problem(instruction, f"pip {call.subcommand} names {call.targets} besides the "
                                      f"lock file: install those with --no-deps in a step of "
                                      f"their own")
        for requirement in call.requirements:
            context = state.context_of(_absolute(requirement, state.workdir))
            if context is None:
                self.problem(instruction, f"pip -r {requirement}: no COPY put that file in "
                                          f"the image (COPY it from the build context first)")
                continue
            try:
                entries = read_lock((self.root / context).read_text())
            except (OSError, ValueError) as error:
                self.problem(instruction, f"pip -r {requirement} ({context}): {error}")
                continue
            unhashed = [name for name, entry in entries.items() if not entry.hashes]
            if unhashed or not entries:
                self.problem(instruction, f"pip -r {requirement} ({context}) is not a lock "
                                          f"with hashes (no --hash for {unhashed or 'anything'})"
                                          f": regenerate it with `make lock`")
            locks.add(context)
        return locks

    def _check_local_install(self, instruction: Instruction, call: _PipCall,
                             state: _StageState) -> bool:
        """Whether this pip call builds or installs the package from a local directory or
        wheel; problems recorded."""
        if "--no-deps" not in call.options:
            self.problem(instruction, f"pip {call.subcommand} {' '.join(call.targets)} without "
                                      f"--no-deps: dependencies come only from the lock file")
        if not call.options & {"--no-index", "--no-build-isolation"}:
            self.problem(instruction, f"pip {call.subcommand} {' '.join(call.targets)} may "
                                      f"fetch unhashed build dependencies: add --no-index (a "
                                      f"built wheel) or --no-build-isolation (build with the "
                                      f"locked requirements/build.lock)")
        builds = False
        for target in call.targets:
            if not target.startswith((".", "/")):
                self.problem(instruction, f"pip {call.subcommand} {target!r}: not a local "
                                      f"directory or wheel; add it to pyproject.toml and the "
                                      f"lock instead")
                continue
            builds = True
            directory = _absolute(target, state.workdir)
            if target.endswith(".whl"):
                continue
            for needed in ["pyproject.toml", *self.packages()]:
                if state.context_of(posixpath.join(directory, needed)) != needed:
                    self.problem(instruction, f"pip {call.subcommand} {target} builds "
                                              f"{directory}, but no COPY put {needed} at "
                                              f"{posixpath.join(directory, needed)}")
        return builds

    def check_final(self, containerfile: Containerfile) -> None:
        stage = containerfile.final
        if not stage.each("WORKDIR"):
            self.problem(stage.line, "the final stage sets no WORKDIR: set one that exists "
                                     "at runtime (e.g. WORKDIR /opt/container-notifier)")
        if variables_after(containerfile, stage, BASE_ENV).get("PYTHONDONTWRITEBYTECODE") != "1":
            self.problem(stage.line, "the final stage does not set ENV PYTHONDONTWRITEBYTECODE=1 "
                                     "(the root filesystem is read-only at runtime)")
        declared_args = {key for instruction in stage.each("ARG")
                         for key, _ in instruction.assignments()}
        self._check_user(stage.each("USER"), stage.line)
        self._check_entrypoint(stage.each("ENTRYPOINT"), stage.line)
        self._check_labels(stage.each("LABEL"), declared_args, stage.line)

    def _check_user(self, users: list[Instruction], line: int) -> None:
        if not users:
            self.problem(line, "the final stage sets no USER: add USER 65532:65532")
            return
        match = _NUMERIC_USER.match(users[-1].args)
        if not match:
            self.problem(users[-1], f"USER {users[-1].args!r} is not numeric: Kubernetes "
                                    f"checks runAsNonRoot only for a numeric user "
                                    f"(USER 65532:65532)")
            return
        uid, gid = match.group(1), match.group(2)
        if uid == "0" or gid == "0":
            self.problem(users[-1], f"USER {users[-1].args} is root: use 65532:65532")
        expected = self._deployment_users()
        if expected and expected != {int(uid)}:
            self.problem(users[-1], f"USER {uid} differs from the runAsUser {sorted(expected)} of "
                                    f"{DEPLOYMENT}: make them equal")

    def _deployment_users(self) -> set[int]:
        path = self.root / DEPLOYMENT
        if not path.is_file():
            return set()
        users: set[int] = set()

        def visit(node: object) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == "runAsUser" and isinstance(value, int):
                        users.add(value)
                    visit(value)
            elif isinstance(node, list):
                for item in node:
                    visit(item)

        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "Deployment":
                visit(document)
        return users

    def _check_entrypoint(self, entrypoints: list[Instruction], line: int) -> None:
        scripts = self.pyproject["project"].get("scripts", {})
        if not entrypoints:
            self.problem(line, f"the final stage has no ENTRYPOINT: use one of {sorted(scripts)}")
            return
        try:
            command = entrypoints[-1].exec_form()
        except ContainerfileError as error:
            self.problem(None, str(error))
            return
        if not command or command[0] not in scripts:
            self.problem(entrypoints[-1], f"ENTRYPOINT {command} does not start with a script "
                                          f"of pyproject.toml ({sorted(scripts)})")

    def _check_labels(self, instructions: list[Instruction], declared_args: set[str],
                      line: int) -> None:
        labels = {key: value or "" for instruction in instructions
                  for key, value in instruction.assignments()}
        for name in LABELS:
            key = f"org.opencontainers.image.{name}"
            value = labels.get(key, "")
            if not value:
                self.problem(line, f"the final stage has no LABEL {key}")
            elif name in LABELS_FROM_BUILD_ARGS and not any(
                    f"${{{arg}}}" in value or f"${arg}" in value for arg in declared_args):
                self.problem(line, f"LABEL {key}={value!r} does not come from a build argument "
                                   f"(ARG {name.upper()} in the final stage, "
                                   f'{key}="${{{name.upper()}}}")')
        declared = self.pyproject["project"].get("license")
        license_text = declared if isinstance(declared, str) else "NOASSERTION"
        value = labels.get("org.opencontainers.image.licenses")
        if value and value != license_text:
            self.problem(line, f"LABEL org.opencontainers.image.licenses={value!r}, but "
                               f"pyproject.toml declares {license_text!r} (NOASSERTION: none)")

    def check_lock(self) -> None:
        path = self.root / RUNTIME_LOCK
        if not path.is_file():
            self.problems.append(f"{RUNTIME_LOCK}: missing: run `make lock`")
            return
        project = self.pyproject["project"]
        self.problems += lock_problems(path.read_text(), project.get("dependencies", []),
                                       project["name"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository checkout (build context) to check")
    args = parser.parse_args(argv)
    problems = Checker(args.root).run()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
