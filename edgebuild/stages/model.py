"""The model stage: load the model and check it at the min/opt/max shapes against the task.

Reads: the project's model source and the task. Which source (a Python entry point, an ONNX file,
an Ultralytics checkpoint, a TorchScript file, a torchvision/timm model by name) and how each is
keyed, loaded and checked is its route (``edgebuild.sources.routes``). Writes nothing but its
record (a ``ModelRecord``, or a route's subclass of it): the outputs checked against the task at
every profile shape.
"""

from __future__ import annotations

from edgebuild.jsontypes import JsonObject
from edgebuild.pipeline.runner import Stage
from edgebuild.sources.entry_point import LastModelRun, ModelRecord
from edgebuild.sources.routes import describe_model, route_for
from edgebuild.stages.session import CompileInputs

__all__ = ["MODEL"]


def _key(inputs: CompileInputs) -> dict[str, str]:
    previous = inputs.previous if isinstance(inputs.previous, ModelRecord) else None
    last = LastModelRun(key_parts=inputs.previous_key, loaded_files=previous.loaded_files if previous else {})
    return route_for(inputs.project).model_key(inputs.project, inputs.work.groups, last)


def _run(inputs: CompileInputs) -> ModelRecord:
    session = inputs.session
    return route_for(inputs.project).check(inputs.project, inputs.work.groups,
                                           lambda: session.torch_runner(inputs.project), inputs.progress)


def _from_dict(data: JsonObject) -> ModelRecord:
    from edgebuild.sources.onnx_file import read_model_record

    return read_model_record(data)


MODEL = Stage(
    name="model", version=2, summary="load the model (entry point and weights, or a model file), run it at the "
                                     "min/opt/max shapes",
    record=ModelRecord, key=_key, run=_run, describe=describe_model, from_dict=_from_dict)
