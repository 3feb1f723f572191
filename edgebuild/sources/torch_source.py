"""A model file or name that PyTorch loads as a module: a TorchScript file, a torchvision/timm model by name.

The shared route of ``edgebuild.sources.torchscript_file`` (``kind = "torchscript"``) and
``edgebuild.sources.model_hub`` (``source = "torchvision:resnet18"``, ``"timm:<name>"``). Each of those
modules gives ``key_parts(project)`` (what the model is made from: file contents, names, versions),
``load(project)`` (the ``torch.nn.Module``, FP32, and notes for the stage line) and ``TOOLS``. This
module gives the three stages what the Ultralytics checkpoint route gives them:

- model: ``source_key_parts`` and ``check_source`` (the module run at the min/opt/max shapes
  against the task); record ``TorchSourceModelRecord``.
- reference: ``source_runner``, the module on the CPU (a ``TorchRunner``), loaded once per key.
- export: ``export_source``, edgebuild's export from PyTorch (``edgebuild.sources.export.onnx_export``), with
  parity, under this route's key.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from edgebuild.content import digest, tool_versions
from edgebuild.sources.entry_point import ModelRecord
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.sources.entry_point import TorchRunner
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["check_source", "source_runner"]

KINDS = ("torchscript", "hub")
_EXPORT_TOOLS = ("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript")
_runners: dict[str, tuple[TorchRunner, list[str]]] = {}  # key digest -> (runner, load notes)


@dataclass(frozen=True)
class TorchSourceModelRecord(ModelRecord):
    """The model stage's result for a TorchScript file or a hub model: ``entry_point`` holds ``model.source``."""

    kind: str = ""
    told_by: str = ""
    files: dict[str, str] = field(default_factory=dict)  # the files the model is made from -> sha256
    checks: list[str] = field(default_factory=list)


def source_kind(project: Project) -> str | None:
    """``"torchscript"`` or ``"hub"`` where ``model.source`` is one, else None."""
    if project.model.source is None:
        return None
    from edgebuild.project.config import model_source_kind

    kind = model_source_kind(project)[0]
    return kind if kind in KINDS else None


def _impl(project: Project) -> ModuleType:
    if source_kind(project) == "torchscript":
        from edgebuild.sources import torchscript_file

        return torchscript_file
    from edgebuild.sources import model_hub

    return model_hub


def source_key_parts(project: Project) -> dict[str, str]:
    """What the model is on this route (the kind module's parts) and the declared inputs/outputs."""
    return {**_impl(project).key_parts(project), "source": project.model.source, "kind": str(source_kind(project)),
            "io": digest([[s.model_dump() for s in project.model.inputs], project.model.outputs])}


def _loaded(project: Project) -> tuple[TorchRunner, list[str]]:
    from edgebuild.sources.entry_point import TorchRunner

    key = digest(source_key_parts(project))
    if key not in _runners:
        model, notes = _impl(project).load(project)
        _runners.clear()  # one model held at a time
        _runners[key] = (TorchRunner(project, model.eval()), notes)
    runner, notes = _runners[key]
    runner.project = project
    return runner, notes


def source_runner(project: Project) -> TorchRunner:
    """The model on the CPU; loaded once per key."""
    return _loaded(project)[0]


def check_source(project: Project, *, progress: Progress = lambda _: None) -> TorchSourceModelRecord:
    """Load the model, then run it at the min/opt/max shapes against the task."""
    from edgebuild.project.config import model_source_kind
    from edgebuild.sources.entry_point import check_model

    started = time.perf_counter()
    runner, notes = _loaded(project)
    for note in notes:
        progress(f"model: {note}")
    base = check_model(project, runner)
    _, told_by = model_source_kind(project)
    return TorchSourceModelRecord(
        entry_point=str(project.model.source), parameters=base.parameters, output_shapes=base.output_shapes,
        seconds=round(time.perf_counter() - started, 3), kind=str(source_kind(project)), told_by=told_by,
        files=_impl(project).files(project),
        checks=[*notes, f"outputs {project.model.outputs} against the {project.task.kind} task at the "
                        "min/opt/max shapes"])


def describe_source(record: TorchSourceModelRecord) -> str:
    return (f"{record.entry_point} [{record.kind}, told by {record.told_by}] ({record.parameters:,} parameters); "
            f"{'; '.join(record.checks[:-1]) or 'loaded'}; forward at min/opt/max shapes in {record.seconds:.1f} s")


# -- export -------------------------------------------------------------------------------------------

def export_key_parts(project: Project, opset: int) -> dict[str, str]:
    return {**source_key_parts(project), "opset": str(opset), "settings": digest(project.export.model_dump()),
            "tools": digest(tool_versions(*_EXPORT_TOOLS))}


def export_source(project: Project, opset: int, reason: str, groups: Sequence[SelectedGroup], *,
                  progress: Progress = lambda _: None) -> ExportRecord:
    """edgebuild's export from PyTorch of the loaded model, recorded under this route's key."""
    from edgebuild.sources.export.onnx_export import export_model

    return export_model(project, opset, reason, progress=progress, torch_runner=source_runner(project),
                        groups=list(groups), key_parts=export_key_parts(project, opset),
                        source_note=f"from the {source_kind(project)} model {project.model.source}")
