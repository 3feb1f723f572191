"""What a model that PyTorch loads says, for ``edgebuild init``: a TorchScript file or a torchvision/timm name.

Neither says its class names, so those are the dataset's. A TorchScript file is loaded with
``torch.jit.load`` (no pickle of arbitrary classes) and run once on a blank image: one ``[N, C]``
output is a classifier of C classes, two outputs ``[N, A, 4]`` and ``[N, A, C]`` a detector; a
traced file also says the image size and channels it was traced at. Where its outputs are neither,
the task is the dataset's and the model check names what is wrong. A torchvision or timm name is a
classifier (edgebuild builds it with ``num_classes`` = the dataset's classes); its library's
pretrained config gives the image size and normalization its weights usually come with.

``check_loaded`` then runs, on the project file init is about to write, what ``compile``'s model
stage runs (``edgebuild.sources.torch_source.check_source``): the model loaded, weights and all,
run at the profile's min/opt/max shapes and its outputs checked against the task, so a name the
library lacks (with its close matches), weights that do not fit the class count or outputs the
task cannot read are refused before anything is written.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.errors import EdgebuildError, ModelError
from edgebuild.project.schema import HUB_SOURCE
from edgebuild.project.template import FoundInput, FoundPostprocess

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = []

DEFAULT_SIZES = {"classification": 224, "detection": 640}  # an image size the model does not say
_IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
_NOT_CLASSIFIERS = ("detection", "segmentation", "video", "optical_flow")  # torchvision.models' other families
DETECTOR_ADVICE = ("a detector: export it to ONNX with outputs boxes [N, A, 4] and scores [N, A, C] and pass the "
                   ".onnx, or name a function that builds it (wrapped to return those) with model.entry_point "
                   "(docs/bring-your-own-model.md)")


@dataclass(frozen=True)
class _Facts:
    """What the model says; None where it says nothing (the dataset or a default decides)."""

    kind: str  # "torchscript" | "hub"
    said: str  # what it is, for the [model] comment
    task: str | None
    task_said: str
    num_classes: int | None  # the classes its output scores
    channels: int
    size: list[int] | None  # [height, width]
    size_said: str
    mean: list[float] | None  # None: edgebuild's defaults (mean 0, std 1), to check
    std: list[float] | None
    preprocess_said: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TorchModel:
    """What ``edgebuild init`` writes for the model: its input profile, outputs and preprocessing."""

    said: str
    spec: FoundInput
    outputs: list[str]
    outputs_said: str
    postprocess: FoundPostprocess
    task: str
    task_said: str
    num_classes: int | None
    size: list[int]
    channels: int
    mean: list[float] | None
    std: list[float] | None
    preprocess_said: str
    notes: list[str]


def torch_kind(source: str) -> str | None:
    """``"hub"`` for ``torchvision:<name>`` or ``timm:<name>`` (as ``[model] source`` tells a model by name),
    ``"torchscript"`` for a TorchScript file, else None."""
    from edgebuild.project.config import is_torchscript_archive

    if HUB_SOURCE.match(source):
        return "hub"
    return "torchscript" if Path(source).is_file() and is_torchscript_archive(Path(source)) else None


def read_torch_model(kind: str, source: str, data_task: str, input_size: list[int] | None,
                     weights: Path | None, max_batch: int) -> TorchModel:
    """The task, where the model does not say it, is the dataset's; the image size the model's,
    --input-size, or a default for the task; the batch 1..``max_batch``; outputs named for the task."""
    facts = _hub_facts(source, weights, input_size) if kind == "hub" else \
        _torchscript_facts(Path(source), data_task, input_size)
    task = facts.task or data_task
    notes = list(facts.notes)
    if facts.size:
        size, size_said = facts.size, facts.size_said
    else:
        size, size_said = [DEFAULT_SIZES[task]] * 2, f"a default for {task}: check it (--input-size)"
        notes.append(f"CHECK: {source} does not say its image size; the profile uses {size[0]}x{size[1]}: pass "
                     "--input-size (the size it was trained at).")
    channels = facts.channels
    spec = FoundInput("images", "float32", [1, channels, *size], [1, channels, *size],
                      [max_batch, channels, *size], f"batch 1..{max_batch}, image size {size_said}")
    if task == "detection":
        outputs, post = ["boxes", "scores"], FoundPostprocess(boxes_output="boxes", scores_output="scores")
    else:
        outputs, post = ["logits"], FoundPostprocess(logits_output="logits")
    return TorchModel(facts.said, spec, outputs, f"the names edgebuild gives a {task} model's outputs, in order",
                      post, task, facts.task_said, facts.num_classes, size, channels, facts.mean, facts.std,
                      facts.preprocess_said, notes)


# -- a TorchScript file -------------------------------------------------------------------------------

def _load(path: Path) -> Any:
    import torch

    try:
        with zipfile.ZipFile(path) as archive:
            traced = any(n.endswith("/traced_inputs.pkl") for n in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        traced = False
    try:
        try:  # a traced file keeps its example's shapes: _restore_shapes puts them on the graph's inputs
            return torch.jit.load(str(path), map_location="cpu", _restore_shapes=traced)
        except TypeError:  # a torch without the argument
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch.jit.load raises RuntimeError and others for a file it cannot read
        raise ModelError(f"--model: {path.name}: torch.jit.load failed: {_said(exc)}",
                         hint="save the model with torch.jit.script(model).save(...) or torch.jit.trace") from None


def _said(exc: BaseException) -> str:
    """An exception in one line: TorchScript's own error is its last line, under a traceback of the script."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[-1] if "TorchScript interpreter" in lines[0] else f"{type(exc).__name__}: {lines[0]}"


