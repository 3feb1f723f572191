"""``edgebuild compile`` of a fleet file: every model once, every group with all of its models.

The model-level stages (model, reference, export, preflight, gate, and the engine per group that
runs the model) run per model, each in its own build folder (``build/models/<name>/``) with the
project view :meth:`edgebuild.project.fleet.Fleet.model_project` gives it, through the same stage
protocol as a one-model compile, so a second compile reuses what did not change. Between the gate
and the engines each group's memory plan is made from the gates' selections; a group whose models
do not fit is refused there, before any of its engines is built, and the other groups go on.
Then each group gets its folder (``build/groups/<group>/``: ``group.json`` and a copy of every
model's folder), one container and one bundle with every model (``edgebuild.shipping.group``).
``build/fleet.json`` says per group which models, which candidates and the memory plan, and
``build/report/`` shows it (each model's own report is in ``build/models/<name>/report/``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgebuild.errors import EdgebuildError

__all__ = ["FleetCompiled", "GroupOutcome", "compile_fleet"]

Report = Callable[[str], None]
FLEET_RECORD = "fleet.json"


@dataclass
class GroupOutcome:
    """One fleet group: its models' candidates, its memory plan, what was written, or why not."""

    name: str
    target: str
    models: list[str]
    candidates: dict[str, str] = field(default_factory=dict)  # model -> selected candidate
    memory: Any = None  # edgebuild.devices.memory_plan.MemoryPlan
    written: dict[str, Any] = field(default_factory=dict)  # folder, container, bundle, ... (relative paths)
    error: EdgebuildError | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.name, "target": self.target, "models": self.models, "candidates": self.candidates,
                "memory_plan": self.memory.as_dict() if self.memory else None, **self.written,
                "error": str(self.error) if self.error else None}


@dataclass
class FleetCompiled:
    fleet: Any  # edgebuild.project.fleet.Fleet
    models: dict[str, Any]  # model -> its CompileReport
    groups: list[GroupOutcome]
    record: Path

    @property
    def error(self) -> EdgebuildError | None:
        for report in self.models.values():
            if report.error is not None:
                return report.error
        return next((g.error for g in self.groups if g.error is not None), None)


def compile_fleet(fleet_dir: Path, selector: str, *, force: frozenset[str] = frozenset(), gate: bool = True,
                  ship_ungated: bool = False, package_since: Path | None = None, progress: bool = False,
                  report: Report = lambda _: None, on_stage: Callable[[Any], None] = lambda _: None) -> FleetCompiled:
    """Compile the groups ``selector`` picks of the fleet file at ``fleet_dir``, with every model they run.
    ``package_since``: an earlier bundle or packages folder; each group's bundle is a delta over it."""
    from dataclasses import replace

    from edgebuild.pipeline.runner import Options, plan_compile, run_stages
    from edgebuild.project.fleet import load_fleet
    from edgebuild.stages import MODEL_STAGES, STAGES
    from edgebuild.stages.engine import ENGINE
    from edgebuild.stages.session import CompileSession
    from edgebuild.targets.profiles import load_catalog, select_groups

    fleet = load_fleet(fleet_dir)
    catalog = load_catalog()
    selected = {g.name for g in select_groups(selector, fleet.file.fleet, catalog)}
    options = Options(force=force, progress=progress, ship_ungated=ship_ungated, package_since=package_since)
    plans, reports, sessions = {}, {}, {}
    for name in fleet.models:
        if not any(g.name in selected for g in fleet.groups_running(name)):
            continue
        project = fleet.model_project(name)
        if not gate:
            project = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"gate": False})})
        plan = plan_compile(project, ",".join(g.name for g in project.fleet if g.name in selected), catalog)
        plans[name], sessions[name] = plan, CompileSession()  # a session holds one model
        report(f"== model {name} ({project.source.parent.name}): {', '.join(g.name for g in plan.groups)}")
        reports[name] = run_stages(plan, MODEL_STAGES, options=options, report=report, on_stage=on_stage,
                                   session=sessions[name])
    groups = [_plan_group(fleet, g, plans, reports, selected) for g in fleet.file.fleet if g.name in selected]
    for outcome in groups:
        if outcome.error is None:
            report(f"memory plan {outcome.name}:\n{outcome.memory.table()}")
    for name, plan in plans.items():  # engines for the groups whose memory plan fits
        fitting = [g for g in plan.groups if any(o.name == g.name and o.error is None for o in groups)]
        if fitting:
            report(f"== engines of {name}: {', '.join(g.name for g in fitting)}")
            reports[name] = run_stages(replace(plan, groups=tuple(fitting)), STAGES[: STAGES.index(ENGINE) + 1],
                                       options=options, report=report, on_stage=on_stage, session=sessions[name])
    for outcome in groups:
        if outcome.error is None:
            _ship_group(fleet, outcome, plans, reports, options, report)
    record = fleet.build_dir / FLEET_RECORD
    _write_record(fleet, groups, record)
    _write_reports(fleet, plans, reports)
    return FleetCompiled(fleet, reports, groups, record)


