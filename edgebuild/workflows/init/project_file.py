"""``edgebuild init --model PATH_OR_NAME --data PATH``: a complete project file from a model and a dataset.

What the model says (an ONNX file: its input, dtype and shape, its outputs, the task, class names
and preprocessing from Ultralytics' metadata where it has them; an Ultralytics checkpoint, read
without running it; a TorchScript file or a torchvision/timm name: ``edgebuild.workflows.init.torch_model``)
and what the dataset says (a YOLO data.yaml, a Pascal VOC root, a COCO JSON with its images, or split
folders of class folders: the ``[data]`` keys, the class names, and the task where the model does not
say it) become one commented ``edgebuild.toml``. The file is loaded and checked (``load_project``; the
ONNX input and output checks; a model PyTorch loads, loaded and run as the model stage runs it)
before it is written, under a temporary name renamed into place, so a refused model or dataset
leaves nothing half-written.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.errors import ConfigError, DataError, EdgebuildError, ModelError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.config import PROJECT_FILE, load_project
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import INSTANCE_KINDS, NAME_PATTERN
from edgebuild.project.template import FoundGroup, FoundInput, FoundPostprocess, FoundProject, render_project
from edgebuild.project.ultralytics_facts import NMS_FREE_NOTE, UltralyticsFacts, nms_free_outputs
from edgebuild.workflows.init.dataset import FoundData, read_data, yolo_data_for_task
from edgebuild.workflows.init.preprocess import given_preprocess as _given_preprocess
from edgebuild.workflows.init.preprocess import measured_preprocess as _measured_preprocess
from edgebuild.workflows.init.torch_model import (
    DEFAULT_SIZES,
    DETECTOR_ADVICE,
    check_loaded,
    read_torch_model,
    torch_kind,
)

if TYPE_CHECKING:
    from edgebuild.sources.onnx_checks import UltralyticsSummary

__all__ = ["init_from_files", "parse_input_size"]

DEFAULT_MODULE = "orin-nano-8gb"
DEFAULT_SIZE = 640  # an Ultralytics checkpoint's image size where it says no imgsz
MAX_BATCH = 4
_BOXES = ("boxes", "bboxes", "box", "det_boxes")
_SCORES = ("scores", "score", "det_scores", "confidences")


@dataclass(frozen=True)
class InitResult:
    path: Path
    found: list[str]  # what the model and the data said, one line each
    next_command: str


# -- the model --------------------------------------------------------------------------------------

@dataclass
class _Model:
    said: str
    inputs: list[FoundInput]
    outputs: list[str]
    outputs_said: str
    task: str
    task_said: str
    classes: list[str]  # from the metadata, or []
    num_classes: int | None  # from the graph, where it says
    input_size: list[int]
    channels: int
    ultralytics: UltralyticsSummary | UltralyticsFacts | None  # what an Ultralytics export or checkpoint says
    postprocess: FoundPostprocess
    notes: list[str]
    checkpoint: bool = False  # an Ultralytics checkpoint, not an ONNX file
    in_pytorch: str | None = None  # "torchscript" or "hub": a model PyTorch loads, checked by running it
    mean: list[float] | None = None  # the normalization the model says, where it says one
    std: list[float] | None = None
    preprocess_said: str = ""


def parse_input_size(text: str) -> list[int]:
    """``--input-size``: ``224`` or ``H,W`` (``480,640``; ``480x640``) -> [height, width]."""
    parts = [p.strip() for p in re.split(r"[,x]", text.strip().lower())]
    if len(parts) not in (1, 2) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"{text!r} is not an image size: N (square) or H,W, e.g. 224 or 480,640")
    return [int(parts[0]), int(parts[-1])]


def _size_given(name: str, size: list[int], said: str, input_size: list[int] | None) -> None:
    """A --input-size other than the size the model fixes is refused, naming both."""
    if input_size and list(input_size) != list(size):
        raise ConfigError(f"--input-size {input_size[0]},{input_size[1]}: {name} fixes its image size at "
                          f"{size[0]}x{size[1]} ({said})", hint="leave --input-size out: init takes the model's")


def _read_model(path: Path, input_size: list[int] | None) -> _Model:
    from edgebuild.sources.model_file_checks import onnx_proto, raise_for_unreadable

    found, words = raise_for_unreadable(path, "--model")  # missing, a folder, empty, truncated
    if found != "onnx" and (path.suffix.lower() in (".pt", ".pth") or found in ("zip", "ultralytics")):
        return _checkpoint_model(path, input_size)
    return _onnx_model(path, onnx_proto(path, found, words), input_size)


#: an RT-DETR's INT8 fallback: the layers that may stay in float (the zoo test needed 16; docs/transformer-detectors.md)
DETR_KEPT_LAYERS = 32


def _checkpoint_model(path: Path, input_size: list[int] | None) -> _Model:
    """An Ultralytics checkpoint (best.pt), read without running its pickle by edgebuild.sources.ultralytics."""
    name = path.name
    export = f"export it to ONNX and pass that: yolo export model={name} format=onnx dynamic=True"
    try:
        from edgebuild.sources.ultralytics.adapter import TASKS, VAL_DEFAULTS, facts_from_checkpoint, raise_for_task
    except ImportError:
        raise ModelError(f"--model: {name} is a PyTorch checkpoint; edgebuild init reads an Ultralytics checkpoint "
                         "through edgebuild.sources.ultralytics, which this edgebuild does not have",
                         hint=export) from None
    facts = facts_from_checkpoint(path)
    if facts is None:
        from edgebuild.sources.model_file_checks import not_a_model_file

        raise not_a_model_file(name)
    raise_for_task(f"--model: {name}", facts)
    task = TASKS[facts.task]
    notes = []
    if facts.imgsz:
        size, size_said = list(facts.imgsz), f"imgsz from {name}"
        _size_given(name, size, size_said, input_size)
    elif input_size:
        size, size_said = list(input_size), "from --input-size"
    else:
        size, size_said = [DEFAULT_SIZE, DEFAULT_SIZE], "a default: check it"
        notes.append(f"CHECK: {name} says no imgsz; the profile uses {DEFAULT_SIZE}x{DEFAULT_SIZE}.")
    spec = FoundInput("images", "float32", [1, 3, *size], [1, 3, *size], [MAX_BATCH, 3, *size],
                      f"the checkpoint's: batch 1..{MAX_BATCH}, image size {size_said}")
    if task == "detection":
        outputs, post = ["boxes", "scores"], FoundPostprocess(boxes_output="boxes", scores_output="scores",
                                                              **VAL_DEFAULTS)
        outputs_said = "edgebuild's adapter around the checkpoint's detection head"
        if facts.nms_free:  # YOLOv10/YOLO26: the one-to-one top-k ships, no NMS added (RT-DETR: the decoder's)
            outputs, post = _nms_free_outputs(facts.max_det)
            outputs_said = f"{facts.head_note} (top {facts.max_det})"
    elif task in INSTANCE_KINDS:  # the adapter's outputs (docs/tasks.md), decoded as Ultralytics' val
        outputs, post = _instance_outputs(task)
        outputs_said = f"edgebuild's adapter around the checkpoint's {facts.task} head"
    else:
        outputs, post = ["logits"], FoundPostprocess(logits_output="logits")
        outputs_said = "edgebuild's adapter around the checkpoint's classifier"
    return _Model(f"{name}: {facts.summary()}", [spec], outputs, outputs_said, task,
                  f"from {name} (task {facts.task})", list(facts.classes), None, size, 3, facts, post,
                  notes, checkpoint=True)


def _nms_free_outputs(max_det: int) -> tuple[list[str], FoundPostprocess]:
    outputs, post = nms_free_outputs(max_det)
    return outputs, FoundPostprocess.from_dict(post)


def _instance_outputs(task: str) -> tuple[list[str], FoundPostprocess]:
    """A pose, segmentation or obb task's outputs as edgebuild's Ultralytics adapter names them (docs/tasks.md),
    and its ``[task.postprocess]``: those names and Ultralytics' val settings."""
    from edgebuild.project.schema import TASK_KINDS

    named = {k: v for k, v in TASK_KINDS[task][0].model_fields["postprocess"].default.model_dump().items()
             if k.endswith("_output")}
    return list(named.values()), FoundPostprocess(**named, **_val_defaults())


