"""The preflight stage (per group): every ONNX node checked against the group's TensorRT parser.

Reads: the export stage's ONNX and the group's JetPack release (its parser table, types and
attributes included, and DLA where the group uses it). With ``[task.postprocess] in_model`` the
graph checked is the export with the decode and NMS appended (what the gate's candidates ship),
and a target that cannot run that part (TensorRT before 8.5: blocking; the DLA: it runs on the
GPU) is said with what to do. Its record is a ``TargetPreflight``; a group with blocking findings
stops there (the other groups go on).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from edgebuild.content import digest
from edgebuild.errors import PreflightError
from edgebuild.pipeline.runner import Stage
from edgebuild.stages.export import EXPORT
from edgebuild.stages.session import CompileInputs
from edgebuild.targets.preflight import BLOCKING, DLA_FALLBACK, Finding, TargetPreflight

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["PREFLIGHT"]


def _key(inputs: CompileInputs) -> dict[str, str]:
    from edgebuild.targets.preflight import rules_digest

    group = inputs.unit
    post = inputs.project.task.postprocess
    key = {"onnx": inputs.record(EXPORT).content_sha256, "target": group.target.id, "use_dla": str(group.use_dla),
           "parser_tables": rules_digest(),
           "nms_in_model": digest(post.model_dump()) if getattr(post, "in_model", False) else "no"}
    if group.use_dla:  # the DLA split is priced at the static shape its engine is built at (a GPU key stays as it was)
        key["accelerator"] = digest([DLA_COST_VERSION, group.accelerator,
                                     [s.opt_shape for s in inputs.project.model.inputs]])
    return key


#: the DLA split's pricing (edgebuild.latency.dla_cost): a change to it re-runs only the DLA groups' preflight
DLA_COST_VERSION = 1


def _run(inputs: CompileInputs) -> TargetPreflight:
    from edgebuild.sources.export.nms_graph import answers_detections, append_nms, check_nms_settings
    from edgebuild.targets.preflight import check_target

    exported = inputs.session.onnx_graph(inputs.record(EXPORT).onnx_path)
    post = inputs.project.task.postprocess
    in_model = getattr(post, "in_model", False)
    graph = append_nms(exported, check_nms_settings(inputs.project.task.kind, post.model_dump()),
                       len(inputs.project.task.classes)) if in_model else exported
    found = check_target(graph, inputs.unit)
    dla = _dla_findings(inputs, graph)
    if dla:  # the static shape said with the project's shapes, in place of the ONNX's dynamic axes
        found = replace(found, findings=tuple(f for f in found.findings if f.op_type != "dynamic shapes") + tuple(dla))
    if not in_model or answers_detections(exported):  # an NMS-free (one-to-one) head: nothing of NMS to check
        return found
    return replace(found, findings=found.findings + tuple(_nms_findings(inputs.unit)))


def _dla_findings(inputs: CompileInputs, graph: onnx.ModelProto) -> list[Finding]:
    """A DLA group's split priced at its engine's static shape (``edgebuild.latency.dla_cost``), and the shape."""
    group = inputs.unit
    if not group.use_dla or group.target.module.dla_cores == 0:
        return []
    from edgebuild.latency.dla_cost import dla_cost_findings, image_shape

    batch, hw = image_shape(list(inputs.project.model.inputs))
    static = ", ".join(f"{s.name} {s.opt_shape}" for s in inputs.project.model.inputs)
    shape = Finding("(model)", "static shape", DLA_FALLBACK,
                    f"{group.accelerator}: the DLA runs no dynamic shapes, so this group's engine is built at one "
                    f"shape, min = opt = max = the opt_shape ({static}); a request of another shape is refused",
                    "give the inputs the opt_shape the devices send (model.inputs)",
                    "profiles/tensorrt/dla.toml general_restrictions")
    return [shape, *dla_cost_findings(graph, group, batch=batch, input_hw=hw)]


def _nms_findings(group: SelectedGroup) -> list[Finding]:
    from edgebuild.sources.export.nms_graph import PREFIX, nms_target_problem

    where = f"{PREFIX}nms"
    findings = []
    problem = nms_target_problem(group.target.release.tensorrt)
    if problem is not None:
        findings.append(Finding(where, "NonMaxSuppression", BLOCKING, *problem, source=_NMS_DOCS))
    elif group.use_dla and group.target.module.dla_cores > 0:
        dla = nms_target_problem(group.target.release.tensorrt, use_dla=True)
        assert dla is not None
        findings.append(Finding(where, "NonMaxSuppression", DLA_FALLBACK,
                                dla[0] + "; with GPU fallback TensorRT runs it on the GPU", dla[1], _NMS_DOCS))
    return findings


_NMS_DOCS = "docs/detections.md (TensorRT's INMSLayer)"


def _describe(record: TargetPreflight) -> str:
    if record.blocking:
        return f"{len(record.blocking)} blocking problem(s) (TensorRT {record.tensorrt})"
    return f"clean for TensorRT {record.tensorrt}, {len(record.findings)} warning(s)"


def _verdict(inputs: CompileInputs, record: TargetPreflight) -> PreflightError | None:
    from edgebuild.targets.preflight import preflight_text

    if not record.blocking:
        return None
    onnx_path = inputs.record(EXPORT).onnx_path
    return PreflightError(
        f"{onnx_path.name}: blocking problems for {record.group} = {record.target}\n"
        + preflight_text(onnx_path, [record]),
        hint="each listed node needs the suggested fix, or drop that target")


PREFLIGHT = Stage(
    name="preflight", version=2,
    summary="every ONNX node checked against the group's TensorRT parser (types and attributes too)",
    record=TargetPreflight, after=("export",), per_group=True, key=_key, run=_run, describe=_describe,
    verdict=_verdict)
