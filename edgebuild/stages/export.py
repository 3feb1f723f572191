"""The export stage: ONNX with dynamic axes, parity-checked against PyTorch; or a model file, imported.

Reads: the model stage, the opset every selected target's TensorRT takes. Writes
``build/export/opset<N>/`` (the ONNX and its export.json); its record is an ``ExportRecord``. For a
model file (``[model] source``) it is an import (``edgebuild.sources.onnx_file.import_onnx``): the
checked file copied there at its own opset, with an ``ExportRecord`` of the same shape (exporter
``"import"``, the checks run instead of a parity with itself), which every later stage reads unchanged.
A TorchScript file or a torchvision/timm model by name is exported from PyTorch
(``edgebuild.sources.torch_source.export_source``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.project.layout import BuildLayout
from edgebuild.sources.export import ExportRecord
from edgebuild.stages.model import MODEL
from edgebuild.stages.session import CompileSession

__all__ = ["EXPORT"]


def _opset(inputs: StageInputs) -> tuple[int, str]:
    from edgebuild.sources.export import choose_opset

    return choose_opset(inputs.project, inputs.plan.releases)


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.sources.ultralytics_checkpoint import export_key_parts, is_checkpoint

    if is_checkpoint(inputs.project):
        return export_key_parts(inputs.project, _opset(inputs)[0])
    from edgebuild.sources import torch_source

    if torch_source.source_kind(inputs.project):  # a TorchScript file, a torchvision/timm model by name
        return torch_source.export_key_parts(inputs.project, _opset(inputs)[0])
    if inputs.project.model.source is not None:
        from edgebuild.sources.onnx_file import import_key_parts

        return import_key_parts(inputs.project, inputs.record(MODEL))
    from edgebuild.sources.export import cache_key_parts

    return cache_key_parts(inputs.project, _opset(inputs)[0])


def _run(inputs: StageInputs) -> ExportRecord:
    from edgebuild.sources.ultralytics_checkpoint import export_checkpoint, is_checkpoint

    if is_checkpoint(inputs.project):
        opset, reason = _opset(inputs)
        return export_checkpoint(inputs.project, opset, reason, inputs.plan.groups, report=inputs.report)
    from edgebuild.sources.torch_source import export_source, source_kind

    if source_kind(inputs.project):
        opset, reason = _opset(inputs)
        return export_source(inputs.project, opset, reason, inputs.plan.groups, report=inputs.report)
    if inputs.project.model.source is not None:
        from edgebuild.sources.onnx_file import import_onnx

        return import_onnx(inputs.project, inputs.record(MODEL), inputs.plan.groups, report=inputs.report)
    from edgebuild.sources.export import export_model

    session: CompileSession = inputs.session
    opset, reason = _opset(inputs)
    return export_model(inputs.project, opset, reason, report=inputs.report,
                        torch_runner=session.loaded_torch_runner, groups=inputs.plan.groups)


def _from_dict(data: dict[str, Any]) -> ExportRecord:
    return ExportRecord.from_dict(data, Path(data["onnx_path"]).parent)


def _relocate(inputs: StageInputs, record: ExportRecord) -> ExportRecord:
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
    name="export", version=1, summary="ONNX export with dynamic axes and a parity check against PyTorch (a model "
                                      "file: imported as given)",
    record=ExportRecord, after=("model",), key=_key, run=_run, outputs=lambda inputs, r: [r.onnx_path.parent],
    describe=_describe, from_dict=_from_dict, relocate=_relocate)
