"""What ``edgebuild check`` (and ``init``, before it writes) finds about a model file, without exporting it.

``check_model_file`` runs, for ``[model] source``, the model stage's own checks of its route, so that
``check`` and ``validate`` never disagree about the file:

- every file: its bytes against what it is declared to be (``model.kind``, or its suffix): an empty
  file, a truncated archive, a zip or a pickle named ``.onnx``, an ONNX file declared TorchScript;
- ONNX: ``edgebuild.sources.onnx_file.check_onnx_model`` (the checker, external data, the opset
  against every fleet group's TensorRT, the inputs and the static batch against the profile, the
  outputs against the task, the stride), run with ONNX Runtime where the file is small enough
  (``RUN_LIMIT``), else everything but the run;
- an Ultralytics checkpoint: its facts read without unpickling it, against the project; then that
  ``trust_checkpoint`` is set and the ``ultralytics`` package is installed (it is not imported);
- a TorchScript file: loaded (``torch.jit.load`` unpickles no Python class) and run at the profile's shapes.

Only what needs the export itself (TensorRT's operator support, the export's parity) waits for ``validate``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import ConfigError, EdgebuildError, ModelError
from edgebuild.sources.file_kinds import KIND_WORDS, content_kind
from edgebuild.text import Progress

if TYPE_CHECKING:
    import onnx

    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["check_model_file", "not_a_model_file", "onnx_proto", "raise_for_unreadable"]

#: bytes (the file and its external data): an ONNX file up to this size is run with ONNX Runtime by ``check``
RUN_LIMIT = 256 * 2**20



@dataclass(frozen=True)
class ModelFileCheck:
    problems: list[EdgebuildError] = field(default_factory=list)  # each names the project file and model.source
    notes: list[str] = field(default_factory=list)  # what was checked


def raise_for_unreadable(path: Path, where: str) -> tuple[str, str]:
    """ModelError for a folder, an empty or a truncated file (``where``: how messages name it, e.g. ``--model``);
    else what its bytes are (``content_kind``)."""
    found, words = content_kind(path)
    if found == "missing":
        raise ModelError(f"{where}: file not found: {path}",
                         hint="a model by name is torchvision:<name> or timm:<name>" if ":" in str(path) else None)
    if found in ("folder", "empty", "truncated"):
        export = f"; or export it to ONNX and pass that: yolo export model={path.name} format=onnx dynamic=True" \
            if path.suffix.lower() in (".pt", ".pth") else ""
        raise ModelError(f"{where}: {words}", hint=("name the model file in it (an .onnx, an Ultralytics .pt or a "
                                                    "TorchScript file)") if found == "folder" else _AGAIN + export)
    return found, words


def not_a_model_file(name: str) -> ModelError:
    """``edgebuild init --model``: a PyTorch zip that is neither an Ultralytics checkpoint nor TorchScript."""
    return ModelError(f"--model: {name} is not a model file edgebuild init reads: not an Ultralytics checkpoint (a "
                      "PyTorch zip whose 'model' is an Ultralytics DetectionModel or ClassificationModel) nor a "
                      "TorchScript file; a plain PyTorch checkpoint (a state_dict, a dict holding one, or a pickled "
                      "nn.Module) needs your model's code to run",
                      hint="save the model as TorchScript (torch.jit.trace(model, example).save('model.ts')) and "
                           "pass that; or export it to ONNX (torch.onnx.export(model, example, 'model.onnx', "
                           "dynamic_axes={'images': {0: 'batch'}})) and pass that; or write `edgebuild init` without "
                           "--model and name the function that builds the model with model.entry_point and "
                           f"{name} with model.weights (docs/bring-your-own-model.md)")


def onnx_proto(path: Path, found: str, words: str) -> onnx.ModelProto:
    """``edgebuild init --model``: the file's ONNX graph (without external data), or ModelError saying what it is."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
        if not proto.graph.node and not proto.graph.output:
            raise ValueError("no graph")
        return proto
    except Exception:
        said = (f"it starts as an ONNX model but does not parse: truncated or damaged ({path.stat().st_size:,} "
                "bytes)" if found == "onnx" else f"its bytes are {words}")
        raise ModelError(f"--model: {path} is not a model file edgebuild init reads ({said}): not an ONNX file "
                         "(.onnx), an Ultralytics checkpoint (.pt) or a TorchScript file (torch.jit.save)",
                         hint="pass the model as ONNX (torch.onnx.export, or Ultralytics: yolo export format=onnx "
                              "dynamic=True)") from None


