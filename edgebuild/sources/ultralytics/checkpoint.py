"""An Ultralytics checkpoint as the model (``[model] source = "best.pt"``): loaded, adapted, exported from PyTorch.

What this source yields to the pipeline, stage by stage:

- model: ``checkpoint_key_parts`` (the checkpoint's sha256, the trust setting, the declared inputs and
  outputs) and ``check_checkpoint``: the model's task, classes, imgsz and stride read from the
  checkpoint without running it, the task refused if edgebuild does not build it, then (only with
  ``[model] trust_checkpoint = true``) the model loaded, wrapped by
  ``edgebuild.sources.ultralytics.adapter.adapter_module`` and run at the profile's min/opt/max shapes
  against the task. Record: ``UltralyticsModelRecord``. An NMS-free head (YOLOv10, YOLO26) is
  wrapped with its one-to-one branch: its outputs are the detections (``NMS_OUTPUTS``), K =
  ``[task.postprocess] max_detections``, and ``in_model`` appends nothing to it.
- reference: ``checkpoint_runner``, the wrapped model on the CPU (a ``TorchRunner``), loaded once.
- export: ``export_checkpoint``, edgebuild's export from PyTorch (``edgebuild.sources.export.onnx_export``) of
  the wrapped model, with parity, keyed on the checkpoint's content.

``ultralytics`` is imported only to load a trusted checkpoint (its pickle names Ultralytics' classes).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import digest, file_sha256, tool_versions
from edgebuild.errors import ModelError
from edgebuild.project.ultralytics_facts import UltralyticsFacts
from edgebuild.sources.entry_point import ModelRecord
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.sources.entry_point import TorchRunner
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.targets.profiles import SelectedGroup

__all__ = []

KIND = "ultralytics"
_EXPORT_TOOLS = ("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript")
_runners: dict[tuple[str, str, tuple[str, ...]], TorchRunner] = {}  # (path, sha256, outputs) -> runner


@dataclass(frozen=True)
class UltralyticsModelRecord(ModelRecord):
    """The model stage's result for a checkpoint: ``entry_point`` holds ``model.source`` as written."""

    kind: str = KIND
    told_by: str = ""
    path: str = ""
    files: dict[str, str] = field(default_factory=dict)  # the checkpoint's name -> sha256
    ultralytics: UltralyticsFacts = field(default_factory=lambda: UltralyticsFacts(task=""))  # what it says of itself
    checks: list[str] = field(default_factory=list)


def is_checkpoint(project: Project) -> bool:
    """Whether ``model.source`` is an Ultralytics checkpoint (by ``model.kind`` or its content)."""
    if project.model.source is None:
        return False
    from edgebuild.project.config import model_source_kind

    return model_source_kind(project)[0] == KIND


def _path(project: Project) -> Path:
    return project.path(_source(project))


def _source(project: Project) -> str:
    assert project.model.source is not None, "the checkpoint route runs only for a model.source"
    return project.model.source


def _file_sha(path: Path) -> str:
    """The checkpoint's sha256, hashed once per content stamp (mtime and size): every stage keys on it."""
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    return _sha256(str(path), stat.st_mtime_ns, stat.st_size) if path.is_file() else "missing"


@lru_cache(maxsize=8)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


def checkpoint_key_parts(project: Project) -> dict[str, str]:
    """What the model is on this route: the checkpoint's content, the trust setting, the declared inputs/outputs."""
    path = _path(project)
    parts = {"source": _source(project), "kind": KIND, "files": digest({path.name: _file_sha(path)}),
             "trust_checkpoint": str(project.model.trust_checkpoint),
             "io": digest([[s.model_dump() for s in project.model.inputs], project.model.outputs])}
    if _top_k(project):  # the one-to-one top-k and its score threshold are in the graph
        parts["nms_free"] = f"top {_top_k(project)}, score > {project.detection_postprocess.score_threshold}"
    return parts


def _facts(project: Project) -> UltralyticsFacts:
    from edgebuild.sources.ultralytics.adapter import facts_from_checkpoint, raise_for_task

    path = _path(project)
    facts = facts_from_checkpoint(path)
    if facts is None:
        raise ModelError(f"{project.source}: model.source: {path.name} is not an Ultralytics checkpoint (a "
                         "PyTorch zip whose 'model' entry is an Ultralytics DetectionModel or ClassificationModel)",
                         hint="name the function that builds the model with model.entry_point instead")
    raise_for_task(f"{project.source}: model.source: {path.name}", facts)
    return facts


