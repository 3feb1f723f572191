"""The preflight stage (per group): every ONNX node checked against the group's TensorRT parser.

Reads: the export stage's ONNX and the group's JetPack release (its parser table, types and
attributes included, and DLA where the group uses it). Its record is a ``TargetPreflight``; a
group with blocking findings stops there (the other groups go on).
"""

from __future__ import annotations

from edgebuild.errors import PreflightError
from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.stages.export import EXPORT
from edgebuild.stages.session import CompileSession
from edgebuild.targets.preflight import TargetPreflight

__all__ = ["PREFLIGHT"]


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.targets.preflight import rules_digest

    group = inputs.group
    return {"onnx": inputs.record(EXPORT).content_sha256, "target": group.target.id, "use_dla": str(group.use_dla),
            "parser_tables": rules_digest()}


def _run(inputs: StageInputs) -> TargetPreflight:
    from edgebuild.targets.preflight import check_target

    session: CompileSession = inputs.session
    return check_target(session.onnx_graph(inputs.record(EXPORT).onnx_path), inputs.group)


def _describe(record: TargetPreflight) -> str:
    if record.blocking:
        return f"{len(record.blocking)} blocking problem(s) (TensorRT {record.tensorrt})"
    return f"clean for TensorRT {record.tensorrt}, {len(record.findings)} warning(s)"


def _verdict(inputs: StageInputs, record: TargetPreflight) -> PreflightError | None:
    from edgebuild.targets.preflight import preflight_text

    if not record.blocking:
        return None
    onnx_path = inputs.record(EXPORT).onnx_path
    return PreflightError(
        f"{onnx_path.name}: blocking problems for {record.group} = {record.target}\n"
        + preflight_text(onnx_path, [record]),
        hint="each listed node needs the suggested fix, or drop that target")


PREFLIGHT = Stage(
    name="preflight", version=1,
    summary="every ONNX node checked against the group's TensorRT parser (types and attributes too)",
    record=TargetPreflight, after=("export",), per_group=True, key=_key, run=_run, describe=_describe,
    verdict=_verdict)
