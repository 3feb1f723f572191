"""The budget stage: a fleet group's latency budget against each candidate precision's predicted latency.

Reads: the export stage's ONNX, the group's module, JetPack, power mode and budget (its ``[[fleet]]``
entry's ``latency_budget_ms`` / ``min_fps``), the candidate precisions (``quantize.precisions``), the
module's performance data and the latency fit (the project's own, ``plan --calibrate``, else the
published one). Writes no files. Record: ``PredictedLatency`` for the group (its prediction per
candidate, or a note why there is none). A group without a budget is predicted too, for the summary
and the report. Its verdict refuses a group whose every candidate misses the budget beyond the error
band (``edgebuild.latency.budget``, exit 17): the runner then runs none of that group's later stages,
so no engine is built for it; the other groups go on.
"""

from __future__ import annotations

from edgebuild.content import digest
from edgebuild.errors import EdgebuildError, LatencyBudgetError
from edgebuild.latency.budget import PredictedLatency
from edgebuild.latency.model import LatencyModel
from edgebuild.pipeline.runner import Stage
from edgebuild.project.config import Project
from edgebuild.stages.export import EXPORT
from edgebuild.stages.session import CompileInputs

__all__ = ["BUDGET"]


def _own(inputs: CompileInputs) -> dict[str, object]:
    """The group's ``[[fleet]]`` entry as the budget reads it."""
    entry = next((g for g in inputs.project.fleet if g.name == inputs.unit.name), None)
    return {"latency_budget_ms": entry.latency_budget_ms, "min_fps": entry.min_fps} if entry else {}


def _key(inputs: CompileInputs) -> dict[str, str]:
    from edgebuild.latency.calibration import project_fit_digest

    group = inputs.unit
    return {"onnx": inputs.record(EXPORT).content_sha256, "target": group.target.id,
            "power_mode": str(group.power_mode), "budget": digest(_own(inputs)),
            "precisions": digest(sorted(inputs.project.quantize.precisions)),
            "module": digest([p.model_dump() for p in group.target.module.performance]),
            "fit": project_fit_digest(inputs.project.source.parent)}


def _fit(project: Project) -> LatencyModel | None:
    from edgebuild.latency.calibration import project_fit

    try:
        return project_fit(project.source.parent)
    except EdgebuildError:
        return None  # predict_groups says what is wrong with the published fit, if anything


def _run(inputs: CompileInputs) -> PredictedLatency:
    from edgebuild.latency.budget import predict_groups

    predicted = predict_groups(inputs.project, inputs.record(EXPORT).onnx_path, [inputs.unit], inputs.project.fleet,
                               fit=_fit(inputs.project))
    for line in predicted.warnings():
        inputs.progress(f"latency: {line}")
    return predicted


def _describe(predicted: PredictedLatency) -> str:
    if not predicted.groups:
        return "; ".join(predicted.notes) or "no prediction"
    group = predicted.groups[0]
    fastest = group.fastest
    budget = f"budget {group.budget_ms:g} ms: {fastest.verdict}" if group.budget_ms is not None else "no budget"
    return (f"fastest {fastest.precision} {fastest.latency_ms:.2f} ms predicted (band {fastest.low_ms:.2f}-"
            f"{fastest.high_ms:.2f}) on {group.module} {group.power_mode}; {budget}")


def _verdict(inputs: CompileInputs, predicted: PredictedLatency) -> LatencyBudgetError | None:
    return predicted.refusals().get(inputs.unit.name)


BUDGET = Stage(
    name="budget", version=1,
    summary="the group's latency budget against each candidate precision's predicted latency (no device); "
            "a group every candidate misses gets no engine",
    record=PredictedLatency, after=("export",), per_group=True, key=_key, run=_run, describe=_describe,
    verdict=_verdict)
