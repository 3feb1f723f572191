"""The reference stage: the FP32 accuracy of the model on the validation set.

Reads: the model stage, the validation data, the task and metric. Evaluates the model as its
route runs it (``edgebuild.sources.routes``: PyTorch, or ONNX Runtime for an ONNX file). Its
record (``Evaluation``) is what retention is measured against before the gate has its own FP32
ONNX measurement. A detector is scored from its raw head with the host's decode, also where
``[task.postprocess] in_model`` appends NMS to the export.
"""

from __future__ import annotations

from edgebuild.accuracy.evaluation_record import Evaluation
from edgebuild.content import digest, tool_versions
from edgebuild.pipeline.runner import Stage
from edgebuild.sources.routes import route_for
from edgebuild.stages.model import MODEL
from edgebuild.stages.session import CompileInputs

__all__ = ["REFERENCE"]


def _key(inputs: CompileInputs) -> dict[str, str]:
    from edgebuild.datasets.project_data import validation_digest

    project = inputs.project
    route = route_for(project)
    return {**route.reference_key(project, inputs.record(MODEL)), "validation": validation_digest(project),
            "task": digest(project.task.model_dump()), "metric": project.metric,
            "tools": digest(tool_versions(*route.reference_tools, "faster-coco-eval"))}


def _run(inputs: CompileInputs) -> Evaluation:
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    session = inputs.session
    data = ValidationSet(inputs.project)
    runner, what = route_for(inputs.project).reference_runner(inputs.project,
                                                              lambda: session.torch_runner(inputs.project))
    if not inputs.options.progress:  # no bar: one line when the long step starts
        inputs.progress(f"reference: evaluating {what} on {len(data)} validation images [{runner.backend}]")
    # the model as its source gives it: a detector's raw head, decoded on the host even where the
    # project appends NMS to the export (the gate proves that decode and the appended one agree)
    return evaluate(inputs.project, runner, data=data, progress=inputs.options.progress, raw_head=True)


def _describe(record: Evaluation) -> str:
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
    return f"FP32 {metrics} on {record.images} validation images [backend {record.backend}]"


REFERENCE = Stage(
    name="reference", version=2, summary="FP32 accuracy of the model (PyTorch, or a model file with ONNX Runtime) "
                                         "on the validation set",
    record=Evaluation, after=("model",), key=_key, run=_run, describe=_describe)