def _write_reports(fleet: Any, plans: dict[str, Any], reports: dict[str, Any]) -> None:
    """Each model's own build report (its stages, gate, preflight) and the fleet's page linking them."""
    from edgebuild.pipeline.runner import write_last_compile
    from edgebuild.report import write_report
    from edgebuild.report.fleet import write_fleet_report

    for name, compiled in reports.items():
        write_last_compile(compiled)
        write_report(plans[name].project.build_dir)
    write_fleet_report(fleet.build_dir)


def _plan_group(fleet: Any, group: Any, plans: dict[str, Any], reports: dict[str, Any],
                selected: set[str]) -> GroupOutcome:
    """The group's memory plan from each model's gate selection (before any engine is built)."""
    from edgebuild.devices.memory_plan import estimate_model_memory, plan_group_memory
    from edgebuild.errors import LimitError
    from edgebuild.targets.limits import parse_size

    outcome = GroupOutcome(group.name, group.target_id, list(group.models or []))
    memory = []
    for name in outcome.models:
        plan = plans[name]
        gate = reports[name].record("gate")
        preflight = reports[name].record("preflight", group.name)
        if gate is None or preflight is None or gate.selected is None:
            failed = reports[name].error
            outcome.error = failed or LimitError(f"{group.name}: model {name} has no candidate for this group")
            return outcome
        selected_group = next(g for g in plan.groups if g.name == group.name)
        candidate = gate.candidate(gate.selected)
        outcome.candidates[name] = f"{candidate.precision} (retention {candidate.retention:.3f})"
        project = plan.project
        precision = "int8" if candidate.precision.startswith("int8") else candidate.precision
        memory.append(estimate_model_memory(
            name, gate.folder / candidate.onnx, precision, {s.name: list(s.max_shape) for s in project.model.inputs},
            selected_group.limits.tensorrt_workspace, built_on_device=not group.build_on,
            engine_json=project.build_dir / "engines" / group.name / "engine.json"))
    first = next(g for g in plans[outcome.models[0]].groups if g.name == group.name)
    outcome.memory = plan_group_memory(group.name, first.limits, parse_size(fleet.file.runtime.footprint), memory)
    if not outcome.memory.fits:
        outcome.error = outcome.memory.refusal()
    return outcome


def _ship_group(fleet: Any, outcome: GroupOutcome, plans: dict[str, Any], reports: dict[str, Any], options: Any,
                report: Report) -> None:
    """The group folder with every model, its container and its bundle."""
    from edgebuild.shipping.group import ship_group

    folders = {}
    for name in outcome.models:
        engine = reports[name].record("engine", outcome.name)
        if engine is None:
            outcome.error = reports[name].error or EdgebuildError(f"{outcome.name}: model {name} has no engine folder")
            return
        folders[name] = plans[name].project.build_dir / engine.folder
    group = next(g for g in plans[outcome.models[0]].groups if g.name == outcome.name)
    ungated = tuple(m for m in outcome.models if not reports[m].record("gate").policy.gated)
    try:
        outcome.written = ship_group(fleet, group, folders, outcome.memory, options=options, report=report,
                                     ungated=ungated)
    except EdgebuildError as exc:
        outcome.error = exc


def _write_record(fleet: Any, groups: list[GroupOutcome], path: Path) -> None:
    from edgebuild.runtime.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"fleet": fleet.name, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime()),
                                        "groups": [g.as_dict() for g in groups]}, indent=2, default=str))


def fleet_summary(compiled: FleetCompiled) -> str:
    """Per group: its models and their candidates, the memory plan, what was written or why not."""
    lines = [f"fleet {compiled.fleet.name}:"]
    for group in compiled.groups:
        lines.append(f"  {group.name} ({group.target}): " + ", ".join(
            f"{m} {group.candidates.get(m, '-')}" for m in group.models))
        if group.memory is not None:
            plan = group.memory
            lines.append(f"    memory {plan.total / (1 << 20):.0f} MiB of {plan.budget / (1 << 20):.0f} MiB "
                         f"({plan.preset})" + ("" if plan.fits else ": DOES NOT FIT"))
        for key in ("folder", "container", "bundle", "mender"):
            if key in group.written:
                lines.append(f"    {key}: {group.written[key]}")
        if group.error is not None:
            lines.append(f"    FAILED: {group.error.message.splitlines()[0]}")
    return "\n".join(lines)
