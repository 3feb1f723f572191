"""The project files that ``edgebuild init`` writes.

``STARTER``: the fixed, commented starter file (``edgebuild init [DIR]``). ``render_project``: a
complete project file from what a model file and a dataset say (``edgebuild init --model --data``,
read by ``edgebuild.workflows.init.project_file``), every value with a comment saying where it came from.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field, fields
from pathlib import Path

from edgebuild.errors import ConfigError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.config import PROJECT_FILE
from edgebuild.project.schema import INSTANCE_KINDS, TASK_KINDS
from edgebuild.project.ultralytics_facts import NMS_FREE_NOTE

__all__ = ["FoundGroup", "FoundInput", "FoundPostprocess", "FoundProject", "render_project", "write_starter"]

STARTER = """\
# edgebuild project file. Paths are relative to this file's folder.
# Reference: docs/configuration.md (every key), docs/model-sources.md, docs/datasets.md.

[project]
name = "my-detector"            # lower-case letters, digits, - and _
build_dir = "build"             # where every stage writes its outputs

[model]
# A function that returns a torch.nn.Module: "package.module:function".
entry_point = "my_detector.model:build_model"
# Or, instead of entry_point (and weights), a model file: an ONNX file is imported as it is.
# source = "model.onnx"
# Optional state_dict loaded with load_state_dict(strict=True).
weights = "weights/model.pt"
# Folders prepended to sys.path to import the entry point.
python_path = ["."]
# Output tensor names, in order (the keys when forward returns a dict).
outputs = ["boxes", "scores"]

# One table per model input. Axes whose min and max differ become ONNX dynamic axes and
# the TensorRT optimization profile (min/opt/max).
[[model.inputs]]
name = "images"
dtype = "float32"               # float32 | float16 | int64 | int32 | uint8 | bool
min_shape = [1, 3, 320, 320]
opt_shape = [1, 3, 640, 640]
max_shape = [4, 3, 640, 640]

[task]
kind = "detection"              # detection | classification
classes = ["person", "car"]

[task.preprocess]
input_size = [640, 640]         # [height, width] the images are brought to
resize = "letterbox"            # letterbox (keep aspect ratio, pad) | resize (stretch)
pad_value = 114
channel_order = "RGB"           # RGB | BGR | GRAY
mean = [0.0, 0.0, 0.0]          # applied after scaling pixels to [0, 1]
std = [1.0, 1.0, 1.0]

[task.postprocess]              # detection: dense outputs, decoded and NMS-ed by edgebuild
boxes_output = "boxes"          # [N, A, 4] xyxy in input pixels
scores_output = "scores"        # [N, A, C] per-class probabilities
score_threshold = 0.001
nms_iou = 0.6
max_detections = 100
# in_model = true               # NMS inside the model: the engine answers detections (docs/detections.md)
# classification instead: logits_output = "logits"

[data]
# A dataset with its splits: an Ultralytics YOLO data.yaml, a Pascal VOC root, or split folders
# of class folders (classification). Then the keys below are not needed.
# dataset = "datasets/shapes/data.yaml"
# calibration_split = "train"
# validation_split = "val"
calibration_images = "data/calibration"  # folder of images for INT8 calibration
# max_calibration_images = 256           # a cap: that many images, evenly spread by file name
# prepare = "my_detector.data:prepare"   # called with the project folder if data is missing

[data.validation]
annotations = "data/val/annotations.json"  # COCO JSON, or a folder of Pascal VOC XML (detection)
images = "data/val/images"                 # classification: one sub-folder per class
# max_images = 500                         # a cap, as max_calibration_images

[accuracy]
metric = "mAP50-95"             # detection: mAP50-95 | mAP50; classification: top-1 | top-5
min_retention = 0.92            # a candidate passes if its metric >= 0.92 x the FP32 metric
# device_images = 500             # cap on validation images an engine built on a device is measured on there
# first_boot_fallback = true      # a first-boot INT8 recipe also carries FP16, served if INT8 fails acceptance

