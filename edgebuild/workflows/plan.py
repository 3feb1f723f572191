"""``edgebuild plan`` in a project: the latency plan of each selected fleet group on the project's export.

The export stage runs first where it is not up to date (``run_until``); the predictions are
``edgebuild.latency.plan``'s, each row with the engine memory the fleet's memory plan estimates for
its precision (``edgebuild.devices.memory_plan``). ``plan --model`` (``edgebuild.latency.plan.plan_latency``)
and ``plan --calibrate`` (``edgebuild.latency.calibration.calibrate_project``) need no workflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from edgebuild.errors import TargetError
from edgebuild.latency.device_plan import DevicePlan
from edgebuild.latency.model import LatencyModel
from edgebuild.latency.plan import LatencyPlan, PlanRequest, candidate_precisions, plan_groups
from edgebuild.project.config import Project
from edgebuild.project.fleet_group import FleetGroup
from edgebuild.text import Progress

__all__ = ["FleetGroupPlan", "plan_fleet", "plan_project"]


def plan_project(project_dir: Path, selector: str = "all", request: PlanRequest = PlanRequest(), *,
                 progress: Progress = lambda _: None, fit: LatencyModel | None = None) -> LatencyPlan:
    """The plan of ``selector``'s groups (``edgebuild.latency.plan.plan_groups``) on the project's export, run
    as needed; ``fit`` defaults to the project's own (``plan --calibrate``) where it has one."""
    from edgebuild.latency.calibration import project_fit
    from edgebuild.stages.export import EXPORT
    from edgebuild.workflows.work import load_work, run_until

    work = load_work(project_dir, selector)
    export = run_until(work, EXPORT, say=progress).record(EXPORT)
    assert export is not None, "the export stage ran without a record"
    memory = _engine_memory(work.project, export.onnx_path, candidate_precisions(work.project, request))
    return plan_groups(work.project, export.onnx_path, work.groups, request,
                       fit=fit or project_fit(project_dir), engine_memory=memory)


def _engine_memory(project: Project, onnx_path: Path, precisions: Sequence[str]) -> dict[str, int]:
    """Per precision, the engine memory the fleet's memory plan counts for this model before its engine is built."""
    from edgebuild.devices.memory_plan import estimate_model_memory

    shapes = {s.name: list(s.max_shape) for s in project.model.inputs}
    return {p: estimate_model_memory(project.project.name, onnx_path, p, shapes, 0, False).engine for p in precisions}


@dataclass(frozen=True)
class FleetGroupPlan:
    """One group of a fleet file: its device plan, or why it has none."""

    group: str
    target: str  # module@jetpack
    plan: DevicePlan | None
    error: str | None = None

    def as_dict(self) -> dict:
        return {"group": self.group, "target": self.target, **(self.plan.as_dict() if self.plan else {}),
                "error": self.error}


def plan_fleet(fleet_dir: Path, selector: str = "all", request: PlanRequest = PlanRequest(), *,
               progress: Progress = lambda _: None) -> list[FleetGroupPlan]:
    """``plan`` of a fleet file: per selected group, where each of its models runs (GPU, DLA0, DLA1) at which
    precision (``edgebuild.latency.device_plan``), on each model's export (run as needed), at batch 1 and the
    group's power mode (else its module's fastest with a known clock); the budget is the request's, else the
    group's ``latency_budget_ms`` (each model's latency with the others running) and ``min_fps`` (the group's
    frames per second, every model once per frame)."""
    from edgebuild.errors import EdgebuildError
    from edgebuild.latency.budget import performance_for
    from edgebuild.latency.device_plan import PlannedModel, plan_device
    from edgebuild.latency.graph import fixed_graph_cost
    from edgebuild.project.fleet_file import load_fleet
    from edgebuild.stages.export import EXPORT
    from edgebuild.targets.dla import accelerator_problem
    from edgebuild.targets.profiles import load_catalog
    from edgebuild.workflows.work import run_until, select, select_work

    fleet = load_fleet(fleet_dir)
    catalog = load_catalog()
    selection = select(selector, fleet.file.fleet, catalog)
    costs: dict[str, PlannedModel] = {}
    plans = []
    for group in (g for g in fleet.file.fleet if g.name in selection.names):
        try:
            models = []
            for name in group.models or []:
                if name not in costs:
                    project = fleet.model_project(name)
                    progress(f"== model {name}: export")
                    export = run_until(select_work(project, selection, catalog), EXPORT, say=progress).record(EXPORT)
                    assert export is not None, "the export stage ran without a record"
                    image = next((i for i in project.model.inputs if len(i.opt_shape) == 4), None)
                    hw = (image.opt_shape[2], image.opt_shape[3]) if image else None
                    costs[name] = PlannedModel(name, fixed_graph_cost(export.onnx_path, batch=1, input_hw=hw),
                                               candidate_precisions(project, request))
                models.append(replace(costs[name], pinned=_pinned(group, name)))
            module = catalog.modules[group.module]
            perf = performance_for(module, group.jetpack, group.power_mode)
            if perf is None:
                raise TargetError(f"{module.id}: no power mode {group.power_mode or ''} with a known GPU clock in "
                                  f"profiles/modules/{module.id}.toml: nothing to predict")
            plan = plan_device(models, perf, module.id, budget_ms=request.budget_ms or group.latency_budget_ms,
                               min_fps=request.min_fps or group.min_fps,
                               no_dla=accelerator_problem("dla", module, catalog.releases[group.jetpack]))
            plans.append(FleetGroupPlan(group.name, group.target_id, plan))
        except EdgebuildError as exc:
            plans.append(FleetGroupPlan(group.name, group.target_id, None, str(exc)))
    return plans


def _pinned(group: FleetGroup, model: str) -> str | None:
    """Where the user placed ``model`` in ``group`` (its ``placement``, else the group's ``accelerator`` where the
    group says one); None: the planner places it."""
    if model in (group.placement or {}):
        return (group.placement or {})[model]
    return group.accelerator if "accelerator" in group.model_fields_set or group.use_dla else None