def check_model_file(project: Project, groups: Sequence[SelectedGroup], *,
                     progress: Progress = lambda _: None) -> ModelFileCheck:
    """Every problem of ``[model] source`` that validate's model stage would find (none for an entry point)."""
    source = project.model.source
    if source is None:
        return ModelFileCheck()
    from edgebuild.project.config import model_source_kind

    try:
        kind, told_by = model_source_kind(project)
    except ConfigError as exc:
        return ModelFileCheck([exc])
    if kind == "hub":  # built by its library (no download) and run at the profile's shapes
        return _in_pytorch(project, source, progress)
    path = project.path(source)
    where = f"{project.source}: model.source: "
    try:
        found, words = raise_for_unreadable(path, where.removesuffix(": "))
    except ModelError as exc:
        return ModelFileCheck([exc])
    if found != kind and not (found == "unknown" and kind == "onnx"):
        declared = f"model.kind = {kind!r}" if told_by == "model.kind" else f"{told_by} says {KIND_WORDS[kind]}"
        return ModelFileCheck([ModelError(
            f"{where}{path.name}: {declared}, but its bytes are {words}",
            hint="name the file for what it is (or fix model.kind); " + _WHAT_TO_DO.get(found, _AGAIN))])
    try:
        if kind == "onnx":
            return ModelFileCheck(notes=[_check_onnx(project, groups, path, progress)])
        if kind == "ultralytics":
            return ModelFileCheck(notes=[_check_checkpoint(project, path)])
    except EdgebuildError as exc:
        return ModelFileCheck([exc])
    return _in_pytorch(project, path.name, progress)


def _in_pytorch(project: Project, name: str, progress: Progress) -> ModelFileCheck:
    """A TorchScript file or a model by name: loaded (no pickle runs) and run at the profile's shapes, as the model
    stage does."""
    from edgebuild.sources.torch_source import check_source

    try:
        record = check_source(project, progress=progress)
    except EdgebuildError as exc:
        return ModelFileCheck([exc])
    return ModelFileCheck(notes=[f"{name}: {record.kind}, {record.parameters:,} parameters; run at the min/opt/max "
                                 f"shapes in {record.seconds:.1f} s"])


_AGAIN = "copy or export the file again"
_WHAT_TO_DO = {
    "onnx": 'an ONNX model: model.source = "model.onnx" (or model.kind = "onnx")',
    "ultralytics": "an Ultralytics checkpoint: name it best.pt, with model.kind left out",
    "torchscript": 'a TorchScript file: model.kind = "torchscript"',
    "zip": "a PyTorch checkpoint of another kind: build the model in Python, name that function with "
           "model.entry_point and the file with model.weights",
    "pickle": "a PyTorch checkpoint (a pickle): build the model in Python, name that function with "
              "model.entry_point and the file with model.weights",
    "unknown": "export the model again: ONNX (torch.onnx.export), TorchScript (torch.jit.save) or an "
               "Ultralytics checkpoint",
}


def _check_onnx(project: Project, groups: Sequence[SelectedGroup], path: Path, progress: Progress) -> str:
    from edgebuild.sources.onnx_file import check_onnx_model, source_files

    size = sum((path.parent / name).stat().st_size for name, sha in source_files(path).items() if sha != "missing")
    record = check_onnx_model(project, groups, progress=progress, run=size <= RUN_LIMIT)
    ran = "run with ONNX Runtime at the min/opt/max shapes" if record.output_shapes else \
        f"not run ({size / 2**20:.0f} MB: validate's model stage runs it)"
    stride = next((c.split("stride ")[1].split(" ")[0] for c in record.checks if "model's stride" in c), None)
    return (f"{path.name}: ONNX opset {record.opset} (the fleet's TensorRT takes up to {record.fleet_opset}), "
            f"{record.parameters:,} parameters; checker, inputs and outputs checked"
            f"{f', sizes a multiple of its stride {stride}' if stride else ''}, {ran}, in {record.seconds:.1f} s")


def _check_checkpoint(project: Project, path: Path) -> str:
    """The checkpoint's facts against the project (read without unpickling), then what loading it needs."""
    from edgebuild.project.ultralytics_facts import project_problems
    from edgebuild.sources.ultralytics.adapter import TRUST_HINT, facts_from_checkpoint, raise_for_task

    where = f"{project.source}: model.source: {path.name}"
    facts = facts_from_checkpoint(path)
    if facts is None:
        raise ModelError(f"{where} is not an Ultralytics checkpoint (a PyTorch zip whose 'model' entry is an "
                         "Ultralytics DetectionModel or ClassificationModel)",
                         hint="name the function that builds the model with model.entry_point instead")
    raise_for_task(where, facts)
    problems = project_problems(project, facts)
    if problems:
        raise ModelError(f"{where} and the project disagree:\n" + "\n".join(f"  - {p}" for p in problems),
                         hint="leave those keys out of the project to take the checkpoint's, or fix them")
    if not project.model.trust_checkpoint:
        raise ModelError(f"{where} is an Ultralytics checkpoint, a pickle: validate and compile load it (which "
                         "runs arbitrary code) only with [model] trust_checkpoint = true (`edgebuild init "
                         "--trust-checkpoint` writes it), which is not set",
                         hint=TRUST_HINT)
    if importlib.util.find_spec("ultralytics") is None:
        raise ModelError(f"{where}: loading an Ultralytics checkpoint needs the ultralytics package, which is not "
                         "installed", hint="pip install ultralytics (AGPL-3.0; edgebuild does not install it), or "
                                           "export the model to ONNX and name the .onnx with model.source")
    return f"{path.name}: {facts.summary()}; trusted, ultralytics installed (loaded by validate's model stage)"
