"""``edgebuild compile``: the pipeline for every fleet group a target selects, and its records.

:func:`compile_project` loads the project and selects its work, reserves the farm around the run when the
compile builds on it (and always releases it), runs every stage once (``edgebuild.stages``; the budget
stage refuses a group whose latency budget no candidate can meet, and the runner then runs none of that
group's later stages), then writes what ``edgebuild report`` reads (``build/.records/last-compile.json``)
and the build report itself, failed compiles included. It returns the outcome; the caller raises its error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.pipeline.runner import CompileReport, StageOutcome
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.errors import EdgebuildError
    from edgebuild.latency.budget import PredictedLatency
    from edgebuild.workflows.work import CompileWork

__all__ = ["CompileFeedback", "CompileFlags", "compile_project"]


@dataclass(frozen=True)
class CompileFlags:
    """What the command asks of this compile beyond the project file."""

    force: frozenset[str] = frozenset()  # stages to run again (--force)
    build_on: str | None = None  # --build-on: an ssh:// build device for every selected group
    #: --farm: the coordinator ("" for bare --farm: the project's); None: the project's [farm] coordinator, if
    #: it names one and no build_on is given
    farm_address: str | None = None
    farm_timeout: float | None = None
    jobs: int | None = None  # groups built at once on the farm (default [farm] jobs, else all)
    gate: bool = True  # False: --no-gate (accuracy.gate = false for this run)
    ship_ungated: bool = False


@dataclass(frozen=True)
class CompileFeedback:
    """Where the compile says what it does: bars, lines, the work before anything runs, each stage as it ends."""

    bars: bool = False  # progress bars
    say: Progress = lambda _: None
    farm_say: Progress | None = None  # what the farm waits for (default: say)
    on_work: Callable[[CompileWork], None] = field(default=lambda _: None)
    on_stage: Callable[[StageOutcome], None] = field(default=lambda _: None)


@dataclass(frozen=True)
class Compiled:
    report: CompileReport  # every stage's outcome per group
    written: dict[str, Path]  # the build report's files by kind (html, markdown, junit)

    @property
    def error(self) -> EdgebuildError | None:
        return self.report.error

    @property
    def latency(self) -> PredictedLatency | None:
        """Predicted latency per group and candidate, from the budget stage (None: it ran for no group)."""
        return predicted_latency(self.report)


def compile_project(project_dir: Path, selector: str, flags: CompileFlags = CompileFlags(),
                    feedback: CompileFeedback = CompileFeedback()) -> Compiled:
    """Compile ``selector``'s groups of the project at ``project_dir``, every stage once.

    The farm is used with ``flags.farm_address`` or, unless ``flags.build_on`` is given, when the
    project names a ``[farm] coordinator``; its groups then build ``flags.jobs`` at once.
    """
    from edgebuild.devices.farm import open_farm, release_on_exit
    from edgebuild.pipeline.runner import Options, write_last_compile
    from edgebuild.project.config import load_project
    from edgebuild.report import write_report
    from edgebuild.stages import compile_work
    from edgebuild.stages.session import CompileSettings
    from edgebuild.workflows.work import select_work

    project = load_project(project_dir)
    if not flags.gate:
        project = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"gate": False})})
    work = select_work(project, selector)
    feedback.on_work(work)
    farm = None
    if flags.farm_address is not None or (project.farm.coordinator and not flags.build_on):
        farm = open_farm(project, flags.farm_address, flags.farm_timeout, progress=feedback.farm_say or feedback.say)
    options = Options(force=flags.force, progress=feedback.bars,
                      jobs=(flags.jobs or project.farm.jobs or len(work.groups)) if farm else 1)
    settings = CompileSettings(build_on=flags.build_on, farm=farm, ship_ungated=flags.ship_ungated)

    def run() -> CompileReport:
        return compile_work(work, options=options, settings=settings, progress=feedback.say,
                            on_stage=feedback.on_stage)

    if farm is not None:
        try:
            with release_on_exit(farm):
                done = run()
        finally:
            farm.disconnect()
    else:
        done = run()
    write_last_compile(done)
    written = write_report(project.build_dir)  # a failed compile gets its report too
    return Compiled(done, written)


def predicted_latency(report: CompileReport) -> PredictedLatency | None:
    """The budget stage's predictions of every group it ran for (a refused group's included), or None."""
    from edgebuild.latency.budget import PredictedLatency
    from edgebuild.stages.budget import BUDGET

    outcome = report.outcome(BUDGET)
    found = [u.record for u in outcome.units if u.record is not None] if outcome else []
    return PredictedLatency.merged(found) if found else None