# One table per device group: a module and its JetPack release.
# `edgebuild profiles list` shows the modules and releases.
[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"

[[fleet]]
name = "dock"
module = "agx-orin-64gb"
jetpack = "5.1.2"
# accelerator = "dla0"          # gpu (default), dla0, dla1 or dla (either core); modules with DLA cores only
# build_on = "ssh://nvidia@agx-orin-01"   # a Jetson of this profile that builds the engine

[runtime]
warmup_budget_s = 30            # warm-up before the server reports ready
# cgroup_preset = "orin-nano-8gb"
port = 8000

[ota]
# artifact_name = "my-detector"
version = "0.1.0"
# signing_key = "keys/ota-signing.pem"
"""


def write_starter(directory: Path, *, force: bool = False) -> Path:
    path = directory / PROJECT_FILE
    if path.exists() and not force:
        raise ConfigError(f"{path}: already exists", hint="pass --force to overwrite it")
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(STARTER, encoding="utf-8")
    return path


# -- a project file from what the model and the data say ------------------------------------------

@dataclass(frozen=True)
class FoundInput:
    name: str
    dtype: str
    min_shape: list[int]
    opt_shape: list[int]
    max_shape: list[int]
    said: str  # where the shape came from, for the comment


@dataclass(frozen=True)
class FoundGroup:
    name: str
    module: str
    jetpack: str
    said: str


@dataclass(frozen=True)
class FoundPostprocess:
    """The ``[task.postprocess]`` keys ``edgebuild init`` found, sparse: a key only where the model says it (the
    output names the task reads, Ultralytics' val settings, NMS inside the model), in the order they are written;
    ``raw_head``, ``instance_head`` and ``nms_free`` are what init read of the graph before it names the outputs."""

    boxes_output: str | None = None
    scores_output: str | None = None
    keypoints_output: str | None = None
    coefficients_output: str | None = None
    prototypes_output: str | None = None
    logits_output: str | None = None
    score_threshold: float | None = None
    nms_iou: float | None = None
    max_detections: int | None = None
    in_model: bool | None = None
    raw_head: bool | None = None  # an Ultralytics raw detection head [N, 4+C, A]: the adapter names boxes and scores
    instance_head: bool | None = None  # an Ultralytics pose, segment or OBB head: the adapter names the outputs
    nms_free: int | None = None  # an NMS-free head's top-k (YOLOv10, YOLO26): its detections are the outputs

    def as_dict(self) -> JsonObject:
        """The keys found, in order ({} for none)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, data: JsonObject) -> FoundPostprocess:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"not [task.postprocess] keys init writes: {sorted(unknown)}")
        return cls(**data)

    def output(self, key: str) -> str:
        """An output name the task reads (``boxes_output``, ...): where init found none, a ValueError."""
        value = getattr(self, key)
        if not isinstance(value, str):
            raise ValueError(f"init found no {key}")
        return value


@dataclass(frozen=True)
class FoundProject:
    """Every value ``render_project`` writes, with where each came from (``said_*``: the comments)."""

    name: str
    model_source: str  # relative to the project folder (or absolute)
    model_said: str  # e.g. "model.onnx: ONNX, opset 17, producer pytorch 2.5"
    inputs: list[FoundInput]
    outputs: list[str]
    outputs_said: str
    task: str  # detection | classification
    task_said: str
    classes: list[str]
    classes_said: str
    input_size: list[int]
    resize: str
    pad_value: int
    channel_order: str
    mean: list[float]
    std: list[float]
    preprocess_said: str
    postprocess: FoundPostprocess  # boxes_output/scores_output (+ score_threshold, ...) or logits_output
    data: dict[str, str]  # [data] keys
    validation: dict[str, str]  # [data.validation] keys
    data_said: str
    fleet: list[FoundGroup]
    notes: list[str] = field(default_factory=list)  # extra comment lines at the top
    trust_checkpoint: bool | None = None  # a checkpoint (a pickle): whether to load it; None: not one
    weights: str | None = None  # a model by name: its state_dict (relative to the project folder)
    random_weights: bool = False  # a model by name without weights: say so where weights would be
    kpt_shape: list[int] | None = None  # a pose model's [keypoints, 2 or 3]
    # a DETR head: the INT8 fallback may keep this many layers in float (its INT8 loss spreads over many layers)
    max_kept_layers: int | None = None


