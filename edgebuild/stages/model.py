"""The model stage: load the entry point and its weights, run forward at the min/opt/max shapes.

Reads: the project's model source (entry point module, weights) and task. Writes nothing but
its record (``ModelRecord``): the outputs checked against the task at every profile shape.
"""

from __future__ import annotations

from edgebuild.content import digest, tool_versions
from edgebuild.pipeline.runner import Stage, StageInputs
from edgebuild.sources.model import ModelRecord
from edgebuild.stages.session import CompileSession

__all__ = ["MODEL"]


def _key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.sources.model import model_key_parts
    from edgebuild.sources.task_outputs import task_outputs_key

    return {**model_key_parts(inputs.project), "tools": digest(tool_versions("torch")),
            "task_outputs": task_outputs_key(inputs.project)}


def _run(inputs: StageInputs) -> ModelRecord:
    from edgebuild.sources.model import check_model

    session: CompileSession = inputs.session
    return check_model(inputs.project, session.torch_runner(inputs.project))


def _describe(record: ModelRecord) -> str:
    return (f"{record.entry_point} ({record.parameters:,} parameters), forward at min/opt/max shapes "
            f"in {record.seconds:.1f} s")


MODEL = Stage(
    name="model", version=2, summary="load the entry point and weights, run forward at the min/opt/max shapes",
    record=ModelRecord, key=_key, run=_run, describe=_describe)
