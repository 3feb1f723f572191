"""Which way a model goes through the model, reference and export stages: one route per source kind.

A route says, for one kind of model source, what the model stage's key holds and how the model is
checked, what the reference stage evaluates, and how the export stage gets its ONNX (an export
from PyTorch, or an import of a model file). ``route_for(project)`` picks the project's route once;
the three stage modules call it and never branch on the kind themselves. Everything after the
export stage reads only the ``ExportRecord``, whatever the route.

A new kind of source adds its module here in ``sources/`` and one ``ModelRoute`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from edgebuild.content import digest, tool_versions
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.backends import Runner
    from edgebuild.sources.entry_point import LastModelRun, ModelRecord, TorchRunner
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.sources.onnx_file import OnnxModelRecord
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["route_for"]

Groups = Sequence["SelectedGroup"]


@dataclass(frozen=True)
class ModelRoute:
    kind: str  # "entry point", "onnx", "ultralytics", "torchscript", "hub"
    #: the model stage's key: every file and setting the model is made from (``LastModelRun``: what
    #: the stage's last run found, for a source that learns its files only by running)
    model_key: Callable[[Project, Groups, LastModelRun], dict[str, str]]
    #: load and check the model at the min/opt/max shapes; ``torch_runner`` gives the project's PyTorch model
    check: Callable[[Project, Groups, Callable[[], TorchRunner], Progress], ModelRecord]
    #: what the reference's FP32 number depends on (beside the model stage's record), and its tools
    reference_key: Callable[[Project, ModelRecord], dict[str, str]]
    reference_tools: tuple[str, ...]
    #: the FP32 reference's runner, and how the progress line names it
    reference_runner: Callable[[Project, Callable[[], TorchRunner]], tuple[Runner, str]]
    #: the export stage's key and its run (``torch_runner``: the PyTorch model if a stage loaded it already)
    export_key: Callable[[Project, ModelRecord, int], dict[str, str]]
    export: Callable[[Project, ModelRecord, int, str, Groups, TorchRunner | None, Progress], ExportRecord]
    #: the export stage runs at the fleet's opset (an import keeps the file's own)
    needs_opset: bool = True


def _with_task(parts: dict[str, str], project: Project) -> dict[str, str]:
    from edgebuild.sources.task_outputs import task_outputs_key

    return {**parts, "tools": digest(tool_versions("torch")), "task_outputs": task_outputs_key(project)}


def _entry_point() -> ModelRoute:
    from edgebuild.sources import entry_point
    from edgebuild.sources.export import onnx_export as export

    return ModelRoute(
        kind="entry point",
        model_key=lambda project, groups, last: _with_task(
            entry_point.model_key_parts(project, entry_point.loaded_file_parts(project, last)), project),
        check=lambda project, groups, torch_runner, progress: entry_point.check_model(project, torch_runner()),
        reference_key=lambda project, record: entry_point.model_key_parts(
            project, entry_point.recorded_file_parts(record)),
        reference_tools=("torch",),
        reference_runner=lambda project, torch_runner: (torch_runner(), "the PyTorch model"),
        export_key=lambda project, record, opset: export.cache_key_parts(project, opset, record),
        export=lambda project, record, opset, reason, groups, loaded, progress: export.export_model(
            project, opset, reason, progress=progress, torch_runner=loaded, groups=groups,
            key_parts=export.cache_key_parts(project, opset, record)))


def _onnx_file() -> ModelRoute:
    from edgebuild.sources import onnx_file

    return ModelRoute(
        kind="onnx",
        model_key=lambda project, groups, last: onnx_file.model_check_key_parts(project, groups),
        check=lambda project, groups, torch_runner, progress: onnx_file.check_onnx_model(project, groups,
                                                                                         progress=progress),
        reference_key=lambda project, record: onnx_file.onnx_key_parts(project), reference_tools=("onnxruntime",),
        reference_runner=lambda project, torch_runner: (onnx_file.onnx_runner(project),
                                                        f"the ONNX file {project.model.source}"),
        # this route's model stage (check_onnx_model) records an OnnxModelRecord
        export_key=lambda project, record, opset: onnx_file.import_key_parts(
            project, cast("OnnxModelRecord", record)),
        export=lambda project, record, opset, reason, groups, loaded, progress: onnx_file.import_onnx(
            project, cast("OnnxModelRecord", record), groups, progress=progress),
        needs_opset=False)


def _model_file_in_pytorch(kind: str, what: Callable[[Project], str], key_parts: Callable[[Project], dict[str, str]],
                           check: Callable[..., ModelRecord], runner: Callable[[Project], Runner],
                           export_key: Callable[[Project, int], dict[str, str]],
                           export: Callable[..., ExportRecord]) -> ModelRoute:
    """A model file (or name) that its own module loads into PyTorch, checks, runs and exports."""
    return ModelRoute(
        kind=kind,
        model_key=lambda project, groups, last: _with_task(key_parts(project), project),
        check=lambda project, groups, torch_runner, progress: check(project, progress=progress),
        reference_key=lambda project, record: key_parts(project), reference_tools=("torch",),
        reference_runner=lambda project, torch_runner: (runner(project), what(project)),
        export_key=lambda project, record, opset: export_key(project, opset),
        export=lambda project, record, opset, reason, groups, loaded, progress: export(
            project, opset, reason, groups, progress=progress))


def _ultralytics_checkpoint() -> ModelRoute:
    from edgebuild.sources.ultralytics import checkpoint

    return _model_file_in_pytorch(
        "ultralytics", lambda project: f"the Ultralytics checkpoint {project.model.source}",
        checkpoint.checkpoint_key_parts, checkpoint.check_checkpoint, checkpoint.checkpoint_runner,
        checkpoint.export_key_parts, checkpoint.export_checkpoint)


def _torch_source(kind: str) -> ModelRoute:
    from edgebuild.sources import torch_source

    return _model_file_in_pytorch(
        kind, lambda project: f"the {kind} model {project.model.source}",
        torch_source.source_key_parts, torch_source.check_source, torch_source.source_runner,
        torch_source.export_key_parts, torch_source.export_source)


def route_for(project: Project) -> ModelRoute:
    """The project's route: an Ultralytics checkpoint, a TorchScript file or a model by name, an ONNX
    file (``[model] source``), or a Python entry point."""
    from edgebuild.sources.torch_source import source_kind
    from edgebuild.sources.ultralytics.checkpoint import is_checkpoint

    if is_checkpoint(project):
        return _ultralytics_checkpoint()
    kind = source_kind(project)
    if kind:
        return _torch_source(kind)
    if project.model.source is not None:
        return _onnx_file()
    return _entry_point()


def describe_model(record: ModelRecord) -> str:
    """The model stage's summary line for any route's record (``read_model_record`` picks its class by kind)."""
    from edgebuild.sources.onnx_file import OnnxModelRecord
    from edgebuild.sources.onnx_file import describe_model as describe_onnx
    from edgebuild.sources.torch_source import TorchSourceModelRecord, describe_source
    from edgebuild.sources.ultralytics.checkpoint import UltralyticsModelRecord, describe_checkpoint

    if isinstance(record, UltralyticsModelRecord):
        return describe_checkpoint(record)
    if isinstance(record, TorchSourceModelRecord):
        return describe_source(record)
    if isinstance(record, OnnxModelRecord):  # a model file
        return describe_onnx(record)
    return (f"{record.entry_point} ({record.parameters:,} parameters), forward at min/opt/max shapes "
            f"in {record.seconds:.1f} s")
