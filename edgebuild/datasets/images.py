"""What every dataset format shares: image files, the samples a set is made of, and its one internal form.

Whatever the format on disk (COCO JSON, a YOLO data.yaml, Pascal VOC XML, class folders), a
detection set is read into a ``CocoSet``: a COCO ground-truth dict (images, annotations with
``bbox`` [x, y, w, h] in pixels from the image's top-left corner, categories), the ``Sample`` of
every image, and the COCO category id of each ``task.classes`` entry. A classification set is a
list of ``Sample`` with their class index. Calibration is a list of image paths.

A cap (``max_images``, ``max_calibration_images``, a stage's own limit) keeps ``spread``: images
evenly spaced over the set sorted by file name, not the first ones, so one camera's or one
prefix's images do not fill it, and the same images written as YOLO, COCO or VOC give the same subset.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from edgebuild.errors import DataError

__all__ = ["IMAGE_SUFFIXES", "CocoSet", "Sample", "cap", "image_size", "image_stem", "list_images", "read_image",
           "refuse_duplicate_stems", "relative_name", "spread", "unreadable_images"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
_T = TypeVar("_T")


@dataclass(frozen=True)
class Sample:
    path: Path
    image_id: int  # COCO image id for detection, running index for classification
    label: int = -1  # class index for classification


@dataclass(frozen=True)
class CocoSet:
    """A detection set in COCO form, with category ids mapped onto the task's class order.

    ``annotations_path`` is the file that describes the set (the COCO JSON, the data.yaml, the VOC
    split list or Annotations folder); ``files`` every other file its ground truth was read from
    (label files, XML files), so a content digest can cover them.
    """

    annotations_path: Path
    ground_truth: dict[str, Any]
    samples: list[Sample]
    category_ids: list[int]  # category_ids[class_index] = COCO category id
    format: str = "coco"
    files: tuple[Path, ...] = ()
    available: int = 0  # the images of the set before a cap kept ``samples`` of them (0: not counted)


def read_image(path: Path, gray: bool = False) -> np.ndarray:
    """Decode an image file to HxWx3 RGB uint8 (or HxW for gray)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("L" if gray else "RGB"))
    except (UnidentifiedImageError, OSError) as exc:
        raise DataError(f"{path}: cannot read image: {exc}") from None


def image_size(path: Path, key: str) -> tuple[int, int]:
    """(width, height) of an image as ``read_image`` decodes it, from its header (the pixels are not decoded).

    Pixels are used as stored: an EXIF orientation is not applied (as ``read_image`` does not), so
    an image whose EXIF says it is shown rotated is refused rather than measured in the wrong frame.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            size = image.size
            orientation = image.getexif().get(0x0112, 1) if image.format in ("JPEG", "WEBP", "TIFF", "MPO") else 1
    except (UnidentifiedImageError, OSError) as exc:
        raise DataError(f"{key}: {path}: cannot read image: {exc}") from None
    if orientation not in (1, None):
        raise DataError(f"{key}: {path}: its EXIF orientation ({orientation}) says it is shown rotated or mirrored; "
                        "edgebuild reads pixels as stored, so boxes drawn on the rotated view would not fit",
                        hint="write the images upright (e.g. PIL.ImageOps.exif_transpose) before labelling or "
                             "converting them")
    return size


def list_images(folder: Path, key: str, limit: int | None = None) -> list[Path]:
    if not folder.is_dir():
        raise DataError(f"{key}: not a folder: {folder}")
    images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise DataError(f"{key}: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    return spread(images, limit, image_stem)


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


def image_stem(path: Path) -> str:
    """The name ``spread`` sorts an image by: its file name without the suffix (a VOC id)."""
    return path.stem


def spread(items: Sequence[_T], limit: int | None, name: Callable[[_T], str]) -> list[_T]:
    """At most ``limit`` of ``items`` (None: all), in their own order: evenly spaced over them sorted by
    ``name`` (an image's file name without its suffix), starting with the first name.

    Evenly spaced rather than the first ``limit``: images sorted by name come in runs (one camera,
    one day, one prefix), and the first ones would be one run. Rather than a random sample: every
    stretch of the sorted set gets its share, the same subset every time with no seed to keep, and
    what decides is the file name, which a set keeps when written as YOLO, COCO or VOC, so each
    format of it gives the same images."""
    if limit is None or len(items) <= limit:
        return list(items)
    ordered = sorted(range(len(items)), key=lambda i: (name(items[i]), i))
    kept = {ordered[j * len(items) // limit] for j in range(limit)}
    return [item for i, item in enumerate(items) if i in kept]


def cap(*limits: int | None) -> int | None:
    """The smallest of the limits that are set (None: no limit)."""
    return min(filter(None, limits), default=None)


def refuse_duplicate_stems(paths: list[Path], key: str, where: str) -> None:
    """Two images of one set with the same name but for the suffix (or folder) are refused: they
    share a label file (``a.jpg`` and ``a.png`` both read ``a.txt``) or an id (VOC's ``a``)."""
    by_stem: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        by_stem[path.stem].append(path)
    twice = {stem: found for stem, found in by_stem.items() if len(found) > 1}
    if twice:
        shown = "; ".join(f"{stem}: {', '.join(str(p) for p in found[:3])}" for stem, found in list(twice.items())[:3])
        more = f" (and {len(twice) - 3} more)" if len(twice) > 3 else ""
        raise DataError(f"{key}: {where}: {len(twice)} image name(s) appear more than once: {shown}{more}",
                        hint="give every image of a split its own name (the label file and the id follow it)")


def relative_name(path: Path, base: Path) -> str:
    """``path`` under ``base`` where it is (a digest stays the same when the project moves), else its name."""
    try:
        return os.path.relpath(path, base) if path.is_relative_to(base) else path.name
    except ValueError:  # another drive
        return path.name
