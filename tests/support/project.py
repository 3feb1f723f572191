"""A small, valid edgebuild project for fast tests, and where the repository's examples are."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

TINY_MODEL = '''
import torch


class TinyDetector(torch.nn.Module):
    """Not a useful detector: just enough shape to exercise the pipeline quickly."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(y[..., 4:])}


def build_model():
    return TinyDetector()


def broken_model():
    raise RuntimeError("cannot build")


def not_a_module():
    return 42
'''

TINY_TOML = """\
[project]
name = "tiny"

[model]
entry_point = "tinydet.model:build_model"
outputs = ["boxes", "scores"]

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = [1, 3, 32, 32]
opt_shape = [2, 3, 64, 64]
max_shape = [4, 3, 96, 96]

[task]
kind = "detection"
classes = ["a", "b"]

[task.preprocess]
input_size = [64, 64]
resize = "letterbox"

[data]
calibration_images = "data/calibration"

[data.validation]
annotations = "data/val/annotations.json"
images = "data/val/images"

[accuracy]
min_retention = 0.92

[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"

[[fleet]]
name = "dock"
module = "agx-orin-64gb"
jetpack = "5.1.2"

[[fleet]]
name = "legacy"
module = "xavier-nx"
jetpack = "5.1.2"
"""


def write_tiny_project(root: Path, toml_text: str = TINY_TOML) -> Path:
    from PIL import Image

    (root / "tinydet").mkdir(parents=True, exist_ok=True)
    (root / "tinydet" / "__init__.py").write_text("")
    (root / "tinydet" / "model.py").write_text(textwrap.dedent(TINY_MODEL))
    rng = np.random.default_rng(0)
    for folder in ("data/calibration", "data/val/images"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(4):
        pixels = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "data/calibration" / f"{i}.png")
        Image.fromarray(pixels).save(root / "data/val/images" / f"{i}.png")
        images.append({"id": i + 1, "file_name": f"{i}.png", "width": 64, "height": 48})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 1 + i % 2,
                            "bbox": [4.0, 4.0, 20.0, 16.0], "area": 320.0, "iscrowd": 0})
    coco = {"images": images, "annotations": annotations,
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    (root / "data/val/annotations.json").write_text(json.dumps(coco))
    path = root / "edgebuild.toml"
    path.write_text(toml_text)
    return path


# Wrappers with the output mistakes users make most, for the model stage's output check; each
# `build_*` function fits TINY_TOML's entry point (the conv gives 4 + 2 channels: 2 classes).
TINY_WRONG_MODELS = '''
import torch


class Head(torch.nn.Module):
    def __init__(self, mode, channels=6):
        super().__init__()
        self.mode = mode
        self.conv = torch.nn.Conv2d(3, channels, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2)  # [N, 4+C, A], as Ultralytics' Detect head returns it
        if self.mode == "raw":
            return {"boxes": y, "scores": torch.sigmoid(y[:, 4:])}
        if self.mode == "untransposed":
            return {"boxes": y[:, :4], "scores": torch.sigmoid(y[:, 4:])}
        y = y.transpose(1, 2)
        if self.mode == "int_scores":
            return {"boxes": y[..., :4], "scores": (y[..., 4:] > 0).long()}
        return {"boxes": y[..., :4], "scores": torch.sigmoid(y[..., 4:])}


def build_raw_head():
    return Head("raw")


def build_untransposed():
    return Head("untransposed")


def build_too_many_classes():
    return Head("split", channels=4 + 80)


def build_int_scores():
    return Head("int_scores")


class Classifier(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, classes, 3, padding=1)

    def forward(self, images):
        return self.conv(images).mean((2, 3))


def build_classifier():
    return Classifier(3)


def build_imagenet_classifier():
    return Classifier(1000)
'''

TINY_CLASSIFIER_TOML = """\
[project]
name = "tiny-classifier"

[model]
entry_point = "tinydet.wrong:build_classifier"
outputs = ["logits"]

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = [1, 3, 32, 32]
opt_shape = [2, 3, 32, 32]
max_shape = [4, 3, 32, 32]

[task]
kind = "classification"
classes = ["cat", "dog", "fox"]

[task.preprocess]
input_size = [32, 32]
resize = "resize"

[data]
calibration_images = "data/calibration"

[data.validation]
images = "data/val"

[accuracy]
metric = "top-1"
min_retention = 0.9

[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"
"""


def write_tiny_wrong_models(root: Path) -> None:
    """tinydet.wrong, next to the tiny project's model (call after write_tiny_project or
    write_tiny_classifier_project)."""
    (root / "tinydet" / "wrong.py").write_text(textwrap.dedent(TINY_WRONG_MODELS))


def write_tiny_classifier_project(root: Path, toml_text: str = TINY_CLASSIFIER_TOML) -> Path:
    """A three-class classification project (tinydet.wrong:build_classifier) with class folders."""
    from PIL import Image

    (root / "tinydet").mkdir(parents=True, exist_ok=True)
    (root / "tinydet" / "__init__.py").write_text("")
    write_tiny_wrong_models(root)
    rng = np.random.default_rng(0)
    for i in range(3):
        for folder in ("data/calibration", *(f"data/val/{name}" for name in ("cat", "dog", "fox"))):
            (root / folder).mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / folder / f"{i}.png")
    path = root / "edgebuild.toml"
    path.write_text(toml_text)
    return path


def digits_model_file_toml(example: Path, model: str, *, name: str = "digits-onnx", classes: int = 10,
                           groups: str = "") -> str:
    """A project for the digits classifier whose [model] section is ``model`` (a model file, a name),
    reading the example's data; one Orin group, ``sorters``, plus any ``groups`` TOML."""
    names = ", ".join(f'"{i}"' for i in range(classes))
    return textwrap.dedent(f"""\
        [project]
        name = "{name}"

        [model]
        {model}
        outputs = ["logits"]

        [[model.inputs]]
        name = "images"
        dtype = "float32"
        min_shape = [1, 1, 8, 8]
        opt_shape = [8, 1, 16, 16]
        max_shape = [32, 1, 32, 32]

        [task]
        kind = "classification"
        classes = [{names}]

        [task.preprocess]
        input_size = [16, 16]
        resize = "resize"
        channel_order = "GRAY"
        mean = [0.31]
        std = [0.32]

        [data]
        calibration_images = "{example / 'data' / 'calibration'}"

        [data.validation]
        images = "{example / 'data' / 'val'}"

        [accuracy]
        metric = "top-1"
        min_retention = 0.92

        [[fleet]]
        name = "sorters"
        module = "orin-nano-4gb"
        jetpack = "6.2"
        """) + groups


def compile_json(root: Path, *args: str):
    """`edgebuild compile -p ROOT ARGS --json` through click's runner: the result and its report ({} if none)."""
    from click.testing import CliRunner

    from edgebuild.cli import main

    result = CliRunner().invoke(main, ["compile", "-p", str(root), *args, "--json"])
    return result, json.loads(result.stdout) if result.stdout.lstrip().startswith("{") else {}


def report_stages(report: dict) -> dict[str, dict]:
    """A compile's JSON report by stage name."""
    return {s["name"]: s for s in report["stages"]}


def stage_record(report: dict, stage: str) -> dict:
    """The record of a once-per-project stage in a compile's JSON report."""
    return report_stages(report)[stage]["runs"][0]["record"]
