"""The reference stage: the FP32 accuracy of the model on the validation set.

Reads: the model stage, the validation data, the task and metric. Evaluates the PyTorch model (an
entry point) or, for a model file (``[model] source``), that file with ONNX Runtime. Its record
(``Evaluation``) is what retention is measured against before the gate has its own FP32 ONNX measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgebuild.accuracy.evaluate import Evaluation
from edgebuild.content import digest, tool_versions
from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.stages.session import CompileSession

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["REFERENCE"]


def _torch_source(project: Project) -> str | None:
    """"torchscript" or "hub" for a model file or name that PyTorch loads, else None."""
    from edgebuild.sources.torch_source import source_kind

    return source_kind(project)


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.datasets.project_data import validation_digest
    from edgebuild.sources.ultralytics_checkpoint import checkpoint_key_parts, is_checkpoint

    project = inputs.project
    if is_checkpoint(project):
        model, tools = checkpoint_key_parts(project), ("torch", "faster-coco-eval")
    elif _torch_source(project):
        from edgebuild.sources.torch_source import source_key_parts

        model, tools = source_key_parts(project), ("torch", "faster-coco-eval")
    elif project.model.source is not None:
        from edgebuild.sources.onnx_file import onnx_key_parts

        model, tools = onnx_key_parts(project), ("onnxruntime", "faster-coco-eval")
    else:
        from edgebuild.sources.model import model_key_parts

        model, tools = model_key_parts(project), ("torch", "faster-coco-eval")
    return {**model, "validation": validation_digest(project),
            "task": digest(project.task.model_dump()), "metric": project.metric,
            "tools": digest(tool_versions(*tools))}


def _run(inputs: StageInputs) -> Evaluation:
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate
    from edgebuild.sources.ultralytics_checkpoint import checkpoint_runner, is_checkpoint

    session: CompileSession = inputs.session
    data = ValidationSet(inputs.project)
    if is_checkpoint(inputs.project):
        runner, what = checkpoint_runner(inputs.project), f"the Ultralytics checkpoint {inputs.project.model.source}"
    elif _torch_source(inputs.project):
        from edgebuild.sources.torch_source import source_runner

        runner, what = source_runner(inputs.project), f"the {_torch_source(inputs.project)} model " \
                                                      f"{inputs.project.model.source}"
    elif inputs.project.model.source is not None:
        from edgebuild.sources.onnx_file import onnx_runner

        runner, what = onnx_runner(inputs.project), f"the ONNX file {inputs.project.model.source}"
    else:
        runner, what = session.torch_runner(inputs.project), "the PyTorch model"
    if not inputs.options.progress:  # no bar: one line when the long step starts
        inputs.report(f"reference: evaluating {what} on {len(data)} validation images [{runner.backend}]")
    return evaluate(inputs.project, runner, data=data, progress=inputs.options.progress)


def _describe(record: Evaluation) -> str:
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
    return f"FP32 {metrics} on {record.images} validation images [backend {record.backend}]"


REFERENCE = Stage(
    name="reference", version=1, summary="FP32 accuracy of the model (PyTorch, or a model file with ONNX Runtime) "
                                         "on the validation set",
    record=Evaluation, after=("model",), key=_key, run=_run, describe=_describe, needs_data=True)
