"""``edgebuild plan`` in a project: the latency plan of each selected fleet group on the project's export.

The export stage runs first where it is not up to date (``run_until``); the predictions are
``edgebuild.latency.plan``'s, each row with the engine memory the fleet's memory plan estimates for
its precision (``edgebuild.devices.memory_plan``). ``plan --model`` (``edgebuild.latency.plan.plan_latency``)
and ``plan --calibrate`` (``edgebuild.latency.calibration.calibrate_project``) need no workflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgebuild.latency.model import LatencyModel
from edgebuild.latency.plan import LatencyPlan, PlanRequest, candidate_precisions, plan_groups
from edgebuild.project.config import Project
from edgebuild.text import Progress

__all__ = ["plan_project"]


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
