"""``edgebuild compile`` of a fleet file: every model once, every group with all of its models.

The model-level stages (model, reference, export, preflight, gate, and the engine per group that
runs the model) run per model, each in its own build folder (``build/models/<name>/``) with the
project view :meth:`edgebuild.project.fleet_file.Fleet.model_project` gives it, through the same stage
protocol as a one-model compile, so a second compile reuses what did not change. Between the gate
and the engines each group's memory plan is made from the gates' selections; a group whose models
do not fit is refused there, before any of its engines is built, and the other groups go on.
Then each group gets its folder (``build/groups/<group>/``: ``group.json`` and a copy of every
model's folder), one container and one bundle with every model (``edgebuild.shipping.group``).
``build/fleet.json`` says per group which models, which candidates and the memory plan, and
``build/report/`` shows it (each model's own report is in ``build/models/<name>/report/``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import EdgebuildError
from edgebuild.project.layout import BuildLayout
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.devices.memory_plan import MemoryPlan
    from edgebuild.latency.budget import GroupLatency, PredictedLatency
    from edgebuild.pipeline.runner import CompileReport, StageOutcome
    from edgebuild.project.fleet_file import Fleet
    from edgebuild.project.schema import FleetGroup
    from edgebuild.report.fleet_report import FleetGroupRecord
    from edgebuild.stages.session import CompileSession, CompileSettings
    from edgebuild.workflows.work import CompileWork

__all__ = ["compile_fleet"]



@dataclass
class GroupOutcome:
    """One fleet group: its models' candidates, its memory plan, what was written, or why not."""

    name: str
    target: str
    models: list[str]
    candidates: dict[str, str] = field(default_factory=dict)  # model -> selected candidate
    memory: MemoryPlan | None = None
    written: dict[str, str | bool] = field(default_factory=dict)  # folder, container, bundle, ... (relative paths)
    error: EdgebuildError | None = None
    latency: PredictedLatency | None = None  # each model's predicted latency per candidate, against the budget

    def record(self) -> FleetGroupRecord:
        """The group's line in ``build/fleet.json``."""
        from edgebuild.report.fleet_report import FleetGroupRecord

        return FleetGroupRecord(self.name, self.target, tuple(self.models), self.candidates, self.memory,
                                self.written, str(self.error) if self.error else None, self.latency)


@dataclass
class FleetCompiled:
    fleet: Fleet
    models: dict[str, CompileReport]  # model -> its compile
    groups: list[GroupOutcome]
    record: Path

    @property
    def error(self) -> EdgebuildError | None:
        for report in self.models.values():
            if report.error is not None:
                return report.error
        return next((g.error for g in self.groups if g.error is not None), None)


@dataclass
class _Model:
    """One model of the fleet as it compiles: its work (its project, the selected groups that run it),
    what its stages share, and its compile so far."""

    work: CompileWork
    session: CompileSession
    compiled: CompileReport


def compile_fleet(fleet_dir: Path, selector: str, *, force: frozenset[str] = frozenset(), gate: bool = True,
                  ship_ungated: bool = False, package_since: Path | None = None, progress: bool = False,
                  say: Progress = lambda _: None,
                  on_stage: Callable[[StageOutcome], None] = lambda _: None) -> FleetCompiled:
    """Compile the groups ``selector`` picks of the fleet file at ``fleet_dir``, with every model they run.
    ``package_since``: an earlier bundle or packages folder; each group's bundle is a delta over it."""
    from dataclasses import replace

    from edgebuild.pipeline.runner import Options
    from edgebuild.project.fleet_file import load_fleet
    from edgebuild.stages import MODEL_STAGES, STAGES, compile_work
    from edgebuild.stages.engine import ENGINE
    from edgebuild.stages.session import CompileSession, CompileSettings
    from edgebuild.targets.profiles import load_catalog
    from edgebuild.workflows.work import select, select_work

    fleet = load_fleet(fleet_dir)
    catalog = load_catalog()
    selection = select(selector, fleet.file.fleet, catalog)  # parsed once, for every model's project
    options = Options(force=force, progress=progress)
    settings = CompileSettings(ship_ungated=ship_ungated, package_since=package_since)
    models: dict[str, _Model] = {}
    for name in fleet.models:
        if not any(g.name in selection.names for g in fleet.groups_running(name)):
            continue
        project = fleet.model_project(name)
        if not gate:
            project = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"gate": False})})
        work = select_work(project, selection, catalog)
        session = CompileSession(settings)  # a session holds one model
        say(f"== model {name} ({project.source.parent.name}): {', '.join(g.name for g in work.groups)}")
        models[name] = _Model(work, session, compile_work(work, stages=MODEL_STAGES, options=options, progress=say,
                                                          on_stage=on_stage, session=session))
    groups = [_plan_group(fleet, g, models) for g in fleet.file.fleet if g.name in selection.names]
    for outcome in groups:
        if outcome.error is None and outcome.memory is not None:
            say(f"memory plan {outcome.name}:\n{outcome.memory.table()}")
        for line in outcome.latency.warnings() if outcome.latency else ():
            say(f"latency: {line}")
    for name, model in models.items():  # engines for the groups whose memory plan fits
        fitting = [g for g in model.work.groups if any(o.name == g.name and o.error is None for o in groups)]
        if fitting:
            say(f"== engines of {name}: {', '.join(g.name for g in fitting)}")
            model.compiled = compile_work(replace(model.work, groups=tuple(fitting)),
                                          stages=STAGES[: STAGES.index(ENGINE) + 1], options=options,
                                          progress=say, on_stage=on_stage, session=model.session)
    for outcome in groups:
        if outcome.error is None:
            _ship_group(fleet, outcome, models, settings, say)
    record = BuildLayout(fleet.build_dir).fleet_record
    _write_record(fleet, groups, record)
    _write_reports(fleet, models)
    return FleetCompiled(fleet, {name: m.compiled for name, m in models.items()}, groups, record)


