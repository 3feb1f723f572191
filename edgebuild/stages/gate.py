"""The gate stage: FP16 and calibrated INT8 candidates measured against FP32, one selected.

Reads: the export stage's ONNX, the calibration and validation data, the groups preflight
passed (a candidate one of their parsers would reject is never selected). Writes
``build/gate/`` (the decision, and the measurements kept apart from it so a new threshold
re-decides without measuring); its record is a ``GateResult``, which carries the accuracy
policy every later judgement uses.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgebuild.accuracy.gate import GateResult
from edgebuild.content import digest
from edgebuild.errors import AccuracyGateError
from edgebuild.jsontypes import JsonObject
from edgebuild.pipeline.runner import Stage
from edgebuild.project.layout import BuildLayout
from edgebuild.stages.export import EXPORT
from edgebuild.stages.preflight import PREFLIGHT
from edgebuild.stages.session import CompileInputs
from edgebuild.targets.profiles import SelectedGroup

__all__ = ["GATE"]


def cleared_groups(inputs: CompileInputs) -> tuple[SelectedGroup, ...]:
    """The selected groups whose preflight passed (a blocked group is skipped, not the whole fleet)."""
    cleared = inputs.group_records(PREFLIGHT)
    return tuple(g for g in inputs.work.groups if g.name in cleared)


def _key(inputs: CompileInputs) -> dict[str, str]:
    from edgebuild.accuracy.gate import decision_settings, measurement_key_parts
    from edgebuild.targets.preflight import rules_digest

    return {**measurement_key_parts(inputs.project, inputs.record(EXPORT)),
            "decision": digest(decision_settings(inputs.project)),
            # every candidate is checked against the TensorRT parsers of the groups preflight passed, and against
            # the DLA of those placed on one (a GPU group's part of the key stays as it was)
            "targets": digest(sorted(g.target.id + (f"/{g.accelerator}" if g.use_dla else "")
                                     for g in cleared_groups(inputs))),
            "parser_tables": rules_digest()}


def _run(inputs: CompileInputs) -> GateResult:
    from edgebuild.accuracy.gate import run_gate

    return run_gate(inputs.project, inputs.record(EXPORT), groups=cleared_groups(inputs), force=inputs.forced,
                    progress=inputs.options.progress, say=inputs.progress)


def _from_dict(data: JsonObject) -> GateResult:
    return GateResult.from_dict(data, Path(data["folder"]))


def _relocate(inputs: CompileInputs, record: GateResult) -> GateResult:
    return replace(record, folder=BuildLayout.of(inputs.project).gate)  # the project may have moved since


def _describe(result: GateResult) -> str:
    summary = ", ".join(f"{c.precision} {c.retention:.3f}{'' if c.passed else ' FAIL'}" for c in result.candidates)
    chosen = f"selected {result.selected}" if result.selected else "nothing passes"
    tracking = ""
    if result.tracking is not None:
        t = result.tracking
        tracking = (f"; tracking FP32 {t.metric} {t.reference:.4f}, retention "
                    + ", ".join(f"{r.precision} {r.retention:.3f}{'' if r.passed else ' FAIL'}" for r in t.rows))
    return (f"FP32 {result.metric} {result.reference_value:.4f}; retention {summary}{tracking}; {chosen} "
            f"[{result.backend}; {result.measured} measured, {result.stored} stored]")


def _verdict(inputs: CompileInputs, result: GateResult) -> AccuracyGateError | None:
    from edgebuild.accuracy.gate import verdict

    return verdict(inputs.project, result)


GATE = Stage(
    name="gate", version=5,
    summary="FP16 and calibrated INT8 (Q/DQ) candidates, accuracy retention against FP32, INT8 fallback, "
            "selection (measurements stored apart from the decision)",
    record=GateResult, after=("export", "preflight"), key=_key, run=_run, outputs=lambda inputs, r: r.files,
    describe=_describe, from_dict=_from_dict, relocate=_relocate, verdict=_verdict)
