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
from typing import TYPE_CHECKING, Any, TypeVar

from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject

if TYPE_CHECKING:
    import numpy as np

__all__ = ["IMAGE_SUFFIXES", "CocoSet", "list_images", "non_images"]

#: what Ultralytics takes as images (ultralytics.data.utils.IMG_FORMATS), so a set reads the same files there
#: and here; one PIL cannot decode (HEIC without a plugin) is refused by name, not skipped
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".avif", ".dng", ".heic", ".heif",
                  ".jp2", ".mpo")
_T = TypeVar("_T")


@dataclass(frozen=True)
class Sample:
    path: Path
    image_id: int  # COCO image id for detection, running index for classification
    label: int = -1  # class index for classification


@dataclass(frozen=True)
class CocoSet:
    """A detection set in COCO form, with category ids mapped onto the task's class order.

    Read for segmentation, pose or OBB (``task``), each annotation also holds ``segmentation`` (COCO
    polygons in pixels or RLE; ``area`` the mask's), ``keypoints`` (x, y, v in pixels) with
    ``num_keypoints``, or ``obb`` (4 corners in pixels; ``bbox`` their bounding box); a pose set's
    ground truth carries ``kpt_shape`` and ``flip_idx`` at its top level.

    ``annotations_path`` is the file that describes the set (the COCO JSON, the data.yaml, the VOC
    split list or Annotations folder); ``files`` every other file its ground truth was read from
    (label files, XML files), so a content digest can cover them.
    """

    annotations_path: Path
    ground_truth: JsonObject
    samples: list[Sample]
    category_ids: list[int]  # category_ids[class_index] = COCO category id
    format: str = "coco"
    files: tuple[Path, ...] = ()
    available: int = 0  # the images of the set before a cap kept ``samples`` of them (0: not counted)
    notes: tuple[str, ...] = ()  # what reading it did that a user must hear (boxes clipped or dropped, ...)
    task: str = "detection"  # what its annotations hold beyond boxes: segmentation, pose, obb (task_labels)
    kpt_shape: tuple[int, int] | None = None  # pose: [keypoints, 2 or 3] (also the ground truth's "kpt_shape")
    flip_idx: tuple[int, ...] | None = None  # pose: each keypoint's mirror, where known (also "flip_idx")


#: the EXIF orientations that turn the image a quarter (its width and height swap)
_QUARTER_TURNS = (5, 6, 7, 8)
#: PIL modes of more than 8 bits a channel: 16-bit PNG/TIFF greys
_WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _open_upright(image: Any) -> tuple[Any, set[str]]:
    """``image`` as Ultralytics' ``cv2.imread`` sees it (EXIF orientation applied, 16-bit scaled to 8 bits
    by its high byte, never clipped), and what about it needed doing: ``exif``, ``16-bit``, ``alpha``,
    ``palette``, ``gray``."""
    import numpy as np
    from PIL import Image, ImageOps

    traits: set[str] = set()
    if any(";16" in str(getattr(tile, "args", "")) for tile in getattr(image, "tile", ())):
        traits.add("16-bit")  # a 16-bit RGB(A) PNG: PIL itself keeps the high byte, as cv2.imread does
    if image.getexif().get(0x0112, 1) not in (1, None):
        traits.add("exif")
        image = ImageOps.exif_transpose(image)
    if image.mode in _WIDE_MODES:
        traits.add("16-bit")
        pixels = np.asarray(image).astype(np.int64) >> 8  # cv2.imread keeps the high byte
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "L")
    if image.mode == "P":
        traits.add("palette")
        if "transparency" in image.info:
            traits.add("alpha")
    elif image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        traits.add("alpha")  # dropped, not blended: cv2.imread(IMREAD_COLOR) drops it
    if image.mode in ("L", "LA", "1", "I;16", "I", "La"):
        traits.add("gray")
    return image, traits


def read_image(path: Path, gray: bool = False) -> np.ndarray:
    """Decode an image file to HxWx3 RGB uint8 (or HxW for gray) as Ultralytics reads it (``cv2.imread``):
    the EXIF orientation applied, a 16-bit image scaled to 8 bits (its high byte), alpha dropped, a palette
    or grey image expanded to RGB."""
    return _decode(path, gray)[0]


def _decode(path: Path, gray: bool = False) -> tuple[np.ndarray, set[str]]:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            upright, traits = _open_upright(image)
            if upright.mode == "P" or upright.mode in ("RGBA", "LA", "PA"):
                upright = upright.convert("RGBA").convert("RGB")  # alpha dropped, as cv2.imread drops it
            return np.asarray(upright.convert("L" if gray else "RGB")), traits
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, ImportError) as exc:
        raise DataError(f"{path}: cannot read image: {_said(exc, path)}") from None
    except Image.DecompressionBombError as exc:
        raise DataError(f"{path}: cannot read image: {exc}") from None


def _said(exc: Exception, path: Path) -> str:
    if path.is_file() and path.stat().st_size == 0:
        return "the file is empty"
    if isinstance(exc, ImportError):  # Ultralytics, once imported, answers an unknown format by importing pi_heif
        return f"not an image format Pillow reads (an image plugin tried {exc.name or exc} and it is not installed)"
    text = str(exc).replace(f"{str(path)!r}", "").replace(str(path), "").strip(" :")
    if isinstance(exc, OSError) and "truncated" in text.lower():
        return text if "file is truncated" in text else f"the file is truncated ({text})"
    return text or type(exc).__name__


def decode_traits(path: Path) -> tuple[tuple[int, int], set[str]]:
    """Decode every pixel of ``path`` (a DataError when it cannot be): (its (width, height) as read, upright;
    what about it needed doing, ``_open_upright``)."""
    pixels, traits = _decode(path)
    return (int(pixels.shape[1]), int(pixels.shape[0])), traits


def image_size(path: Path, key: str) -> tuple[int, int]:
    """(width, height) of an image as ``read_image`` decodes it, from its header (the pixels are not decoded):
    with an EXIF orientation that turns it a quarter, width and height swap, as Ultralytics' ``exif_size``
    and ``cv2.imread`` take it (boxes are drawn on the upright view by labelling tools, which show the
    image as a browser does, EXIF applied).

    While a file cache is in use (``edgebuild.statcache``) a file whose stat is unchanged is not opened
    (a PNG's EXIF can follow its pixels, and PIL decodes them all to find it)."""
    from edgebuild.statcache import cached

    return cached(path, "image_size", lambda p: _image_size(p, key), _size_pair)


def _size_pair(value: Any) -> tuple[int, int]:
    width, height = value
    if not (type(width) is int and type(height) is int and width > 0 and height > 0):
        raise ValueError(value)
    return width, height


def _image_size(path: Path, key: str) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = image.size
            try:
                orientation = image.getexif().get(0x0112, 1)
            except (OSError, SyntaxError, ValueError):  # a broken file past its header: decoding says so
                orientation = 1
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, ImportError) as exc:
        raise DataError(f"{key}: {path}: cannot read image: {_said(exc, path)}") from None
    return (height, width) if orientation in _QUARTER_TURNS else (width, height)


def list_images(folder: Path, key: str, limit: int | None = None) -> list[Path]:
    if not folder.is_dir():
        raise DataError(f"{key}: not a folder: {folder}")
    images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise DataError(f"{key}: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    return spread(images, limit, image_stem)


def non_images(folder: Path) -> list[Path]:
    """The files under ``folder`` that ``list_images`` skips (not hidden ones): what ``check`` counts."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() not in IMAGE_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


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