def _traced_shape(module: Any, name: str) -> list[int] | None:
    """The image batch [N, C, H, W] the file was traced with, where it says one; more inputs are refused."""
    import torch

    inputs = [v for v in module.graph.inputs()][1:]  # the first is the module itself
    if len(inputs) != 1:
        raise ModelError(f"--model: {name}: forward takes {len(inputs)} inputs; edgebuild init writes projects for "
                         "models with one image input", hint="write [[model.inputs]] by hand (docs/model-sources.md)")
    kind = inputs[0].type()
    sizes = kind.sizes() if isinstance(kind, torch.TensorType) else None
    return [int(s) for s in sizes] if sizes and len(sizes) == 4 and all(s for s in sizes) else None


def _read_outputs(result: Any) -> tuple[str | None, int | None, str]:
    """(task, classes, what the outputs are) of one forward's result; (None, None, ...) for neither task's."""
    import torch

    def dims(tensor: torch.Tensor) -> str:
        return "[" + ", ".join(str(d) for d in tensor.shape) + "]"

    if isinstance(result, torch.Tensor):
        if result.dim() == 2:
            return "classification", int(result.shape[1]), f"one output {dims(result)}"
        return None, None, f"one output {dims(result)}"
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        shown = ", ".join(dims(r) for r in result)
        boxes, scores = (result[0], result[1]) if len(result) == 2 else (None, None)
        if boxes is not None and scores is not None and boxes.dim() == 3 and boxes.shape[-1] == 4 \
                and scores.dim() == 3:
            return "detection", int(scores.shape[-1]), f"outputs {shown}"
        return None, None, f"{len(result)} outputs {shown}"
    return None, None, f"a {type(result).__name__}"


def _torchscript_facts(path: Path, data_task: str, input_size: list[int] | None) -> _Facts:
    """Load the file, read the shape it was traced at, and run it once at [1, C, H, W] to read its task."""
    import torch

    name = path.name
    module = _load(path)
    traced = _traced_shape(module, name)
    # not traced: the input channels of its first convolution (a [out, in, kh, kw] weight), else RGB
    channels = traced[1] if traced else next((int(w.shape[1]) for w in module.parameters() if w.dim() == 4), 3)
    if input_size:
        size, size_said = list(input_size), "from --input-size"
    elif traced:
        size, size_said = traced[2:], f"the size {name} was traced at"
    else:
        default = DEFAULT_SIZES[data_task]
        size, size_said = [default, default], f"a default for {data_task}: check it (--input-size)"
    try:
        with torch.inference_mode():
            result = module.float().eval()(torch.zeros(1, channels, *size))
    except Exception as exc:  # the model's own code raises anything
        raise ModelError(f"--model: {name}: forward at [1, {channels}, {size[0]}, {size[1]}] raised {_said(exc)}",
                         hint="pass the image size it was trained at: --input-size H,W; or trace the model "
                              "(torch.jit.trace keeps the example's shape, which init reads)") from None
    task, classes, outputs = _read_outputs(result)
    wanted = {"classification": 1, "detection": 2}.get(data_task)
    if task is None and isinstance(result, (tuple, list)) and len(result) != wanted:
        raise ModelError(f"--model: {name}: forward returns {len(result)} values ({outputs.split(' ', 2)[-1]} at "
                         f"[1, {channels}, {size[0]}, {size[1]}]); a classifier returns one [N, C] tensor (logits), "
                         "a detector two (boxes [N, A, 4], scores [N, A, C]), and the dataset is "
                         f"{data_task} data",
                         hint="save a wrapper whose forward returns only the class logits (e.g. return "
                              "self.model(x)[0]) with torch.jit.trace, and pass that")
    said = f"{name}: TorchScript" + (f", traced at {traced}" if traced else ", not traced") + \
        f", {outputs} at [1, {channels}, {size[0]}, {size[1]}]"
    task_said = f"{name}'s {outputs}: a {task} model of {classes} classes" if task else \
        f"the dataset's: {name}'s {outputs} are neither task's"
    notes = [] if input_size or traced else [f"CHECK: {name} does not say its image size; the profile uses "
                                             f"{size[0]}x{size[1]}: pass --input-size (the size it was trained at)."]
    return _Facts("torchscript", said, task, task_said, classes, channels, size, size_said, None, None,
                      "CHECK: edgebuild's defaults (the file does not say): they must be what the model was "
                      "trained with", notes)


