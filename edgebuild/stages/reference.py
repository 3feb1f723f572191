"""The reference stage: the FP32 accuracy of the PyTorch model on the validation set.

Reads: the model stage, the validation data, the task and metric. Its record (``Evaluation``)
is what retention is measured against before the gate has its own FP32 ONNX measurement.
"""

from __future__ import annotations

from edgebuild.accuracy.evaluate import Evaluation
from edgebuild.content import digest, tool_versions
from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.stages.session import CompileSession

__all__ = ["REFERENCE"]


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.datasets.project_data import validation_digest
    from edgebuild.sources.model import model_key_parts

    project = inputs.project
    return {**model_key_parts(project), "validation": validation_digest(project),
            "task": digest(project.task.model_dump()), "metric": project.metric,
            "tools": digest(tool_versions("torch", "faster-coco-eval"))}


def _run(inputs: StageInputs) -> Evaluation:
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    session: CompileSession = inputs.session
    data = ValidationSet(inputs.project)
    if not inputs.options.progress:  # no bar: one line when the long step starts
        inputs.report(f"reference: evaluating the PyTorch model on {len(data)} validation images [torch-cpu]")
    return evaluate(inputs.project, session.torch_runner(inputs.project), data=data,
                    progress=inputs.options.progress)


def _describe(record: Evaluation) -> str:
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
    return f"FP32 {metrics} on {record.images} validation images [backend {record.backend}]"


REFERENCE = Stage(
    name="reference", version=1, summary="FP32 accuracy of the PyTorch model on the validation set",
    record=Evaluation, after=("model",), key=_key, run=_run, describe=_describe, needs_data=True)
