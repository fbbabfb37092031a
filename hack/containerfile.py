"""The Containerfile read as a list of stages, each a list of instructions, with the build
arguments and environment it defines: what hack/check_containerfile.py checks and what
tests/support/containerfile_steps.py performs.

Only the syntax this repository's Containerfile may use is read: continuation lines, comments,
``ARG``/``ENV`` in ``KEY=value`` form, ``LABEL``, ``COPY`` with ``--from``/``--chown``/``--chmod``,
shell-form ``RUN``, exec-form ``ENTRYPOINT``/``CMD``. Anything else is a ``ContainerfileError``
naming the line, so the check cannot pass by not understanding a step.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = {"FROM", "ARG", "ENV", "LABEL", "WORKDIR", "COPY", "RUN", "USER", "ENTRYPOINT", "CMD",
         "EXPOSE", "STOPSIGNAL"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")


class ContainerfileError(ValueError):
    """A Containerfile line this reader does not understand (the line number and why)."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    """Upper case: ``RUN``, ``COPY``, ..."""
    args: str
    """The rest of the instruction, continuation lines joined with a space."""
    line: int
    """The 1-based line where the instruction starts."""

    def flags_and_words(self) -> tuple[dict[str, str], list[str]]:
        """``--name=value`` flags before the first argument (``--link``: value ``""``) and the
        remaining words (shell-like splitting)."""
        flags: dict[str, str] = {}
        words = shlex.split(self.args)
        while words and words[0].startswith("--"):
            name, _, value = words.pop(0)[2:].partition("=")
            flags[name] = value
        return flags, words

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form ``ENTRYPOINT``/``CMD``/``RUN``."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ContainerfileError(
                f"line {self.line}: {self.keyword} {self.args!r} is not in exec form "
                f'(a JSON array of strings, e.g. ["container-notifier-apiserver"])')
        return value

    def assignments(self) -> list[tuple[str, str | None]]:
        """The ``KEY=value`` pairs of ``ARG``/``ENV``/``LABEL``; an ``ARG`` without ``=``
        declares KEY with no default (value None)."""
        pairs: list[tuple[str, str | None]] = []
        for word in shlex.split(self.args):
            key, equals, value = word.partition("=")
            if not equals:
                if self.keyword != "ARG":
                    raise ContainerfileError(
                        f"line {self.line}: {self.keyword} {word!r}: write KEY=value")
                pairs.append((key, None))
                continue
            pairs.append((key, value))
        return pairs


@dataclass
class Stage:
    base: str
    """The FROM image as written (build arguments not yet expanded)."""
    name: str | None
    """The ``AS`` name, if any."""
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def each(self, keyword: str) -> list[Instruction]:
        return [item for item in self.instructions if item.keyword == keyword]


@dataclass
class Containerfile:
    global_args: dict[str, str | None]
    """The ``ARG``s before the first FROM and their defaults."""
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def expand(value: str, variables: dict[str, str]) -> str:
    """``$NAME``, ``${NAME}`` and ``${NAME:-default}`` replaced as the builder does (an unset
    variable is empty)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        found = variables.get(name, "")
        return found if found or default is None else default

    return _VARIABLE.sub(replace, value)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # a comment, also inside a continued instruction, is dropped
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        lines.append((start, " ".join(part for part in pending if part)))
        pending = []
    if pending:
        raise ContainerfileError(f"line {start}: the last instruction ends with a backslash")
    return lines


def parse(text: str) -> Containerfile:
    """The stages of Containerfile text."""
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line, logical in _logical_lines(text):
        keyword, _, args = logical.partition(" ")
        keyword = keyword.upper()
        instruction = Instruction(keyword, args.strip(), line)
        if keyword not in KNOWN:
            raise ContainerfileError(
                f"line {line}: {keyword} is not an instruction hack/containerfile.py reads; "
                f"use one of {', '.join(sorted(KNOWN))}")
        if keyword == "FROM":
            words = [word for word in args.split() if not word.startswith("--platform=")]
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(Stage(words[0], words[2], line))
            elif len(words) == 1:
                stages.append(Stage(words[0], None, line))
            else:
                raise ContainerfileError(f"line {line}: FROM {args!r}: write FROM image [AS name]")
        elif not stages:
            if keyword != "ARG":
                raise ContainerfileError(f"line {line}: {keyword} before the first FROM")
            global_args.update(instruction.assignments())
        else:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise ContainerfileError("no FROM: the Containerfile has no stage")
    return Containerfile(global_args, stages)


def read(path: Path) -> Containerfile:
    return parse(path.read_text())


def resolved_base(containerfile: Containerfile, stage: Stage) -> str:
    """The stage's FROM with the global build arguments' defaults expanded."""
    defaults = {key: value for key, value in containerfile.global_args.items() if value}
    return expand(stage.base, defaults)


def _identity(path: str) -> str:
    return path


def _assign(containerfile: Containerfile, instruction: Instruction, variables: dict[str, str],
            build_args: dict[str, str], place: Callable[[str], str]) -> None:
    if instruction.keyword not in ("ARG", "ENV"):
        return
    for key, raw in instruction.assignments():
        if instruction.keyword == "ARG" and key in build_args:
            variables[key] = build_args[key]
            continue
        if raw is None:  # ARG NAME: the global default, if any
            raw = containerfile.global_args.get(key) or ""
        if raw.startswith("/") and "$" not in raw and ":" not in raw:
            variables[key] = place(raw)
        else:
            variables[key] = expand(raw, variables)


def walk(containerfile: Containerfile, stage: Stage, base_env: dict[str, str],
         build_args: dict[str, str] | None = None,
         place: Callable[[str], str] = _identity) -> Iterator[tuple[Instruction, dict[str, str]]]:
    """Each instruction of `stage` with the variables (build arguments and environment) in
    effect where it runs, starting from the base image's environment `base_env`.

    `place` maps a literal absolute path of an ``ARG``/``ENV`` value (an image path) to where it
    is meant to be (the image path itself by default; a scratch directory's path for
    tests/support/containerfile_steps.py); composed values are expanded from mapped ones."""
    variables = dict(base_env)
    for instruction in stage.instructions:
        yield instruction, dict(variables)
        _assign(containerfile, instruction, variables, build_args or {}, place)


def variables_after(containerfile: Containerfile, stage: Stage, base_env: dict[str, str],
                    build_args: dict[str, str] | None = None,
                    place: Callable[[str], str] = _identity) -> dict[str, str]:
    """The variables in effect after the last instruction of `stage` (see `walk`)."""
    variables = dict(base_env)
    for instruction in stage.instructions:
        _assign(containerfile, instruction, variables, build_args or {}, place)
    return variables
