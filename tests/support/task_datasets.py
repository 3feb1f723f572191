"""Generated YOLO datasets for the pose, segmentation and OBB zoo tests: coloured shapes on grey, in the
label forms edgebuild's YOLO reader and Ultralytics' loader both accept.

- pose: one class ("box"), each object a rectangle with its 4 corners as keypoints (kpt_shape [4, 3],
  visibility 2; flip_idx [1, 0, 3, 2]: a horizontal flip swaps left and right corners);
- segmentation: two classes, a red triangle and a blue octagon, each labelled by its polygon;
- obb: two classes, a long red bar and a squarer blue block, each turned by any angle and labelled by its
  4 corners (``class x1 y1 x2 y2 x3 y3 x4 y4``, normalized).

Image sizes are those of the detection parity test (most letterboxed at imgsz 128, each scaling to
whole pixels).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from PIL import ImageDraw

SIZES = [(160, 120), (120, 160), (128, 128), (256, 192), (64, 48), (200, 150), (96, 128)]


def _splits(root: Path, train: int, val: int) -> list[tuple[str, int]]:
    for split in ("train", "val"):
        for folder in ("images", "labels"):
            (root / split / folder).mkdir(parents=True, exist_ok=True)
    return [("train", train), ("val", val)]


def _generated_set(root: Path, train: int, val: int, seed: int, yaml_tail: str,
                   draw_object: Callable[[np.random.Generator, ImageDraw.ImageDraw, int, int], str]) -> Path:
    """Images of the ``SIZES`` on grey, two objects each, drawn by ``draw_object`` (which returns the object's
    YOLO label line), in train/ and val/; ``yaml_tail``: the data.yaml's lines after the splits. Returns the
    data.yaml."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for split, count in _splits(root, train, val):
        for i in range(count):
            width, height = SIZES[int(rng.integers(0, len(SIZES)))]
            image = Image.new("RGB", (width, height), (40, 40, 40))
            draw = ImageDraw.Draw(image)
            lines = [draw_object(rng, draw, width, height) for _ in range(2)]
            image.save(root / split / "images" / f"{i}.png")
            (root / split / "labels" / f"{i}.txt").write_text("\n".join(lines) + "\n")
    (root / "data.yaml").write_text(f"path: {root}\ntrain: train/images\nval: val/images\n{yaml_tail}")
    return root / "data.yaml"


def pose_dataset(root: Path, train: int = 48, val: int = 48, seed: int = 0) -> Path:
    """Rectangles whose corners are the keypoints; returns the data.yaml."""
    def rectangle(rng: np.random.Generator, draw: ImageDraw.ImageDraw, width: int, height: int) -> str:
        w, h = int(rng.integers(width // 5, width * 2 // 5)), int(rng.integers(height // 5, height * 2 // 5))
        x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
        draw.rectangle([x, y, x + w - 1, y + h - 1], fill=(230, 200, 30))
        draw.rectangle([x, y, x + w // 3, y + h // 3], fill=(30, 30, 230))  # the top-left corner marked
        corners = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
        points = " ".join(f"{px / width:.6f} {py / height:.6f} 2" for px, py in corners)
        return f"0 {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} {w / width:.6f} {h / height:.6f} {points}"

    return _generated_set(root, train, val, seed, "kpt_shape: [4, 3]\nflip_idx: [1, 0, 3, 2]\nnames:\n  0: box\n",
                          rectangle)


def _polygon(kind: int, cx: float, cy: float, radius: float) -> list[tuple[float, float]]:
    corners = 3 if kind == 0 else 8
    start = -np.pi / 2 if kind == 0 else np.pi / 8
    angles = [start + 2 * np.pi * k / corners for k in range(corners)]
    return [(cx + radius * np.cos(a), cy + radius * np.sin(a)) for a in angles]


def _labelled_shapes(root: Path, train: int, val: int, seed: int, names: tuple[str, str],
                     shape: Callable[[np.random.Generator, int, int, int], list[tuple[float, float]]]) -> Path:
    """Two objects an image, each of class 0 (red) or 1 (blue), drawn and labelled by the points ``shape`` gives
    (a polygon, or an oriented box's 4 corners), normalized; returns the data.yaml."""
    def labelled(rng: np.random.Generator, draw: ImageDraw.ImageDraw, width: int, height: int) -> str:
        kind = int(rng.integers(0, 2))
        points = shape(rng, kind, width, height)
        draw.polygon(points, fill=(230, 30, 30) if kind == 0 else (30, 30, 230))
        return f"{kind} " + " ".join(f"{min(max(x / width, 0), 1):.6f} {min(max(y / height, 0), 1):.6f}"
                                     for x, y in points)

    return _generated_set(root, train, val, seed, f"names:\n  0: {names[0]}\n  1: {names[1]}\n", labelled)


def segmentation_dataset(root: Path, train: int = 48, val: int = 48, seed: int = 0) -> Path:
    """Red triangles (class 0) and blue octagons (class 1), labelled by their polygons; returns the data.yaml."""
    def polygon(rng: np.random.Generator, kind: int, width: int, height: int) -> list[tuple[float, float]]:
        radius = float(rng.uniform(0.12, 0.22)) * min(width, height)
        cx = float(rng.uniform(radius, width - radius))
        cy = float(rng.uniform(radius, height - radius))
        return _polygon(kind, cx, cy, radius)

    return _labelled_shapes(root, train, val, seed, ("triangle", "octagon"), polygon)


def obb_dataset(root: Path, train: int = 48, val: int = 48, seed: int = 0) -> Path:
    """Turned red bars (class 0) and blue blocks (class 1), labelled by their corners; returns the data.yaml."""
    def corners(rng: np.random.Generator, kind: int, width: int, height: int) -> list[tuple[float, float]]:
        long = float(rng.uniform(0.35, 0.5)) * min(width, height)
        short = long * (0.3 if kind == 0 else 0.7)
        angle = float(rng.uniform(0, np.pi))
        reach = (abs(np.cos(angle)) * long + abs(np.sin(angle)) * short) / 2, \
            (abs(np.sin(angle)) * long + abs(np.cos(angle)) * short) / 2
        cx, cy = float(rng.uniform(reach[0], width - reach[0])), float(rng.uniform(reach[1], height - reach[1]))
        along = np.array([np.cos(angle), np.sin(angle)]) * long / 2
        across = np.array([-np.sin(angle), np.cos(angle)]) * short / 2
        return [tuple((cx, cy) + sign_a * along + sign_b * across)
                for sign_a, sign_b in ((1, 1), (1, -1), (-1, -1), (-1, 1))]

    return _labelled_shapes(root, train, val, seed, ("bar", "block"), corners)
