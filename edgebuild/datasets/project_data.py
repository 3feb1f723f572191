"""The project's image data: calibration images, COCO detection sets, class-folder sets."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.errors import DataError

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["Sample", "calibration_digest", "calibration_images", "list_images", "load_class_folder_set",
           "load_coco_set", "missing_data", "prepare_data", "read_image", "unreadable_images", "validation_digest"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def read_image(path: Path, gray: bool = False) -> np.ndarray:
    """Decode an image file to HxWx3 RGB uint8 (or HxW for gray)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("L" if gray else "RGB"))
    except (UnidentifiedImageError, OSError) as exc:
        raise DataError(f"{path}: cannot read image: {exc}") from None


def list_images(folder: Path, key: str, limit: int | None = None) -> list[Path]:
    if not folder.is_dir():
        raise DataError(f"{key}: not a folder: {folder}")
    images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise DataError(f"{key}: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    return images[:limit] if limit else images


def unreadable_images(paths: list[Path], gray: bool = False, sample: int = 4) -> tuple[int, list[str]]:
    """Decode up to ``sample`` of ``paths``, spread over the list: (how many it tried, the problems)."""
    if len(paths) <= sample:
        tried = list(paths)
    else:
        tried = [paths[round(i * (len(paths) - 1) / (sample - 1))] for i in range(sample)] if sample > 1 \
            else paths[:1]
    problems = []
    for path in tried:
        try:
            read_image(path, gray)
        except DataError as exc:
            problems.append(exc.message)
    return len(tried), problems


def calibration_images(project: Project) -> list[Path]:
    data = project.data
    return list_images(project.path(data.calibration_images), "data.calibration_images",
                       data.max_calibration_images)


@dataclass(frozen=True)
class Sample:
    path: Path
    image_id: int  # COCO image id for detection, running index for classification
    label: int = -1  # class index for classification


@dataclass(frozen=True)
class CocoSet:
    """A COCO-format validation set, with category ids mapped onto the task's class order."""

    annotations_path: Path
    ground_truth: dict[str, Any]
    samples: list[Sample]
    category_ids: list[int]  # category_ids[class_index] = COCO category id


def load_coco_set(project: Project, limit: int | None = None) -> CocoSet:
    """The COCO validation set; ``limit`` (or data.validation.max_images) keeps the first images."""
    val = project.data.validation
    ann_path = project.path(val.annotations or "")
    images_dir = project.path(val.images)
    key = "data.validation.annotations"
    try:
        gt = json.loads(ann_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{key}: file not found: {ann_path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{key}: {ann_path} is not valid JSON: {exc}") from None
    sections = ("images", "annotations", "categories")
    if not isinstance(gt, dict) or not all(isinstance(gt.get(k), list) for k in sections):
        raise DataError(f"{key}: {ann_path} is not COCO format: needs lists 'images', 'annotations', 'categories'")
    try:
        by_name = {c["name"]: int(c["id"]) for c in gt["categories"]}
        entries = [(int(im["id"]), str(im["file_name"])) for im in gt["images"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{key}: {ann_path}: malformed image or category entry: {exc!r}") from None
    classes = project.task.classes
    unknown = [n for n in classes if n not in by_name]
    if unknown:
        raise DataError(
            f"{key}: task.classes {unknown} are not categories of {ann_path} "
            f"(categories: {sorted(by_name)})"
        )
    entries.sort()
    cap = min(filter(None, (limit, val.max_images)), default=None)
    if cap:
        entries = entries[:cap]
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
    return CocoSet(ann_path, gt, samples, [by_name[n] for n in classes])


def load_class_folder_set(project: Project, limit: int | None = None) -> list[Sample]:
    """A classification set: one sub-folder per class name, as in task.classes."""
    val = project.data.validation
    root = project.path(val.images)
    if not root.is_dir():
        raise DataError(f"data.validation.images: not a folder: {root}")
    present = sorted(p.name for p in root.iterdir() if p.is_dir())
    classes = project.task.classes
    missing = [c for c in classes if c not in present]
    if missing:
        raise DataError(
            f"data.validation.images: {root} needs one folder per class; missing {missing} "
            f"(found: {present})"
        )
    ranked = []  # (rank within its class, label, path)
    for label, name in enumerate(classes):
        for rank, path in enumerate(list_images(root / name, f"data.validation.images ({name})")):
            ranked.append((rank, label, path))
    cap = min(filter(None, (limit, val.max_images)), default=None)
    if cap:
        # take the first images of every class in turn, so a capped set stays balanced
        ranked = sorted(ranked)[:cap]
    ranked.sort(key=lambda item: (item[1], item[0]))
    return [Sample(path, i, label) for i, (_, label, path) in enumerate(ranked)]


# -- identity and preparation --------------------------------------------------------------------

def calibration_digest(project: Project) -> str:
    """Content hash of the calibration images (names and bytes)."""
    from edgebuild.content import files_digest

    return files_digest(calibration_images(project))


def validation_digest(project: Project) -> str:
    """Content hash of the validation set: images and, for detection, the annotations file."""
    from edgebuild.content import files_digest

    if project.task.kind == "detection":
        coco = load_coco_set(project)
        return files_digest([coco.annotations_path, *[s.path for s in coco.samples]])
    return files_digest([s.path for s in load_class_folder_set(project)],
                        root=project.path(project.data.validation.images))


def missing_data(project: Project) -> dict[str, Path]:
    """The project's data paths (calibration, validation) that do not exist."""
    from edgebuild.project.config import data_paths

    return {k: p for k, p in data_paths(project).items() if k.startswith("data.") and not p.exists()}


def prepare_data(project: Project, report: Callable[[str], None] = lambda _: None) -> bool:
    """Run ``data.prepare`` when a data path is missing; True if it ran.

    This is the only place edgebuild runs the project's data code: ``compile``, ``validate`` and
    ``edgebuild data prepare`` call it before any stage reads the data; ``check`` never does.
    """
    missing = missing_data(project)
    if not missing:
        return False
    if not project.data.prepare:
        raise DataError("; ".join(f"{key}: path does not exist: {path}" for key, path in missing.items()),
                        hint="add the data, or name a function that makes it with data.prepare")
    from edgebuild.sources.model import call_entry_point

    report(f"data: {', '.join(missing)} missing; running data.prepare ({project.data.prepare})")
    call_entry_point(project, project.data.prepare, "data.prepare", str(project.root))
    still = missing_data(project)
    if still:
        raise DataError("; ".join(f"{key}: path does not exist: {path} (data.prepare ran and did not create it)"
                                  for key, path in still.items()),
                        hint=f"check what {project.data.prepare} writes")
    return True
