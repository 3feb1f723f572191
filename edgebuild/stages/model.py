"""The model stage: load the model and check it at the min/opt/max shapes against the task.

Reads: the project's model source, either an entry point (its module, weights) run with PyTorch, or
a model file (``[model] source``): ONNX, checked and run with ONNX Runtime, no PyTorch
(``edgebuild.sources.onnx_file``), or an Ultralytics checkpoint, wrapped and run with PyTorch
(``edgebuild.sources.ultralytics_checkpoint``), or a TorchScript file or torchvision/timm model by name,
run with PyTorch (``edgebuild.sources.torch_source``); and the task. Writes nothing but its record (``ModelRecord``;
``OnnxModelRecord`` for a model file): the outputs checked against the task at every profile shape.
"""

from __future__ import annotations

from typing import Any

from edgebuild.content import digest, tool_versions
from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.sources.model import ModelRecord
from edgebuild.stages.session import CompileSession

__all__ = ["MODEL"]


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.sources.ultralytics_checkpoint import is_checkpoint

    if is_checkpoint(inputs.project):
        from edgebuild.sources.task_outputs import task_outputs_key
        from edgebuild.sources.ultralytics_checkpoint import checkpoint_key_parts

        return {**checkpoint_key_parts(inputs.project), "tools": digest(tool_versions("torch")),
                "task_outputs": task_outputs_key(inputs.project)}
    from edgebuild.sources.torch_source import source_key_parts, source_kind

    if source_kind(inputs.project):  # a TorchScript file, a torchvision/timm model by name
        from edgebuild.sources.task_outputs import task_outputs_key

        return {**source_key_parts(inputs.project), "tools": digest(tool_versions("torch")),
                "task_outputs": task_outputs_key(inputs.project)}
    if inputs.project.model.source is not None:
        from edgebuild.sources.onnx_file import model_check_key_parts

        return model_check_key_parts(inputs.project, inputs.plan.groups)
    from edgebuild.sources.model import model_key_parts
    from edgebuild.sources.task_outputs import task_outputs_key

    return {**model_key_parts(inputs.project), "tools": digest(tool_versions("torch")),
            "task_outputs": task_outputs_key(inputs.project)}


def _run(inputs: StageInputs) -> ModelRecord:
    from edgebuild.sources.ultralytics_checkpoint import check_checkpoint, is_checkpoint

    if is_checkpoint(inputs.project):
        return check_checkpoint(inputs.project, report=inputs.report)
    from edgebuild.sources.torch_source import check_source, source_kind

    if source_kind(inputs.project):
        return check_source(inputs.project, report=inputs.report)
    if inputs.project.model.source is not None:
        from edgebuild.sources.onnx_file import check_onnx_model

        return check_onnx_model(inputs.project, inputs.plan.groups, report=inputs.report)
    from edgebuild.sources.model import check_model

    session: CompileSession = inputs.session
    return check_model(inputs.project, session.torch_runner(inputs.project))


def _from_dict(data: dict[str, Any]) -> ModelRecord:
    from edgebuild.sources.onnx_file import read_model_record

    return read_model_record(data)


def _describe(record: ModelRecord) -> str:
    if getattr(record, "kind", None) == "ultralytics":  # an Ultralytics checkpoint
        from edgebuild.sources.ultralytics_checkpoint import describe_checkpoint

        return describe_checkpoint(record)  # type: ignore[arg-type]
    if getattr(record, "kind", None) in ("torchscript", "hub"):
        from edgebuild.sources.torch_source import describe_source

        return describe_source(record)  # type: ignore[arg-type]
    if hasattr(record, "kind"):  # a model file (OnnxModelRecord)
        from edgebuild.sources.onnx_file import describe_model

        return describe_model(record)  # type: ignore[arg-type]
    return (f"{record.entry_point} ({record.parameters:,} parameters), forward at min/opt/max shapes "
            f"in {record.seconds:.1f} s")


MODEL = Stage(
    name="model", version=2, summary="load the model (entry point and weights, or a model file), run it at the "
                                     "min/opt/max shapes",
    record=ModelRecord, key=_key, run=_run, describe=_describe, from_dict=_from_dict)