def _dims(value: Any) -> list[int | None]:
    return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]


def _shown(dims: list[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _imgsz(value: Any) -> list[int] | None:
    if isinstance(value, int) and value > 0:
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return [int(value[0]), int(value[1])]
    return None


def _onnx_model(path: Path, proto: Any, input_size: list[int] | None) -> _Model:
    from onnx.helper import tensor_dtype_to_np_dtype

    from edgebuild.sources.onnx_checks import graph_inputs, graph_output_dims, metadata, ultralytics_summary
    from edgebuild.sources.onnx_init_checks import metadata_classes_note, raise_for_image_input

    name = path.name
    inputs = graph_inputs(proto)
    if len(inputs) != 1:
        raise ModelError(f"--model: {name} has {len(inputs)} inputs ({[i.name for i in inputs]}); edgebuild init "
                         "writes projects for models with one image input",
                         hint="write [[model.inputs]] by hand (docs/model-sources.md)")
    graph_input = inputs[0]
    try:
        dtype = str(tensor_dtype_to_np_dtype(graph_input.type.tensor_type.elem_type))
    except Exception:
        dtype = "float32"
    dims = _dims(graph_input)
    if len(dims) != 4:
        raise ModelError(f"--model: {name}: input {graph_input.name!r} {_shown(dims)} is not an image batch "
                         "[N, C, H, W]", hint="export the model with a batched NCHW image input")
    raise_for_image_input(f"--model: {name}", graph_input.name, dims, dtype)
    ultra = ultralytics_summary(metadata(proto), proto)
    outputs = [o.name for o in proto.graph.output]
    out_dims = graph_output_dims(proto)
    task, task_said, postprocess, num_classes = _task(name, outputs, out_dims, ultra)
    if task == "detection" and ultra is not None and ultra.nms_free:  # YOLOv10/YOLO26 exported with nms=False
        num_classes, postprocess = len(ultra.classes) or None, FoundPostprocess(nms_free=ultra.max_det)
    notes = metadata_classes_note(name, ultra, num_classes,
                                  ", ".join(f"{o} {_shown(out_dims.get(o, []))}" for o in outputs))
    channels = dims[1] or 3
    if dims[2] and dims[3]:
        size, size_said = [dims[2], dims[3]], f"fixed in {name}"
        _size_given(name, size, size_said, input_size)
    elif ultra is not None and _imgsz(ultra.imgsz):
        size, size_said = _imgsz(ultra.imgsz) or [], f"imgsz from {name}'s metadata"
        _size_given(name, size, size_said, input_size)
    elif input_size:
        size, size_said = [int(v) for v in input_size], "from --input-size"
        fixed = [dims[2] or size[0], dims[3] or size[1]]
        _size_given(name, fixed, f"{_shown(dims)} in {name}", size)
    else:
        default = DEFAULT_SIZES.get(task, DEFAULT_SIZES["detection"])
        size, size_said = [dims[2] or default, dims[3] or default], f"a default for {task}: check it"
        notes.append(f"CHECK: {name} fixes no image size and has no imgsz metadata; the profile uses "
                     f"{size[0]}x{size[1]}: set the size the model was trained at (--input-size, or input_size "
                     "and the shapes).")
    batch = dims[0]
    low, high = (1, MAX_BATCH) if batch is None else (batch, batch)
    spec = FoundInput(graph_input.name, dtype, [low, channels, *size], [low, channels, *size],
                      [high, channels, *size],
                      f"{_shown(dims)} in {name}: batch {'dynamic, 1..' + str(MAX_BATCH) if batch is None else 'fixed'}"
                      f", image size {size_said}")
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    said = f"{name}: ONNX, opset {opset}"
    if ultra is not None:
        said += f", {ultra.summary}"
    if ultra is not None and task == "detection":
        postprocess = replace(postprocess, **_val_defaults())
    if task == "detection" and postprocess.nms_free:
        head = f"{outputs[0]!r} {_shown(out_dims.get(outputs[0], []))}"
        outputs, postprocess = _nms_free_outputs(postprocess.nms_free)
        outputs_said = f"{ultra.head_note if ultra is not None else NMS_FREE_NOTE}: {head}"
    elif task in INSTANCE_KINDS and postprocess.instance_head:
        heads = ", ".join(f"{o!r} {_shown(out_dims.get(o, []))}" for o in outputs)
        outputs, postprocess = _instance_outputs(task)
        utask = ultra.task if ultra is not None else ""
        notes.append(f"{name} outputs Ultralytics' raw {utask} head {heads}: model.outputs names what "
                     f"edgebuild's Ultralytics adapter gives ({', '.join(outputs)}).")
        outputs_said = f"Ultralytics' raw {utask} head {heads}, read as {', '.join(outputs)}"
    elif task == "detection" and postprocess.raw_head:
        head = f"{outputs[0]!r} {_shown(out_dims.get(outputs[0], []))}"
        notes.append(f"{name} outputs Ultralytics' raw detection head {head}: model.outputs names what "
                     "edgebuild's Ultralytics adapter gives (boxes, scores).")
        outputs = ["boxes", "scores"]
        postprocess = FoundPostprocess(boxes_output="boxes", scores_output="scores", raw_head=True, **_val_defaults())
        outputs_said = f"Ultralytics' raw head {head}, read as boxes and scores"
    else:
        outputs_said = "from " + name + ": " + ", ".join(f"{o} {_shown(out_dims.get(o, []))}" for o in outputs)
    return _Model(said, [spec], outputs, outputs_said, task, task_said, list(ultra.classes) if ultra else [],
                  num_classes, size, channels, ultra, postprocess, notes)


def _torch_model(kind: str, source: str, data: FoundData, input_size: list[int] | None,
                 weights: Path | None) -> _Model:
    """A TorchScript file or a model by name (``edgebuild.workflows.init.torch_model``)."""
    found = read_torch_model(kind, source, data.task, input_size, weights, MAX_BATCH)
    return _Model(found.said, [found.spec], found.outputs, found.outputs_said, found.task, found.task_said, [],
                  found.num_classes, found.size, found.channels, None, found.postprocess, found.notes,
                  in_pytorch=kind,
                  mean=found.mean, std=found.std, preprocess_said=found.preprocess_said)


def _val_defaults() -> dict[str, Any]:
    """Ultralytics' `yolo val` settings for edgebuild's postprocess keys, where that module is there."""
    try:
        from edgebuild.sources.ultralytics.adapter import VAL_DEFAULTS
    except ImportError:
        return {}
    return dict(VAL_DEFAULTS)


def _task(name: str, outputs: list[str], dims: dict[str, list[int | None]],
          ultra: UltralyticsSummary | None) -> tuple[str, str, FoundPostprocess, int | None]:
    """(task, where it came from, the postprocess keys, the number of classes the graph says)."""
    from edgebuild.sources.onnx_init_checks import raise_for_metadata_task

    utask = ultra.task if ultra is not None else None
    if utask in ("segment", "pose", "obb"):
        return _instance_task(name, utask, outputs, dims, ultra)
    lower = [o.lower() for o in outputs]
    boxes = next((outputs[lower.index(b)] for b in _BOXES if b in lower), None)
    scores = next((outputs[lower.index(s)] for s in _SCORES if s in lower), None)
    if boxes and scores:
        classes = (dims.get(scores) or [None])[-1]
        return ("detection", f"{name} outputs {boxes!r} and {scores!r}",
                FoundPostprocess(boxes_output=boxes, scores_output=scores), classes)
    if utask == "detect":
        head = dims.get(outputs[0], [])
        if len(outputs) == 1 and len(head) == 3:
            count = head[1] - 4 if head[1] else None
            return ("detection", f"from {name}'s metadata (task detect)", FoundPostprocess(raw_head=True), count)
        raise ModelError(f"--model: {name} is an Ultralytics detection export with outputs "
                         f"{ {o: _shown(dims.get(o, [])) for o in outputs} }, neither the raw head [N, 4+C, A] "
                         "nor boxes and scores", hint="export it again with yolo export format=onnx dynamic=True")
    if len(outputs) == 1 and len(dims.get(outputs[0], [])) == 2:
        said = f"from {name}'s metadata (task classify)" if utask == "classify" else \
            f"{name} has one [N, C] output"
        return "classification", said, FoundPostprocess(logits_output=outputs[0]), dims[outputs[0]][1]
    raise_for_metadata_task(f"--model: {name}", str(utask), {o: _shown(dims.get(o, [])) for o in outputs})
    raise ModelError(f"--model: {name}: cannot tell its task from its outputs "
                     f"{ {o: _shown(dims.get(o, [])) for o in outputs} }: edgebuild init knows detection (outputs "
                     "boxes [N, A, 4] and scores [N, A, C], or Ultralytics' detection head) and classification "
                     "(one output [N, C])",
                     hint="export the model with those outputs, or write the project file by hand "
                          "(`edgebuild init` without --model writes a starter)")


def _instance_task(name: str, utask: str, outputs: list[str], dims: dict[str, list[int | None]],
                   ultra: UltralyticsSummary | None) -> tuple[str, str, FoundPostprocess, int | None]:
    """``_task`` for an Ultralytics pose, segment or OBB export: its raw head [N, 4+C+..., A] (segment: and the
    prototypes [N, M, H/4, W/4]), which edgebuild's adapter splits into the task's outputs."""
    from edgebuild.project.ultralytics_facts import TASKS

    heads = [o for o in outputs if len(dims.get(o, [])) == 3]
    prototypes = [o for o in outputs if len(dims.get(o, [])) == 4]
    wanted = 2 if utask == "segment" else 1
    if len(outputs) != wanted or len(heads) != 1 or len(prototypes) != wanted - 1:
        form = "[N, 4+C+M, A] and prototypes [N, M, H/4, W/4]" if utask == "segment" else \
            "[N, 4+C+K*D, A]" if utask == "pose" else "[N, 4+C+1, A]"
        raise ModelError(f"--model: {name} is an Ultralytics {utask} export with outputs "
                         f"{ {o: _shown(dims.get(o, [])) for o in outputs} }, not its raw head {form}",
                         hint="export it again with yolo export format=onnx dynamic=True")
    channels = dims[heads[0]][1]
    kpt = ultra.kpt_shape if ultra is not None else []
    extra = (dims[prototypes[0]][1] if prototypes else None) if utask == "segment" else \
        (kpt[0] * kpt[1] if len(kpt) == 2 else None) if utask == "pose" else 1
    count = channels - 4 - extra if channels and extra is not None else None
    return TASKS[utask], f"from {name}'s metadata (task {utask})", FoundPostprocess(instance_head=True), count


# -- the fleet --------------------------------------------------------------------------------------

def parse_fleet(text: str | None) -> list[FoundGroup]:
    """``name=module@jetpack,...``, each checked against the profiles; None: one Orin Nano 8GB group on
    the newest JetPack it runs."""
    from edgebuild.targets.profiles import load_catalog

    catalog = load_catalog()
    if not text:
        module = catalog.modules[DEFAULT_MODULE]
        shipped = [v for v in module.jetpack if catalog.releases[v].base_images] or list(module.jetpack)
        jetpack = max(shipped, key=lambda v: tuple(int(p) for p in v.split(".")))
        return [FoundGroup("orin", module.id, jetpack, f"the default: {module.name} on the newest JetPack the "
                                                       "profiles know for it with a container image (--fleet)")]
    groups = []
    for part in (p.strip() for p in text.split(",")):
        name, sep, target = part.partition("=")
        if not sep or not NAME_PATTERN.match(name.strip()):
            raise ConfigError(f"--fleet: {part!r} is not NAME=MODULE@JETPACK (a lower-case name), e.g. "
                              "yard-cams=orin-nano-8gb@6.2")
        found = catalog.parse_target(target.strip())
        groups.append(FoundGroup(name.strip(), found.module.id, found.release.jetpack, "from --fleet"))
    return groups


# -- putting it together ----------------------------------------------------------------------------

def _project_name(name: str | None, directory: Path, model: Path) -> str:
    if name:
        if not NAME_PATTERN.match(name):
            raise ConfigError(f"--name: {name!r} must be lower-case letters, digits, '-' or '_'")
        return name
    for candidate in (directory.resolve().name, model.stem):
        cleaned = re.sub(r"[^a-z0-9_-]+", "-", candidate.lower()).strip("-_")
        if cleaned and NAME_PATTERN.match(cleaned):
            return cleaned
    return "my-project"


def _relative(path: Path, directory: Path) -> str:
    try:
        return Path(os.path.relpath(path.resolve(), directory.resolve())).as_posix()
    except ValueError:  # another drive
        return path.resolve().as_posix()


def _classes(model: _Model, data: FoundData, model_name: str) -> tuple[list[str], str]:
    from dataclasses import replace

    voc = data.title == "Pascal VOC root"
    if voc and model.classes and set(data.names) <= set(model.classes):
        data = replace(data, names=list(model.classes))  # a val split that lacks a class is still the model's
    if voc and model.classes and set(data.names) - set(model.classes):
        from edgebuild.datasets.voc import voc_object_files

        first = voc_object_files(Path(data.data["dataset"]), "val", "--data")
        shown = ", ".join(f"{n!r} ({first[n]})" for n in sorted(set(data.names) - set(model.classes))[:8])
        raise DataError(f"--data: objects of classes that {model_name} does not have ({model.classes}): {shown}",
                        hint="pass the dataset the model was trained on, or rename those objects to its classes")
    if model.classes and data.title == "YOLO data.yaml" and len(model.classes) == len(data.names) \
            and data.names_said.endswith(", no names"):
        # only nc: Ultralytics takes the model's names, and so do task.classes
        data = replace(data, names=list(model.classes),
                       names_said=f"{data.names_said}: the model's names taken, as Ultralytics takes them")
    if model.classes and model.classes != data.names:
        raise DataError(f"--data: the dataset's class names ({data.names_said}) {data.names} differ from "
                        f"{model_name}'s {model.classes}: a model predicts the names it was trained on, in order",
                        hint="pass the dataset the model was trained on, or fix its names to the model's order")
    if model.classes:
        classes, said = model.classes, f"from {model_name}'s metadata; the dataset agrees ({data.names_said})"
    else:
        classes, said = data.names, data.names_said
    if model.num_classes and model.num_classes != len(classes):
        sources = ""
        if data.title == "Pascal VOC root":  # the names are every object name found: say where each is
            from edgebuild.datasets.voc import voc_class_sources

            sources = f"; by use, rarest first: {voc_class_sources(Path(data.data['dataset']), 'val', '--data')}"
        raise DataError(f"--data: {model_name} predicts {model.num_classes} classes, the dataset names "
                        f"{len(classes)} ({data.names_said}): {classes}{sources}",
                        hint="pass the dataset the model was trained on"
                             + (", or rename or remove the objects of the classes it was not trained on in those "
                                "XML files" if sources else ""))
    return classes, said


def init_from_files(directory: Path, *, model: Path | str, data: Path, fleet: str | None = None,
                    name: str | None = None, force: bool = False, trust_checkpoint: bool = False,
                    input_size: list[int] | None = None, weights: Path | None = None,
                    preprocess: JsonObject | None = None) -> InitResult:
    """Write ``directory/edgebuild.toml`` from the model (a file, or a torchvision/timm name) and the dataset;
    raise before writing anything. ``preprocess``: the user's --mean/--std/--channel-order/--resize (they win);
    where the model file says nothing of its preprocessing the rest is measured (``workflows.init.preprocess``)."""
    target = directory / PROJECT_FILE
    if target.exists() and not force:
        raise ConfigError(f"{target}: already exists", hint="pass --force to overwrite it")
    source = str(model)
    kind = torch_kind(source)
    shown = source if kind == "hub" else Path(source).name  # how messages name the model
    if weights is not None and kind != "hub":
        raise ConfigError(f"--weights: goes with a model by name (torchvision:<name>, timm:<name>); {shown} "
                          "carries its own weights", hint="leave --weights out")
    if kind:
        found_data = read_data(data)  # the task and the default image size, where the model says none
        found_model = _torch_model(kind, source, found_data, input_size, weights)
    else:
        found_model = _read_model(Path(source), input_size)
        found_data = read_data(data)
    if found_data.title == "YOLO data.yaml" and found_model.task in INSTANCE_KINDS:
        found_data = yolo_data_for_task(found_data, found_model.task)
    if found_model.task != found_data.task:
        raise DataError(f"--data: {data} is {found_data.title}, {found_data.task} data; {shown} is a "
                        f"{found_model.task} model ({found_model.task_said})",
                        hint=DETECTOR_ADVICE if kind == "hub" else None)
    classes, classes_said = _classes(found_model, found_data, shown)
    groups = parse_fleet(fleet)
    ultra = found_model.ultralytics
    gray = found_model.channels == 1
    resize = "resize" if found_model.task == "classification" or (ultra and ultra.detr) else "letterbox"
    if ultra:
        pre_said = (f"from {shown}'s Ultralytics metadata: {resize}" + (", pad 114" if resize == "letterbox" else
                                                                         " (stretched to the input size)")
                    + ", RGB, pixels / 255")
    elif found_model.preprocess_said:
        pre_said = found_model.preprocess_said
    else:
        pre_said = "CHECK: edgebuild's defaults (the file does not say): they must be what the model was trained with"
    channel = "GRAY" if gray else "RGB"
    fill = found_model.mean or [0.0] * (1 if gray else 3)
    ones = found_model.std or [1.0] * (1 if gray else 3)
    project = FoundProject(
        name=_project_name(name, directory, Path(shown)),
        model_source=source if kind == "hub" else _relative(Path(source), directory),
        weights=_relative(weights, directory) if weights else None, random_weights=kind == "hub" and not weights,
        model_said=found_model.said, inputs=found_model.inputs, outputs=found_model.outputs,
        outputs_said=found_model.outputs_said, task=found_model.task, task_said=found_model.task_said,
        classes=classes, classes_said=classes_said, input_size=found_model.input_size, resize=resize, pad_value=114,
        channel_order=channel, mean=fill, std=ones, preprocess_said=pre_said,
        postprocess=found_model.postprocess,
        data={k: (_relative(Path(v), directory) if k in ("dataset", "calibration_images") else v)
              for k, v in found_data.data.items()},
        validation={k: _relative(Path(v), directory) for k, v in found_data.validation.items()},
        data_said=f"From the {found_data.title} ({_relative(data, directory)}).", fleet=groups,
        notes=found_model.notes, trust_checkpoint=trust_checkpoint if found_model.checkpoint else None,
        kpt_shape=list(ultra.kpt_shape) if ultra is not None and ultra.kpt_shape else None,
        max_kept_layers=DETR_KEPT_LAYERS if ultra is not None and ultra.detr else None)
    given = {k: v for k, v in (preprocess or {}).items() if v is not None}
    project = _given_preprocess(project, given)
    measure = not ultra and found_model.mean is None and found_model.in_pytorch != "hub"
    text = render_project(project)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    draft = directory / f".{PROJECT_FILE}.init-draft"
    loaded_said: list[str] = []
    had_build = BuildLayout.default(directory).root.exists()
    try:
        draft.write_text(text, encoding="utf-8")
        try:
            loaded = load_project(draft)
            if found_model.in_pytorch:
                loaded_said = check_loaded(loaded)
            else:
                _check_model_file(loaded)
            from edgebuild.workflows.check import refuse_data

            refuse_data(loaded)  # what `edgebuild check` refuses of the data (every image decoded), said of --data
        except EdgebuildError as exc:  # say it of the file it would have been, which is not written
            said = exc.message.replace(str(draft), str(target))
            raise type(exc)(f"not written: {said}" if said != exc.message else said, hint=exc.hint) from None
        project, preprocess_lines = _measured_preprocess(loaded, project, given, draft, target) if measure \
            else (project, [])
        os.replace(draft, target)
    except BaseException:
        draft.unlink(missing_ok=True)
        _forget_build(directory, had_build)
        if created:
            try:
                directory.rmdir()
            except OSError:
                pass
        raise
    _forget_build(directory, had_build)
    lines = [f"model: {found_model.said}",
             f"  input {found_model.inputs[0].name} {found_model.inputs[0].dtype} "
             f"min {found_model.inputs[0].min_shape} opt {found_model.inputs[0].opt_shape} "
             f"max {found_model.inputs[0].max_shape}",
             f"  outputs {project.outputs}; task {project.task} ({project.task_said})",
             f"data: {found_data.title}: " + ", ".join(f"{k} = {v}" for k, v in
                                                      {**project.data, **project.validation}.items()),
             f"classes ({len(classes)}): {', '.join(classes[:8])}{', ...' if len(classes) > 8 else ''} "
             f"({classes_said})",
             "fleet: " + ", ".join(f"{g.name} = {g.module}@{g.jetpack}" for g in groups),
             *(f"loaded: {said}" for said in loaded_said),
             *(f"note: {n}" for n in found_model.notes)]
    if found_model.mean is not None:
        lines.append(f"note: preprocessing is the library's for its pretrained weights (mean {found_model.mean}, "
                     f"std {found_model.std}): check [task.preprocess] against how your weights were trained")
    elif not ultra and not preprocess_lines:
        lines.append("note: preprocessing is edgebuild's default (the model file does not say): check "
                     "[task.preprocess]")
    lines += preprocess_lines
    from edgebuild.targets.profiles import load_catalog

    families = {load_catalog().modules[g.module].family for g in groups}
    where = "" if directory.resolve() == Path.cwd().resolve() else f" -p {directory}"
    option = " --target orin" if "orin" in families else ""
    if project.random_weights:  # the gate refuses random weights: the command that runs is a dry run
        option += " --no-gate --ship-ungated"
    return InitResult(target, lines, f"edgebuild compile{option}{where}")


def _forget_build(directory: Path, had_build: bool) -> None:
    """What the model check made in a build folder that was not there (an adapted copy under build/sources/):
    init leaves the project file and the decoded-image cache (so the first `check` decodes nothing again)."""
    if had_build:
        return
    import shutil


    layout = BuildLayout.default(directory)
    cache = layout.decoded_images.parent
    for made in layout.root.glob("*"):
        if made != cache:
            shutil.rmtree(made, ignore_errors=True) if made.is_dir() else made.unlink(missing_ok=True)


def _check_model_file(project: Any) -> None:
    """The model file checked as `edgebuild check` checks it (``edgebuild.workflows.project.model_file_findings``:
    the model stage's checks but the export), so init never writes a project that check refuses."""
    from edgebuild.workflows.check import raise_for_problems
    from edgebuild.workflows.project import model_file_findings

    raise_for_problems(project, model_file_findings(project))