def _value(value: object) -> str:
    """A TOML value: strings, numbers, and lists of them (json's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def _comment(text: str) -> str:
    """``text`` as comment lines of at most 100 characters."""
    return "\n".join(textwrap.wrap(text, 98, initial_indent="# ", subsequent_indent="# ", break_long_words=False,
                                    break_on_hyphens=False))


def _line(key: str, value: object, comment: str = "") -> str:
    """``key = value``, its comment after it, or above it where the line would pass 100 characters."""
    text = f"{key} = {_value(value)}"
    if not comment:
        return text
    if len(f"{text:<40}# {comment}") > 100:
        return f"{_comment(comment)}\n{text}"
    return f"{text:<40}# {comment}"


_METRICS = {kind: metrics for kind, (_, metrics) in TASK_KINDS.items()}


def render_project(found: FoundProject) -> str:
    """The commented ``edgebuild.toml`` text for ``found``."""
    out = ["# edgebuild project file, written by `edgebuild init --model ... --data ...` from what the model",
           "# file and the dataset say. Paths are relative to this file's folder.",
           "# Reference: docs/configuration.md (every key), docs/model-sources.md, docs/datasets.md."]
    out += [_comment(note) for note in found.notes]
    out += ["", "[project]", _line("name", found.name, "lower-case letters, digits, - and _"),
            _line("build_dir", "build", "where every stage writes its outputs"), "",
            "[model]", _comment(f"The model{'' if found.weights or found.random_weights else ' file'} "
                                f"({found.model_said})."),
            _line("source", found.model_source)]
    if found.trust_checkpoint is not None:
        out += ["# A .pt checkpoint is a Python pickle: loading it runs the code it names. true only if you made",
                "# it (yolo train) or trust who did; otherwise export it to ONNX and name the .onnx above.",
                _line("trust_checkpoint", found.trust_checkpoint)]
    if found.weights is not None:
        out += ["# Its weights: a state_dict (torch.save(model.state_dict(), ...)), loaded with weights_only=True.",
                _line("weights", found.weights)]
    elif found.random_weights:
        out += ["# No weights: the model is random and the gate refuses it. Name its trained state_dict:",
                '# weights = "model.pth"']
    out += [
            _comment(f"The model's outputs, in order ({found.outputs_said})."),
            _line("outputs", found.outputs)]
    if found.trust_checkpoint is not None and NMS_FREE_NOTE in found.outputs_said:
        out += ["# Or its one-to-many head with NMS, the one Ultralytics validates with by default (it may score",
                '# higher: compare both with validate): head = "one-to-many", outputs = ["boxes", "scores"],',
                '# and in [task.postprocess] boxes_output = "boxes", scores_output = "scores" (in_model = true:',
                "# NMS appended to the graph; false: decoded on the host; docs/model-sources.md)"]
    out += [""]
    for spec in found.inputs:
        out += [_comment(f"The model's input ({spec.said}). Axes whose min and max differ are the TensorRT "
                         "optimization profile (min/opt/max); the model must keep them dynamic."),
                "[[model.inputs]]", _line("name", spec.name), _line("dtype", spec.dtype),
                _line("min_shape", spec.min_shape), _line("opt_shape", spec.opt_shape),
                _line("max_shape", spec.max_shape), ""]
    out += ["[task]", _line("kind", found.task, found.task_said),
            _comment(f"The class names, in the model's output order ({found.classes_said})."),
            _line("classes", found.classes)]
    if found.kpt_shape:
        out += [_line("kpt_shape", found.kpt_shape, "[keypoints, 2 or 3] per detection, the model's")]
    out += ["", _comment(f"Preprocessing: {found.preprocess_said}."), "[task.preprocess]",
            _line("input_size", found.input_size, "[height, width] the images are brought to"),
            _line("resize", found.resize, "letterbox (keep aspect ratio, pad) | resize (stretch)"),
            _line("pad_value", found.pad_value, "the letterbox's padding"),
            _line("channel_order", found.channel_order, "RGB | BGR | GRAY"),
            _line("mean", found.mean, "applied after scaling pixels to [0, 1]"),
            _line("std", found.std), "", "[task.postprocess]"]
    post = found.postprocess
    if found.task == "detection" and post.in_model:  # an NMS-free head (YOLOv10, YOLO26)
        out += [_line("boxes_output", post.output("boxes_output"), "[N, K, 4] x1, y1, x2, y2 in input pixels"),
                _line("scores_output", post.output("scores_output"), "[N, K] the top-k's scores, best first"),
                _line("score_threshold", _or(post.score_threshold, 0.001)),
                _line("max_detections", _or(post.max_detections, 300), "K, the head's top-k"),
                _line("in_model", True, "NMS-free (one-to-one) head: no NMS added (docs/model-sources.md)")]
    elif found.task == "detection":
        out += [_line("boxes_output", post.output("boxes_output"), "[N, A, 4] x1, y1, x2, y2 in input pixels"),
                _line("scores_output", post.output("scores_output"), "[N, A, C] per-class probabilities"),
                _line("score_threshold", _or(post.score_threshold, 0.001)),
                _line("nms_iou", _or(post.nms_iou, 0.6)),
                _line("max_detections", _or(post.max_detections, 100)),
                "# in_model = true                      # NMS inside the model: the engine answers detections "
                "(docs/detections.md)"]
    elif found.task in INSTANCE_KINDS:  # decoded on the host as Ultralytics' val does (docs/tasks.md)
        box = "[N, A, 5] cx, cy, w, h in input pixels, angle in radians" if found.task == "obb" else \
            "[N, A, 4] x1, y1, x2, y2 in input pixels"
        shapes = {"boxes_output": box, "scores_output": "[N, A, C]",
                  "keypoints_output": "[N, A, K, 3] x, y in input pixels, visibility",
                  "coefficients_output": "[N, A, 32] mask coefficients",
                  "prototypes_output": "[N, 32, H/4, W/4] mask prototypes"}
        out += [_line(key, value, shapes.get(key, "")) for key, value in post.as_dict().items()]
    else:
        out += [_line("logits_output", post.output("logits_output"), "[N, C] logits or probabilities")]
    out += ["", "[data]", _comment(found.data_said)]
    out += [_line(k, v) for k, v in found.data.items()]
    out += ["# max_calibration_images = 256         # cap on the calibration images (evenly spread by name)"]
    out += ["", "[data.validation]"]
    out += [_line(k, v) for k, v in found.validation.items()]
    out += ["# max_images = 500                     # cap on the validation images (evenly spread by name)", "",
            "[accuracy]",
            _line("metric", _METRICS[found.task][0], "one of " + " | ".join(_METRICS[found.task])),
            _line("min_retention", 0.92, "a candidate passes if its metric >= 0.92 x the FP32 metric"), ""]
    if found.max_kept_layers:
        out += ["[quantize]", _comment("A transformer detector's INT8 loss spreads over its neck and attention: "
                                       "the fallback may keep this many layers in float, by measured sensitivity "
                                       "(docs/transformer-detectors.md)."),
                _line("max_kept_layers", found.max_kept_layers), ""]
    out += ["# One table per device group: a module and its JetPack release (`edgebuild profiles list`)."]
    for group in found.fleet:
        out += ["[[fleet]]", _line("name", group.name, group.said), _line("module", group.module),
                _line("jetpack", group.jetpack), ""]
    out += ["[runtime]", _line("warmup_budget_s", 30, "warm-up before the server reports ready"),
            _line("port", 8000), "", "[ota]", _line("version", "0.1.0"),
            "# signing_key = \"keys/ota-signing.pem\"", ""]
    return "\n".join(out)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
