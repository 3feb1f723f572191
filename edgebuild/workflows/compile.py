"""``edgebuild compile``: the pipeline for every fleet group a target selects, and its records.

:func:`compile_project` loads the project and selects its work, reserves the farm around the run when the
compile builds on it (and always releases it), runs every stage (``edgebuild.stages``), then
writes what ``edgebuild report`` reads (``build/.records/last-compile.json``) and the build
report itself, failed compiles included. It returns the outcome; the caller raises its error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.errors import EdgebuildError
    from edgebuild.pipeline.runner import CompileReport, StageOutcome
    from edgebuild.workflows.work import CompileWork

__all__ = ["compile_project"]



@dataclass(frozen=True)
class Compiled:
    report: CompileReport  # every stage's outcome per group
    written: dict[str, Path]  # the build report's files by kind (html, markdown, junit)

    @property
    def error(self) -> EdgebuildError | None:
        return self.report.error


def compile_project(project_dir: Path, selector: str, *, force: frozenset[str] = frozenset(),
                    build_on: str | None = None, farm_address: str | None = None, jobs: int | None = None,
                    farm_timeout: float | None = None, gate: bool = True, ship_ungated: bool = False,
                    progress: bool = False, report: Progress = lambda _: None, farm_report: Progress | None = None,
                    on_work: Callable[[CompileWork], None] = lambda _: None,
                    on_stage: Callable[[StageOutcome], None] = lambda _: None) -> Compiled:
    """Compile ``selector``'s groups of the project at ``project_dir``.

    ``gate=False`` is ``--no-gate`` (accuracy.gate = false for this run). The farm is used with
    ``farm_address`` (bare ``--farm``: "") or, unless ``build_on`` is given, when the project names
    a ``[farm] coordinator``; its groups then build ``jobs`` at once (default ``[farm] jobs``, else
    all), and it says what it waits for to ``farm_report`` (default ``report``). ``on_work`` sees
    the work before anything runs, ``on_stage`` each stage as it ends.
    """
    from edgebuild.devices.farm import open_farm, release_on_exit
    from edgebuild.pipeline.runner import Options, write_last_compile
    from edgebuild.project.config import load_project
    from edgebuild.report import write_report
    from edgebuild.stages import compile_work
    from edgebuild.stages.session import CompileSettings
    from edgebuild.workflows.work import select_work

    project = load_project(project_dir)
    if not gate:
        project = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"gate": False})})
    work = select_work(project, selector)
    on_work(work)
    farm = None
    if farm_address is not None or (project.farm.coordinator and not build_on):
        farm = open_farm(project, farm_address, farm_timeout, report=farm_report or report)
    options = Options(force=force, progress=progress,
                      jobs=(jobs or project.farm.jobs or len(work.groups)) if farm else 1)
    settings = CompileSettings(build_on=build_on, farm=farm, ship_ungated=ship_ungated)
    if farm is not None:
        try:
            with release_on_exit(farm):
                done = compile_work(work, options=options, settings=settings, report=report, on_stage=on_stage)
        finally:
            farm.disconnect()
    else:
        done = compile_work(work, options=options, settings=settings, report=report, on_stage=on_stage)
    write_last_compile(done)
    written = write_report(project.build_dir)  # a failed compile gets its report too
    return Compiled(done, written)
