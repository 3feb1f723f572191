"""The export stage: ONNX with dynamic axes, parity-checked against PyTorch; or a model file, imported.

Reads: the model stage, the opset every selected target's TensorRT takes. Writes
``build/export/opset<N>/`` (the ONNX and its export.json); its record is an ``ExportRecord``. How
the ONNX is made is the model's route (``edgebuild.sources.routes``): an export from PyTorch, or
for an ONNX file an import at its own opset, with an ``ExportRecord`` of the same shape
(exporter ``"import"``, the checks run instead of a parity with itself), which every later stage
reads unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgebuild.jsontypes import JsonObject
from edgebuild.pipeline.runner import Stage
from edgebuild.project.layout import BuildLayout
from edgebuild.sources.export.onnx_export import ExportRecord
from edgebuild.sources.routes import route_for
from edgebuild.stages.model import MODEL
from edgebuild.stages.session import CompileInputs

__all__ = ["EXPORT"]


def _opset(inputs: CompileInputs) -> tuple[int, str]:
    from edgebuild.sources.export.onnx_export import choose_opset

    return choose_opset(inputs.project, [g.target.release for g in inputs.work.groups])


def _key(inputs: CompileInputs) -> dict[str, str]:
    route = route_for(inputs.project)
    opset = _opset(inputs)[0] if route.needs_opset else 0
    return route.export_key(inputs.project, inputs.record(MODEL), opset)


def _run(inputs: CompileInputs) -> ExportRecord:
    session = inputs.session
    route = route_for(inputs.project)
    opset, reason = _opset(inputs) if route.needs_opset else (0, "")
    return route.export(inputs.project, inputs.record(MODEL), opset, reason, inputs.work.groups,
                        session.loaded_torch_runner, inputs.progress)


def _from_dict(data: JsonObject) -> ExportRecord:
    return ExportRecord.from_dict(data, Path(data["onnx_path"]).parent)


def _relocate(inputs: CompileInputs, record: ExportRecord) -> ExportRecord:
    """The project may have moved since the record was written: its ONNX is in this build folder."""
    return replace(record, onnx_path=BuildLayout.of(inputs.project).export(record.opset) / record.onnx_path.name)


def _describe(record: ExportRecord) -> str:
    if not record.parity:  # an imported model file: nothing to compare it with
        from edgebuild.sources.onnx_file import describe_import

        return describe_import(record)
    worst = max(record.parity, key=lambda p: p.max_abs)
    return (f"opset {record.opset}, {record.exporter} exporter, parity ok at {len({p.shape for p in record.parity})} "
            f"shapes (max abs error {worst.max_abs:.2g}) -> {record.onnx_path.parent.name}/{record.onnx_path.name}")


EXPORT = Stage(
    name="export", version=2, summary="ONNX export with dynamic axes and a parity check against PyTorch (a model "
                                      "file: imported as given)",
    record=ExportRecord, after=("model",), key=_key, run=_run, outputs=lambda inputs, r: [r.onnx_path.parent],
    describe=_describe, from_dict=_from_dict, relocate=_relocate)
