"""``edgebuild compile``: the pipeline for every fleet group a target selects, and its records.

:func:`compile_project` loads the project and selects its work, reserves the farm around the run when the
compile builds on it (and always releases it), runs every stage (``edgebuild.stages``), then
writes what ``edgebuild report`` reads (``build/.records/last-compile.json``) and the build
report itself, failed compiles included. It returns the outcome; the caller raises its error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.pipeline.runner import CompileReport, StageOutcome
from edgebuild.project.layout import BuildLayout
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.errors import EdgebuildError
    from edgebuild.latency.budget import PredictedLatency
    from edgebuild.workflows.work import CompileWork

__all__ = ["compile_project"]



@dataclass(frozen=True)
class Compiled:
    report: CompileReport  # every stage's outcome per group
    written: dict[str, Path]  # the build report's files by kind (html, markdown, junit)
    latency: PredictedLatency | None = None  # predicted latency per group and candidate (None: no export)

    @property
    def error(self) -> EdgebuildError | None:
        return self.report.error


def compile_project(project_dir: Path, selector: str, *, force: frozenset[str] = frozenset(),
                    build_on: str | None = None, farm_address: str | None = None, jobs: int | None = None,
                    farm_timeout: float | None = None, gate: bool = True, ship_ungated: bool = False,
                    progress: bool = False, say: Progress = lambda _: None, farm_say: Progress | None = None,
                    on_work: Callable[[CompileWork], None] = lambda _: None,
                    on_stage: Callable[[StageOutcome], None] = lambda _: None) -> Compiled:
    """Compile ``selector``'s groups of the project at ``project_dir``.

    ``gate=False`` is ``--no-gate`` (accuracy.gate = false for this run). The farm is used with
    ``farm_address`` (bare ``--farm``: "") or, unless ``build_on`` is given, when the project names
    a ``[farm] coordinator``; its groups then build ``jobs`` at once (default ``[farm] jobs``, else
    all), and it says what it waits for to ``farm_say`` (default ``say``). ``on_work`` sees
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
        farm = open_farm(project, farm_address, farm_timeout, progress=farm_say or say)
    options = Options(force=force, progress=progress,
                      jobs=(jobs or project.farm.jobs or len(work.groups)) if farm else 1)
    settings = CompileSettings(build_on=build_on, farm=farm, ship_ungated=ship_ungated)

    def run() -> tuple[CompileReport, PredictedLatency | None]:
        return _compile_within_budgets(work, lambda w, stages, seen: compile_work(
            w, stages=stages, options=options, settings=settings, progress=say, on_stage=seen), on_stage, say)

    if farm is not None:
        try:
            with release_on_exit(farm):
                done, latency = run()
        finally:
            farm.disconnect()
    else:
        done, latency = run()
    write_last_compile(done)
    path = BuildLayout.of(project).predicted_latency
    path.unlink(missing_ok=True)
    if latency is not None:
        latency.save(path)
    written = write_report(project.build_dir)  # a failed compile gets its report too
    return Compiled(done, written, latency)


def _compile_within_budgets(work: CompileWork, run: Callable[..., CompileReport],
                            on_stage: Callable[[StageOutcome], None],
                            progress: Progress) -> tuple[CompileReport, PredictedLatency | None]:
    """Every stage, with the groups' latency budgets checked between the gate and the engines.

    Without a budget in the selected groups the stages run at once and the prediction is made after
    them, for the summary and the report. With one, the stages up to the gate run first, then each
    group's prediction is checked: a group whose every candidate misses its budget beyond the error
    band gets no engine (its engine stage fails with the refusal); the others go on.
    """
    from edgebuild.stages import MODEL_STAGES, STAGES
    from edgebuild.stages.gate import GATE

    budgets = {g.name for g in work.project.fleet if g.latency_budget_ms or g.min_fps}
    if not budgets & {g.name for g in work.groups}:
        done = run(work, STAGES, on_stage)
        return done, _predict(work, done)
    first = run(work, MODEL_STAGES, on_stage)
    latency = _predict(work, first)
    if latency is None or first.record(GATE) is None:
        return first, latency  # the export or the gate failed: nothing after them runs
    for line in latency.warnings():
        progress(f"latency: {line}")
    refused = latency.refusals()
    later = STAGES[len(MODEL_STAGES):]
    early = {s.name for s in MODEL_STAGES}

    def merged(outcome: StageOutcome) -> StageOutcome:
        return _with_refused(outcome, refused, work)

    fitting = tuple(g for g in work.groups if g.name not in refused)
    if fitting:  # the stages up to the gate are reused: what the first run did is what the summary says
        rest = run(replace(work, groups=fitting), STAGES,
                   lambda o: None if o.stage.name in early else on_stage(merged(o)))
        stages = list(first.stages) + [merged(o) for o in rest.stages if o.stage.name not in early]
    else:
        stages = list(first.stages)
        for stage in later:
            outcome = merged(StageOutcome(stage, ()))
            on_stage(outcome)
            stages.append(outcome)
    return CompileReport(work, tuple(stages)), latency


def _with_refused(outcome: StageOutcome, refused: Mapping[str, EdgebuildError], work: CompileWork) -> StageOutcome:
    """``outcome`` of a stage after the gate, with a unit for each refused group: the engine stage's
    failed with its refusal, the later stages' not run."""
    from edgebuild.pipeline.runner import UnitOutcome
    from edgebuild.stages.engine import ENGINE

    units = {u.group: u for u in outcome.units}
    for group, error in refused.items():
        if outcome.stage.name == ENGINE.name:
            units[group] = UnitOutcome(group, "failed", error.message.splitlines()[0], error=error)
        else:
            units[group] = UnitOutcome(group, "not run", f"{ENGINE.name} did not succeed for {group}",
                                       why=f"{ENGINE.name} did not succeed for {group}")
    order = [g.name for g in work.groups]
    return StageOutcome(outcome.stage, tuple(sorted(units.values(), key=lambda u: order.index(u.group or ""))))


def _predict(work: CompileWork, done: CompileReport) -> PredictedLatency | None:
    """The selected groups' predicted latency on the export, or None when the export did not succeed."""
    from edgebuild.errors import EdgebuildError
    from edgebuild.latency.budget import predict_groups
    from edgebuild.latency.calibration import project_fit
    from edgebuild.stages.export import EXPORT

    export = done.record(EXPORT)
    if export is None:
        return None
    try:
        fit = project_fit(work.project.source.parent)  # the project's own (plan --calibrate) where it has one
    except EdgebuildError:
        fit = None  # predict_groups says what is wrong with the published one, if anything
    return predict_groups(work.project, export.onnx_path, work.groups, work.project.fleet, fit=fit)
