"""The commented starter file that ``edgebuild init`` writes."""

from __future__ import annotations

from pathlib import Path

from edgebuild.errors import ConfigError
from edgebuild.project.config import PROJECT_FILE

__all__ = ["write_starter"]

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
# classification instead: logits_output = "logits"

[data]
# A dataset with its splits: an Ultralytics YOLO data.yaml, a Pascal VOC root, or split folders
# of class folders (classification). Then the keys below are not needed.
# dataset = "datasets/shapes/data.yaml"
# calibration_split = "train"
# validation_split = "val"
calibration_images = "data/calibration"  # folder of images for INT8 calibration
# max_calibration_images = 256
# prepare = "my_detector.data:prepare"   # called with the project folder if data is missing

[data.validation]
annotations = "data/val/annotations.json"  # COCO JSON, or a folder of Pascal VOC XML (detection)
images = "data/val/images"                 # classification: one sub-folder per class
# max_images = 500

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
# use_dla = true                # modules with DLA cores only
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