def _outputs(project: Project) -> list[str]:
    task = project.task
    if _top_k(project):
        from edgebuild.runtime.base.vision import NMS_OUTPUTS

        return list(NMS_OUTPUTS)
    if task.kind == "classification":
        return [task.postprocess.logits_output]
    # detection, pose, segmentation: the task's outputs in the order the adapter returns them (docs/tasks.md)
    return [v for k, v in task.postprocess.model_dump().items() if k.endswith("_output")]


def _top_k(project: Project) -> int:
    """An NMS-free head's top-k (``max_detections``: Ultralytics' max_det), 0 for any other head."""
    from edgebuild.project.ultralytics_facts import nms_free_head

    return project.detection_postprocess.max_detections if nms_free_head(project) else 0


def checkpoint_runner(project: Project) -> TorchRunner:
    """The checkpoint's model with edgebuild's outputs, on the CPU; loaded once per checkpoint content."""
    from edgebuild.sources.entry_point import TorchRunner
    from edgebuild.sources.ultralytics.adapter import adapter_module, load_trusted

    path = _path(project)
    top_k = _top_k(project)
    threshold = float(project.detection_postprocess.score_threshold) if top_k else 0.0
    key = (str(path), _file_sha(path), (*_outputs(project), str(top_k), str(threshold)))
    if key not in _runners:
        facts = _facts(project)
        model = adapter_module(load_trusted(project, path), facts.task, _outputs(project), top_k, threshold)
        _runners.clear()  # one checkpoint held at a time
        _runners[key] = TorchRunner(project, model.eval())
    runner = _runners[key]
    runner.project = project
    return runner


def check_checkpoint(project: Project, *, progress: Progress = lambda _: None) -> UltralyticsModelRecord:
    """The checkpoint's facts, then its wrapped model at the min/opt/max shapes against the task."""
    from edgebuild.project.config import model_source_kind
    from edgebuild.project.ultralytics_facts import project_problems
    from edgebuild.sources.entry_point import check_model

    started = time.perf_counter()
    path = _path(project)
    facts = _facts(project)
    progress(f"model: {facts.summary()}")
    problems = project_problems(project, facts)
    if problems:
        raise ModelError(f"{project.source}: model.source: {path.name} and the project disagree:\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="leave those keys out of the project to take the checkpoint's, or fix them")
    done = [f"read without unpickling: {facts.summary()}", "task, classes, input size, preprocessing and "
            f"stride {facts.stride} against the project"]
    runner = checkpoint_runner(project)
    done.append("loaded with torch.load(weights_only=False): [model] trust_checkpoint = true")
    base = check_model(project, runner)
    done.append(f"outputs {_outputs(project)} against the {project.task.kind} task at the min/opt/max shapes")
    if _top_k(project):
        from edgebuild.project.ultralytics_facts import NMS_FREE_NOTE

        done.append(f"{NMS_FREE_NOTE}: its one-to-one top {_top_k(project)} are the detections "
                    f"(score > {project.detection_postprocess.score_threshold})")
        progress(f"model: {NMS_FREE_NOTE} (its one-to-one top {_top_k(project)} are the detections)")
    _, told_by = model_source_kind(project)
    return UltralyticsModelRecord(
        entry_point=_source(project), parameters=base.parameters, output_shapes=base.output_shapes,
        seconds=round(time.perf_counter() - started, 3), told_by=told_by, path=str(path),
        files={path.name: _file_sha(path)}, ultralytics=facts, checks=done)


def describe_checkpoint(record: UltralyticsModelRecord) -> str:
    facts = record.ultralytics
    return (f"{record.entry_point} [{record.kind}, told by {record.told_by}] ({record.parameters:,} parameters); "
            f"{facts.summary()}; forward at min/opt/max shapes in {record.seconds:.1f} s")


# -- export -------------------------------------------------------------------------------------------

def export_key_parts(project: Project, opset: int) -> dict[str, str]:
    return {**checkpoint_key_parts(project), "opset": str(opset), "settings": digest(project.export.model_dump()),
            "tools": digest(tool_versions(*_EXPORT_TOOLS))}


def export_checkpoint(project: Project, opset: int, reason: str, groups: Sequence[SelectedGroup], *,
                      progress: Progress = lambda _: None) -> ExportRecord:
    """edgebuild's export from PyTorch of the wrapped checkpoint, recorded under this route's key."""
    from edgebuild.sources.export.onnx_export import export_model

    return export_model(project, opset, reason, progress=progress, torch_runner=checkpoint_runner(project),
                        groups=list(groups), key_parts=export_key_parts(project, opset),
                        source_note=f"from the Ultralytics checkpoint {project.model.source} "
                                    f"(sha256 {_file_sha(_path(project))[:12]})")
