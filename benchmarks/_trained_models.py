"""Trained real architectures for the benchmarks: generated data, brief CPU training, cached, and an edgebuild project.

- ``yolov8n``: a YOLO-format detection set of three shape classes (circles, rectangles,
  triangles of any colour on noisy backgrounds, 320x320), and a YOLOv8n trained on it from
  ``yolov8n.yaml`` (random init, no download) by Ultralytics on the CPU, then exported by
  Ultralytics to ONNX (``dynamic=True``, opset 17) as a user would for ``edgebuild init``.
- ``resnet18`` / ``mobilenet_v3_small``: a class-folder set (``train/<class>/``, ``val/<class>/``)
  of four shape classes, 96x96, and the torchvision model trained on it from random init;
  its state_dict is the project's ``model.weights`` with ``source = "torchvision:<name>"``.

Everything lives under ``build/bench-models/<name>-<key>/`` (``build/`` is git-ignored). The key
hashes what the result depends on (the generator's and the training's settings, and the torch,
torchvision and Ultralytics versions), so a second run reuses the data and the weights and a
change of any of them trains again. Nothing is downloaded: Ultralytics runs offline with its
settings, runs and datasets folders inside the cache.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "bench-models"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cpu_torchvision  # noqa: E402 (a sibling module of this script folder)

DATA_VERSION = 1  # bump when a generator below changes what it draws

# the settings of each model: data and training; all of them go into the cache key
MODELS: dict[str, dict] = {
    "yolov8n": {"task": "detection", "classes": ["circle", "rectangle", "triangle"], "size": 320,
                "train_images": 300, "val_images": 80, "epochs": 12, "batch": 8, "close_mosaic": 3,
                "optimizer": "SGD", "lr0": 0.01, "warmup_epochs": 1, "opset": 17},
    "resnet18": {"task": "classification", "classes": ["circle", "square", "triangle", "cross"], "size": 64,
                 "train_per_class": 1000, "val_per_class": 100, "epochs": 6, "batch": 32, "lr": 0.002},
    "mobilenet_v3_small": {"task": "classification", "classes": ["circle", "square", "triangle", "cross"],
                           "size": 64, "train_per_class": 1000, "val_per_class": 100, "epochs": 10, "batch": 32,
                           "lr": 0.003},
}


@dataclass(frozen=True)
class TrainedModel:
    """A trained model in the cache: its files, its dataset and what its training said."""

    name: str
    task: str
    folder: Path
    model_file: Path  # the ONNX export (YOLO) or the state_dict (torchvision)
    dataset: Path  # the data.yaml (YOLO) or the split folders' root (class folders)
    checkpoint: Path | None = None  # Ultralytics' best.pt (for its own INT8 exports), None for torchvision
    facts: dict = field(default_factory=dict)  # training seconds, epochs, the trainer's own metric, reused


def _versions(*dists: str) -> dict[str, str]:
    found = {}
    for dist in dists:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def cache_folder(name: str) -> Path:
    settings = {"data_version": DATA_VERSION, "model": name, **MODELS[name],
                **_versions("torch", "torchvision", "ultralytics" if name == "yolov8n" else "torch")}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{key}"


# -- generated data ------------------------------------------------------------------------------

def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth two-colour gradient with pixel noise and a few faint blobs: not a flat field."""
    ramp = np.linspace(0, 1, size)[:, None] if rng.random() < 0.5 else np.linspace(0, 1, size)[None, :]
    a, b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    pixels = a[None, None, :] * (1 - ramp[..., None]) + b[None, None, :] * ramp[..., None]
    pixels = np.broadcast_to(pixels, (size, size, 3)).astype(np.float32)
    return np.clip(pixels + rng.normal(0, 12, (size, size, 3)), 0, 255)


def _shape_points(kind: str, cx: float, cy: float, w: float, h: float, rng: np.random.Generator) -> list:
    if kind == "triangle":  # apex up or down, the base the full width
        up = rng.random() < 0.5
        top, bottom = (cy - h / 2, cy + h / 2) if up else (cy + h / 2, cy - h / 2)
        return [(cx, top), (cx - w / 2, bottom), (cx + w / 2, bottom)]
    return [(cx - w / 2, cy - h / 2), (cx + w / 2, cy + h / 2)]