def _write_reports(fleet: Fleet, models: dict[str, _Model]) -> None:
    """Each model's own build report (its stages, gate, preflight) and the fleet's page linking them."""
    from edgebuild.pipeline.runner import write_last_compile
    from edgebuild.report import write_report
    from edgebuild.report.fleet_report import write_fleet_report

    for model in models.values():
        write_last_compile(model.compiled)
        write_report(model.work.project.build_dir)
    write_fleet_report(fleet.build_dir)


def _plan_group(fleet: Fleet, group: FleetGroup, models: dict[str, _Model]) -> GroupOutcome:
    """The group's memory plan from each model's gate selection (before any engine is built)."""
    from edgebuild.devices.memory_plan import estimate_model_memory, plan_group_memory
    from edgebuild.errors import LimitError
    from edgebuild.stages.gate import GATE
    from edgebuild.stages.preflight import PREFLIGHT
    from edgebuild.targets.presets import parse_size

    outcome = GroupOutcome(group.name, group.target_id, list(group.models or []))
    memory = []
    for name in outcome.models:
        work, compiled = models[name].work, models[name].compiled
        gate = compiled.record(GATE)
        preflight = compiled.record(PREFLIGHT, group.name)
        if gate is None or preflight is None or gate.selected is None:
            failed = compiled.error
            outcome.error = failed or LimitError(f"{group.name}: model {name} has no candidate for this group")
            return outcome
        selected_group = next(g for g in work.groups if g.name == group.name)
        assert selected_group.limits is not None, "select_work resolves every group's limit preset"
        candidate = gate.candidate(gate.selected)
        outcome.candidates[name] = f"{candidate.precision} (retention {candidate.retention:.3f})"
        project = work.project
        precision = "int8" if candidate.precision.startswith("int8") else candidate.precision
        memory.append(estimate_model_memory(
            name, gate.folder / candidate.onnx, precision, {s.name: list(s.max_shape) for s in project.model.inputs},
            selected_group.limits.tensorrt_workspace, built_on_device=not group.build_on,
            engine_json=BuildLayout.of(project).engine(group.name) / "engine.json",
            instances=project.runtime.instance_count))
    first = next(g for g in models[outcome.models[0]].work.groups if g.name == group.name)
    assert first.limits is not None, "select_work resolves every group's limit preset"
    outcome.memory = plan_group_memory(group.name, first.limits, parse_size(fleet.file.runtime.footprint), memory)
    outcome.latency = _predict_latency(group, models, outcome.models)
    if not outcome.memory.fits:
        outcome.error = outcome.memory.refusal()
    elif refused := outcome.latency.refusals():
        outcome.error = refused[group.name]
    return outcome


def _predict_latency(group: FleetGroup, models: dict[str, _Model], names: list[str]) -> PredictedLatency:
    """Each of the group's models on its own against the group's budget (the server answers each model's
    requests on their own), before any engine is built."""
    from edgebuild.latency.budget import PredictedLatency, predict_groups
    from edgebuild.latency.calibration import project_fit
    from edgebuild.stages.export import EXPORT

    found: list[GroupLatency] = []
    notes: list[str] = []
    for name in names:
        work, compiled = models[name].work, models[name].compiled
        export = compiled.record(EXPORT)
        selected = [g for g in work.groups if g.name == group.name]
        if export is None or not selected:
            continue
        try:
            fit = project_fit(work.project.source.parent)  # the model project's own (plan --calibrate), if any
        except EdgebuildError:
            fit = None  # predict_groups says what is wrong with the published one, if anything
        predicted = predict_groups(work.project, export.onnx_path, selected, [group], model=name, fit=fit)
        found += predicted.groups
        notes += [f"{name}: {n}" for n in predicted.notes]
    return PredictedLatency(tuple(found), tuple(notes))


def _ship_group(fleet: Fleet, outcome: GroupOutcome, models: dict[str, _Model], settings: CompileSettings,
                progress: Progress) -> None:
    """The group folder with every model, its container and its bundle."""
    from edgebuild.shipping.group import ship_group
    from edgebuild.stages.engine import ENGINE
    from edgebuild.stages.gate import GATE

    folders = {}
    for name in outcome.models:
        engine = models[name].compiled.record(ENGINE, outcome.name)
        if engine is None:
            outcome.error = models[name].compiled.error or EdgebuildError(
                f"{outcome.name}: model {name} has no engine folder")
            return
        folders[name] = models[name].work.project.build_dir / engine.folder
    group = next(g for g in models[outcome.models[0]].work.groups if g.name == outcome.name)
    ungated = tuple(m for m in outcome.models if (gate := models[m].compiled.record(GATE)) and not gate.policy.gated)
    assert outcome.memory is not None, "a group is shipped after its memory plan fits"
    try:
        outcome.written = ship_group(fleet, group, folders, outcome.memory, flavor=settings.container_flavor,
                                     base_image=settings.base_image, package_since=settings.package_since,
                                     ship_ungated=settings.ship_ungated, progress=progress, ungated=ungated)
    except EdgebuildError as exc:
        outcome.error = exc


def _write_record(fleet: Fleet, groups: list[GroupOutcome], path: Path) -> None:
    import json

    from edgebuild.report.fleet_report import FleetRecord
    from edgebuild.runtime.base.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    record = FleetRecord(fleet.name, tuple(g.record() for g in groups),
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    atomic_write_text(path, json.dumps(record.as_dict(), indent=2, default=str))
