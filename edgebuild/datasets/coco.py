"""COCO JSON: one annotations file (``images``, ``annotations``, ``categories``) and a folder of images."""

from __future__ import annotations

import json
from pathlib import Path

from edgebuild.datasets.formats import misplaced
from edgebuild.datasets.images import CocoSet, Sample, cap, spread
from edgebuild.errors import DataError

__all__ = ["read_coco"]


def read_coco(ann_path: Path, images_dir: Path, classes: list[str], limit: int | None = None,
              key: str = "data.validation.annotations") -> CocoSet:
    """A COCO validation set, its images in order of id; ``limit`` keeps that many, evenly spread over
    them by file name (``images.spread``). Categories are matched to ``classes`` by name: every class
    must be a category (a category the task lacks is allowed)."""
    try:
        gt = json.loads(ann_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{key}: file not found: {ann_path}") from None
    except IsADirectoryError:
        raise DataError(misplaced(ann_path, key, "a COCO annotations JSON file")) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        other = misplaced(ann_path, key, "a COCO annotations JSON file", quiet=True)
        raise DataError(other or f"{key}: {ann_path} is not valid JSON: {exc}") from None
    sections = ("images", "annotations", "categories")
    if not isinstance(gt, dict) or not all(isinstance(gt.get(k), list) for k in sections):
        raise DataError(f"{key}: {ann_path} is not COCO format: needs lists 'images', 'annotations', 'categories'")
    try:
        by_name = {c["name"]: int(c["id"]) for c in gt["categories"]}
        entries = [(int(im["id"]), str(im["file_name"])) for im in gt["images"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{key}: {ann_path}: malformed image or category entry: {exc!r}") from None
    unknown = [n for n in classes if n not in by_name]
    if unknown:
        raise DataError(
            f"{key}: task.classes {unknown} are not categories of {ann_path} "
            f"(categories: {sorted(by_name)})"
        )
    entries.sort()
    available = len(entries)
    most = cap(limit)
    if most and most < available:
        entries = spread(entries, most, lambda entry: Path(entry[1]).stem)
        kept = {i for i, _ in entries}
        gt = {**gt, "images": [im for im in gt["images"] if int(im["id"]) in kept],
              "annotations": [a for a in gt["annotations"] if int(a["image_id"]) in kept]}
    samples = [Sample(images_dir / name, image_id) for image_id, name in entries]
    missing = [s.path.name for s in samples if not s.path.is_file()]
    if missing:
        raise DataError(
            f"data.validation.images: {len(missing)} image(s) listed in {ann_path.name} are not in "
            f"{images_dir}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    if not samples:
        raise DataError(f"{key}: {ann_path} lists no images")
    return CocoSet(ann_path, gt, samples, [by_name[n] for n in classes], available=available)
