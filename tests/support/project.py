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
