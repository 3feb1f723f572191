"""The case type and how one case is run through init -> check -> validate (in process, click's runner)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from click.testing import CliRunner

from tests.bad_inputs.kit import Kit

Step = Literal["init", "check", "validate", "note"]
STEPS: tuple[Step, ...] = ("init", "check", "validate")


@dataclass(frozen=True)
class Inputs:
    """What a case hands to the commands: a model and a dataset for ``init`` (with its extra flags), or a
    project folder already written (then ``init`` is skipped)."""

    model: Path | str | None = None
    data: Path | None = None
    init_args: tuple[str, ...] = ()
    project: Path | None = None


@dataclass(frozen=True)
class Case:
    id: str  # unique, kebab-case: what pytest shows
    make: Callable[[Kit, Path], Inputs]  # breaks a copy of the kit's inputs under the given folder
    step: Step  # the first step that must refuse it ("note": nobody refuses, the output says it)
    exit_code: int  # of the refusing step (0 for a note)
    says: tuple[str, ...]  # what the message must name, each case-insensitively: a file name, a key, an id
    why: str = ""  # what is broken, in words (the list)
    marks: tuple[str, ...] = field(default_factory=tuple)  # e.g. ("slow",) for a case that runs validate


@dataclass
class Ran:
    step: str
    exit_code: int
    output: str
    traceback: str | None  # the exception a command let out (a bug), else None


def substitute(pattern: str, replacement: str) -> Callable[[str], str]:
    """An edit of a project file: the first match of ``pattern`` (multi-line) replaced; it must match."""
    def edit(text: str) -> str:
        changed = re.sub(pattern, replacement, text, count=1, flags=re.M)
        assert changed != text, pattern
        return changed
    return edit


def invoke(*args: str) -> Ran:
    result = CliRunner().invoke(main_command(), list(args))
    escaped = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        escaped = "".join(traceback.format_exception(result.exception))
    return Ran(args[0], result.exit_code, result.output, escaped)


def main_command():
    from edgebuild.cli import main

    return main


def run_case(case: Case, kit: Kit, folder: Path) -> list[Ran]:
    """Every step up to and including the one that refuses (all three for a note; up to check where
    the case's step is check), stopping at the first step that does not exit 0."""
    inputs = case.make(kit, folder)
    project = inputs.project or folder / "project"
    last = "check" if case.step in ("init", "check", "note") else "validate"
    ran: list[Ran] = []
    if inputs.project is None:
        args = ["init", *inputs.init_args]
        if inputs.model is not None:
            args += ["--model", str(inputs.model)]
        if inputs.data is not None:
            args += ["--data", str(inputs.data)]
        ran.append(invoke(*args, str(project)))
        if ran[-1].exit_code != 0:
            return ran
    ran.append(invoke("check", "-p", str(project)))
    if ran[-1].exit_code != 0 or last == "check":
        return ran
    ran.append(invoke("validate", "-p", str(project)))
    return ran