def _draw(draw, kind: str, cx: float, cy: float, w: float, h: float, colour: tuple, rng) -> None:  # noqa: ANN001
    points = _shape_points(kind, cx, cy, w, h, rng)
    if kind == "triangle":
        draw.polygon(points, fill=colour)
    elif kind == "circle":
        draw.ellipse(points, fill=colour)
    elif kind in ("rectangle", "square"):
        draw.rectangle(points, fill=colour)
    elif kind == "cross":
        t = max(2.0, w / 4)
        draw.rectangle([(cx - t / 2, cy - h / 2), (cx + t / 2, cy + h / 2)], fill=colour)
        draw.rectangle([(cx - w / 2, cy - t / 2), (cx + w / 2, cy + t / 2)], fill=colour)


def _colour(rng: np.random.Generator, background: np.ndarray) -> tuple:
    """A random colour that differs from the local background by at least a little."""
    for _ in range(20):
        colour = rng.integers(0, 256, 3)
        if np.abs(colour - background).sum() > 90:
            break
    return tuple(int(c) for c in colour)


def detection_dataset(root: Path, classes: list[str], size: int, train: int, val: int, seed: int = 0) -> Path:
    """A YOLO set: images/{train,val}/*.png, labels/{train,val}/*.txt, data.yaml. Returns the data.yaml."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("val", val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = _background(rng, size)
            image = Image.fromarray(pixels.astype(np.uint8))
            draw = ImageDraw.Draw(image)
            lines = []
            for _ in range(int(rng.integers(1, 6))):
                label = int(rng.integers(0, len(classes)))
                w = float(rng.uniform(18, 100))
                h = w * float(rng.uniform(0.6, 1.5)) if classes[label] != "circle" else w * float(rng.uniform(0.8, 1.2))
                h = min(h, size * 0.45)
                cx, cy = float(rng.uniform(w / 2, size - w / 2)), float(rng.uniform(h / 2, size - h / 2))
                _draw(draw, classes[label], cx, cy, w, h, _colour(rng, pixels[int(cy), int(cx)]), rng)
                lines.append(f"{label} {cx / size:.6f} {cy / size:.6f} {w / size:.6f} {h / size:.6f}")
            image.save(root / "images" / split / f"{split}_{i:04d}.png")
            (root / "labels" / split / f"{split}_{i:04d}.txt").write_text("\n".join(lines) + "\n")
    names = "".join(f"  {k}: {c}\n" for k, c in enumerate(classes))
    (root / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames:\n{names}")
    return root / "data.yaml"


def classification_dataset(root: Path, classes: list[str], size: int, per_class: dict[str, int],
                           seed: int = 0) -> Path:
    """Split folders of class folders: ``<split>/<class>/*.png``, one shape per image. Returns ``root``."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for label, kind in enumerate(classes):
            folder = root / split / kind
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = _background(rng, size)
                image = Image.fromarray(pixels.astype(np.uint8))
                draw = ImageDraw.Draw(image)
                w = float(rng.uniform(size * 0.25, size * 0.75))
                h = w if kind in ("circle", "square", "cross") else w * float(rng.uniform(0.7, 1.3))
                cx, cy = float(rng.uniform(w / 2, size - w / 2)), float(rng.uniform(h / 2, size - h / 2))
                _draw(draw, kind, cx, cy, w, h, _colour(rng, pixels[int(cy), int(cx)]), rng)
                for _ in range(int(rng.integers(0, 2))):  # clutter: a thin line across the image
                    xy = [tuple(float(v) for v in rng.uniform(0, size, 2)) for _ in range(2)]
                    draw.line(xy, fill=tuple(int(c) for c in rng.integers(0, 256, 3)), width=int(rng.integers(1, 4)))
                image.save(folder / f"{split}_{label}_{i:04d}.png")
    return root


# -- training ------------------------------------------------------------------------------------

def offline_ultralytics(folder: Path) -> None:
    """Ultralytics offline, its settings, runs, weights and datasets folders inside the cache."""
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_CONFIG_DIR"] = str(CACHE / "ultralytics-config")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    _cpu_torchvision.install()
    from ultralytics.utils import SETTINGS

    SETTINGS.update({"runs_dir": str(folder / "runs"), "weights_dir": str(folder / "weights"),
                     "datasets_dir": str(folder / "datasets"), "sync": False})


def _train_yolo(folder: Path, data_yaml: Path, settings: dict) -> dict:
    offline_ultralytics(folder)
    _cpu_torchvision.patch_nms()
    from ultralytics import YOLO
    from ultralytics.engine.trainer import BaseTrainer

    BaseTrainer.read_results_csv = lambda self: {}  # it needs polars only to copy results.csv into the checkpoint
    size = settings["size"]
    started = time.perf_counter()
    model = YOLO("yolov8n.yaml")
    # nbs = batch: an optimiser step every batch (Ultralytics' default accumulates to 64 images, which leaves a
    # brief training on 300 images with a few dozen steps)
    model.train(data=str(data_yaml), epochs=settings["epochs"], imgsz=size, batch=settings["batch"],
                nbs=settings["batch"], optimizer=settings["optimizer"], lr0=settings["lr0"],
                warmup_epochs=settings["warmup_epochs"], close_mosaic=settings["close_mosaic"], device="cpu",
                workers=2, plots=False, amp=False, val=False, seed=0, project=str(folder / "runs"), name="train",
                exist_ok=True, verbose=False)
    trained_s = time.perf_counter() - started
    best = folder / "runs" / "train" / "weights" / "best.pt"
    if not best.exists():
        best = best.with_name("last.pt")
    shutil.copy(best, folder / "best.pt")
    trained = YOLO(str(folder / "best.pt"))
    metrics = trained.val(data=str(data_yaml), imgsz=size, batch=8, device="cpu", plots=False, workers=0, rect=False,
                          project=str(folder / "runs"), name="val", exist_ok=True, verbose=False)
    here = os.getcwd()
    os.chdir(folder)  # the export writes next to the checkpoint; keep everything inside the cache
    try:
        exported = Path(trained.export(format="onnx", dynamic=True, imgsz=size, opset=settings["opset"]))
    finally:
        os.chdir(here)
    shutil.move(str(exported), folder / "best.onnx")
    return {"train_s": round(trained_s, 1), "epochs": settings["epochs"],
            "trainer_metric": {"ultralytics val mAP50-95": round(float(metrics.box.map), 4),
                               "ultralytics val mAP50": round(float(metrics.box.map50), 4)}}


def _classifier_tensors(root: Path, classes: list[str], size: int, split: str):  # noqa: ANN202 (torch tensors)
    """A split as tensors, preprocessed as the project says (resize, RGB, ImageNet mean/std)."""
    import torch
    from PIL import Image

    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    images, labels = [], []
    for label, kind in enumerate(classes):
        for path in sorted((root / split / kind).glob("*.png")):
            pixels = np.asarray(Image.open(path).convert("RGB").resize((size, size)), np.float32) / 255
            images.append(((pixels - mean) / std).transpose(2, 0, 1))
            labels.append(label)
    return torch.from_numpy(np.stack(images)), torch.tensor(labels)


def _train_classifier(folder: Path, name: str, data: Path, settings: dict) -> dict:
    import torch

    _cpu_torchvision.install()
    import torchvision

    torch.manual_seed(0)
    classes, size = settings["classes"], settings["size"]
    x, y = _classifier_tensors(data, classes, size, "train")
    vx, vy = _classifier_tensors(data, classes, size, "val")
    model = torchvision.models.get_model(name, weights=None, num_classes=len(classes))
    steps = settings["epochs"] * ((len(x) + settings["batch"] - 1) // settings["batch"])
    optimiser = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=settings["lr"], total_steps=steps, pct_start=0.2)
    started = time.perf_counter()
    for epoch in range(settings["epochs"]):
        model.train()
        order = torch.randperm(len(x))
        for start in range(0, len(x), settings["batch"]):
            index = order[start : start + settings["batch"]]
            batch = x[index]
            flip = torch.rand(len(batch)) < 0.5  # horizontal flips keep every class what it is
            batch[flip] = batch[flip].flip(-1)
            loss = torch.nn.functional.cross_entropy(model(batch), y[index], label_smoothing=0.05)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
        print(f"  {name} epoch {epoch + 1}/{settings['epochs']}: loss {loss.item():.3f} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    trained_s = time.perf_counter() - started
    model.eval()
    with torch.no_grad():
        top1 = float((torch.cat([model(vx[i : i + 64]) for i in range(0, len(vx), 64)]).argmax(1) == vy).float().mean())
    torch.save(model.state_dict(), folder / f"{name}.pth")
    return {"train_s": round(trained_s, 1), "epochs": settings["epochs"],
            "trainer_metric": {"torch eval top-1": round(top1, 4)}}


def trained(name: str) -> TrainedModel:
    """The cached model ``name``, generating its data and training it first if the cache lacks them."""
    settings = MODELS[name]
    folder = cache_folder(name)
    done = folder / "done.json"
    detection = settings["task"] == "detection"
    model_file = folder / ("best.onnx" if detection else f"{name}.pth")
    dataset = folder / "data" / ("data.yaml" if detection else "")
    checkpoint = folder / "best.pt" if detection else None
    if done.exists() and model_file.exists():
        facts = json.loads(done.read_text())
        return TrainedModel(name, settings["task"], folder, model_file, dataset.resolve(), checkpoint,
                            {**facts, "reused": True})
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    print(f"{name}: generating data and training into {folder} (cached for later runs)", flush=True)
    started = time.perf_counter()
    if detection:
        data = detection_dataset(folder / "data", settings["classes"], settings["size"], settings["train_images"],
                                 settings["val_images"])
    else:
        data = classification_dataset(folder / "data", settings["classes"], settings["size"],
                                      {"train": settings["train_per_class"], "val": settings["val_per_class"]})
    data_s = time.perf_counter() - started
    facts = _train_yolo(folder, data, settings) if detection else _train_classifier(folder, name, data, settings)
    facts = {"data_s": round(data_s, 1), **facts}
    done.write_text(json.dumps(facts, indent=2))
    return TrainedModel(name, settings["task"], folder, model_file, dataset.resolve(), checkpoint,
                        {**facts, "reused": False})


# -- the edgebuild project, as a user makes it -----------------------------------------------------

def _edgebuild(*args: str) -> subprocess.CompletedProcess:
    launcher = Path(__file__).resolve().parent / "_cpu_torchvision.py"
    return subprocess.run([sys.executable, str(launcher), *args], capture_output=True, text=True)


def make_project(model: TrainedModel, root: Path, min_retention: float | None) -> Path:
    """An edgebuild project for ``model`` in ``root``: ``edgebuild init`` from the ONNX export and data.yaml
    (YOLO), or a torchvision project file by name with the state_dict (class folders). ``min_retention``,
    when given, replaces the project's ``accuracy.min_retention`` (the one line a user edits)."""
    root.mkdir(parents=True, exist_ok=True)
    local = root / model.model_file.name
    shutil.copy(model.model_file, local)
    if model.task == "detection":
        done = _edgebuild("init", "--model", str(local), "--data", str(model.dataset), "--name", model.name, str(root))
        if done.returncode != 0:
            sys.exit(f"edgebuild init failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    else:
        (root / "edgebuild.toml").write_text(_classifier_toml(model, local.name))
    if min_retention is not None:
        text = (root / "edgebuild.toml").read_text()
        lines = [line for line in text.splitlines() if not line.strip().startswith("min_retention")]
        at = next(i for i, line in enumerate(lines) if line.strip() == "[accuracy]")
        lines.insert(at + 1, f"min_retention = {min_retention}")
        (root / "edgebuild.toml").write_text("\n".join(lines) + "\n")
    return root


def _classifier_toml(model: TrainedModel, weights: str) -> str:
    settings = MODELS[model.name]
    size, classes = settings["size"], settings["classes"]
    return f"""\
[project]
name = "{model.name}"

[model]
source = "torchvision:{model.name}"
weights = "{weights}"
outputs = ["logits"]

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = [1, 3, {size}, {size}]
opt_shape = [8, 3, {size}, {size}]
max_shape = [16, 3, {size}, {size}]

[task]
kind = "classification"
classes = {json.dumps(classes)}

[task.preprocess]
input_size = [{size}, {size}]
resize = "resize"
channel_order = "RGB"
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]

[task.postprocess]
logits_output = "logits"

[data]
dataset = "{model.dataset.as_posix()}"
max_calibration_images = 300  # of the 4000 training images: NNCF's default subset size, and the YOLO set's

[accuracy]
metric = "top-1"

[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"
"""
