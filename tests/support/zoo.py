"""The zoo tests' environment: torchvision without its compiled ops, and small projects around real models.

The zoo tests (tests/zoo, marker ``zoo``) run architectures nobody here wrote (torchvision, timm,
Ultralytics) through the CLI with random weights. Their packages come from requirements-zoo.txt,
installed with ``--no-deps`` next to the pinned CPU torch. PyPI has only CUDA builds of
torchvision; next to a CPU torch their ``_C.so`` cannot load (it links libtorch_cuda). torchvision
tolerates that everywhere but in ``_meta_registrations.py``, which registers fake kernels for
``torchvision::nms`` and ``qnms`` unconditionally, so ``import torchvision`` raises ``operator
torchvision::nms does not exist``. :func:`import_torchvision` defines those two schemas (without
kernels) and imports again: the model definitions are pure Python; only the ops that need the C++
kernels (nms, roi_align, deform_conv2d) still fail, when called, with torchvision's own message.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pytest

# A two-JetPack fleet: TensorRT 10.3 (JetPack 6.2) and TensorRT 8.5 (JetPack 5.1.2)
FLEET = """\
[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"

[[fleet]]
name = "dock"
module = "agx-orin-64gb"
jetpack = "5.1.2"
"""
SERVED_GROUP = "yard-cams"
ZOO_PACKAGES = ("torchvision", "timm", "ultralytics")

_torchvision_ops: object = None  # the Library that holds the two schemas; it must stay alive


def import_torchvision() -> ModuleType:
    """``import torchvision``, defining ``torchvision::nms``/``qnms`` first when its compiled ops cannot load."""
    global _torchvision_ops
    try:
        import torchvision

        return torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc) or "does not exist" not in str(exc):
            raise
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-done first import
    if _torchvision_ops is None:
        _torchvision_ops = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _torchvision_ops.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision


def offline_ultralytics(config_dir: Path | None = None) -> None:
    """Ultralytics writes settings.json at import and may look things up online: a private folder, offline."""
    if "YOLO_CONFIG_DIR" not in os.environ:
        folder = config_dir or Path(tempfile.mkdtemp(prefix="edgebuild-zoo-yolo-"))
        os.environ["YOLO_CONFIG_DIR"] = str(folder)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")


def zoo_available() -> tuple[bool, str]:
    """Whether torchvision (through the shim), timm and Ultralytics import here, and if not, why."""
    problems = []
    for name in ZOO_PACKAGES:
        try:
            if name == "torchvision":
                import_torchvision()
            else:
                if name == "ultralytics":
                    offline_ultralytics()
                __import__(name)
        except Exception as exc:  # ModuleNotFoundError, or a broken install
            problems.append(f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    if problems:
        return False, (f"{', '.join(problems)} cannot be imported "
                       "(pip install --no-deps -r requirements-zoo.txt)")
    return True, ""


def project_toml(name: str, entry_point: str, task: str, classes: list[str], input_size: int,
                 shapes: tuple[list[int], list[int], list[int]], outputs: list[str], extra: str = "") -> str:
    """An edgebuild.toml for a zoo project: random weights (accuracy.gate = false), FP32 and INT8, the fleet."""
    mn, opt, mx = shapes
    if task == "detection":
        preprocess = f'input_size = [{input_size}, {input_size}]\nresize = "letterbox"\npad_value = 114\n'
        validation = 'annotations = "data/val/annotations.json"\nimages = "data/val/images"\n'
    else:
        preprocess = (f'input_size = [{input_size}, {input_size}]\nresize = "resize"\n'
                      'mean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n')
        validation = 'images = "data/val"\n'
    return f"""\
[project]
name = "{name}"

[model]
entry_point = "{entry_point}"
python_path = ["."]
outputs = {json.dumps(outputs)}

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = {mn}
opt_shape = {opt}
max_shape = {mx}

[task]
kind = "{task}"
classes = {json.dumps(classes)}

[task.preprocess]
{preprocess}
[data]
calibration_images = "data/calibration"

[data.validation]
{validation}
[quantize]
precisions = ["fp32", "int8"]

[accuracy]
gate = false  # random weights: accuracy means nothing here, the mechanics do

{extra}
{FLEET}
[runtime]
warmup_budget_s = 1
"""


def write_images(root: Path, task: str, classes: list[str], count: int = 6, size: tuple[int, int] = (96, 128)) -> None:
    """``count`` random images for calibration, and as many for validation (class folders or COCO)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    height, width = size
    calibration = root / "data" / "calibration"
    calibration.mkdir(parents=True)
    images, annotations = [], []
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(calibration / f"{i}.png")
        pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
        label = i % len(classes)
        if task == "classification":
            folder = root / "data" / "val" / classes[label]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(folder / f"{i}.png")
            continue
        folder = root / "data" / "val" / "images"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / f"{i}.png")
        images.append({"id": i + 1, "file_name": f"{i}.png", "width": width, "height": height})
        box = [width * 0.2, height * 0.2, width * 0.4, height * 0.5]
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": label + 1, "bbox": box,
                            "area": box[2] * box[3], "iscrowd": 0})
    if task == "detection":
        categories = [{"id": k + 1, "name": c} for k, c in enumerate(classes)]
        coco = {"images": images, "annotations": annotations, "categories": categories}
        (root / "data" / "val" / "annotations.json").write_text(json.dumps(coco))


def train_briefly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml: str, data: Path, epochs: int,
                  imgsz: int) -> Path:
    """Ultralytics' ``yaml`` model trained from scratch on ``data`` on the CPU, as the zoo's parity tests train
    (AdamW, no mosaic, no warm-up, no val between epochs; torchvision's NMS replaced by Ultralytics' own, which
    the CPU build here runs); returns the last checkpoint."""
    import time

    torchvision = import_torchvision()
    from ultralytics import YOLO
    from ultralytics.engine.trainer import BaseTrainer
    from ultralytics.utils.nms import TorchNMS

    monkeypatch.setattr(BaseTrainer, "read_results_csv", lambda self: {})
    monkeypatch.setattr(torchvision.ops, "nms", TorchNMS.nms)
    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    YOLO(yaml).train(data=str(data), epochs=epochs, optimizer="AdamW", lr0=0.01, mosaic=0.0, warmup_epochs=0,
                     imgsz=imgsz, device="cpu", batch=8, workers=0, plots=False, amp=False,
                     project=str(tmp_path / "runs"), name="t", exist_ok=True, verbose=False, val=False)
    print(f"train {yaml}: {time.perf_counter() - started:.1f} s")
    return tmp_path / "runs" / "t" / "weights" / "last.pt"