# -- a torchvision or timm model by name ---------------------------------------------------------------

def _torchvision() -> Any:
    try:
        import torchvision
    except Exception:  # not installed, or its compiled ops do not load here: the model stage says which
        return None
    return torchvision


def _refuse_non_classifier(source: str, library: str, name: str) -> None:
    if library != "torchvision" or (torchvision := _torchvision()) is None:
        return
    for family in _NOT_CLASSIFIERS:
        try:
            names = torchvision.models.list_models(module=getattr(torchvision.models, family))
        except Exception:  # an older torchvision without the family or list_models(module=...)
            continue
        if name in names:
            raise ModelError(f"--model: {source} is one of torchvision's {family.replace('_', ' ')} models; edgebuild "
                             "takes a model by name only as a classifier (its detection models return lists of "
                             "dicts after their own NMS, which a TensorRT engine cannot be built from)",
                             hint=DETECTOR_ADVICE if family == "detection" else "pass an ONNX file of the model")


def _pretrained(library: str, name: str) -> tuple[list[int] | None, list[float], list[float], str] | None:
    """(image size, mean, std, where from) of the library's pretrained weights for ``name``; nothing is downloaded."""
    try:
        if library == "timm":
            import timm

            cfg = timm.models.get_pretrained_cfg(name)
            if cfg is None:
                return None
            size = list(cfg.input_size[1:]) if getattr(cfg, "input_size", None) else None
            return (size, [float(v) for v in cfg.mean], [float(v) for v in cfg.std],
                    f"timm's pretrained config of {name}")
        torchvision = _torchvision()
        if torchvision is None:
            return None
        preset = torchvision.models.get_model_weights(name).DEFAULT.transforms()
        crop = list(preset.crop_size) * (2 if len(preset.crop_size) == 1 else 1)
        return crop, [float(v) for v in preset.mean], [float(v) for v in preset.std], \
            f"torchvision's transforms for {name}'s pretrained weights"
    except Exception:  # a name the library lacks (check_loaded says so with its close matches), an old library
        return None


def _hub_facts(source: str, weights: Path | None, input_size: list[int] | None) -> _Facts:
    """A classifier by name: what its library says of its pretrained weights (size, normalization)."""
    from edgebuild.sources.model_hub import split_name

    try:
        library, name = split_name(source)
    except ValueError:
        raise ModelError(f"--model: {source!r} is not a model name: torchvision:<name> or timm:<name>, the name "
                         "letters, digits, '_', '.' or '-'", hint="e.g. torchvision:resnet18") from None
    _refuse_non_classifier(source, library, name)
    if weights is not None and not weights.is_file():
        raise ModelError(f"--weights: file not found: {weights}")
    found = _pretrained(library, name)
    notes = [] if weights else [f"no --weights: {source}'s weights are random; compile's gate refuses it (a dry run: "
                                "compile --no-gate --ship-ungated). Pass --weights, a state_dict of the trained model."]
    if input_size:
        size, size_said = list(input_size), "from --input-size"
    elif found and found[0]:
        size, size_said = found[0], f"{found[3]}: check it is what your weights were trained at"
    else:
        size, size_said = None, ""
    mean, std, pre_said = (found[1], found[2], f"CHECK: {found[3]} (resize stretches; the library resizes the "
                                               "short side and centre-crops): keep it if your weights were "
                                               "fine-tuned from its pretrained ones") if found else \
        (*_IMAGENET, "CHECK: ImageNet's mean and std, what torchvision and timm classifiers are usually trained "
                     "with: they must be what your weights were trained with")
    weights_said = f"weights {weights.name}" if weights else "random weights"
    return _Facts("hub", f"{source}: a {library} model by name, num_classes = the dataset's classes, "
                             f"{weights_said}", "classification",
                      f"a {library} model by name is a classifier", None, 3, size, size_said, list(mean), list(std),
                      pre_said, notes)


# -- the check, on the project file init would write -----------------------------------------------------

def check_loaded(project: Project) -> list[str]:
    """Load the model and run it as compile's model stage does; return what loading it said."""
    from edgebuild.sources.torch_source import check_source

    try:
        record = check_source(project)
    except EdgebuildError:
        raise
    except Exception as exc:  # a library that imports but fails (torchvision without its compiled ops)
        raise ModelError(f"{project.source}: model.source {project.model.source!r}: loading it failed: "
                         f"{_said(exc)}") from None
    return list(record.checks[:-1])
