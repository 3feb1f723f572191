"""COCO JSON: one annotations file (``images``, ``annotations``, ``categories``) and a folder of images.

Read for segmentation, every object of the task's classes needs ``segmentation``: polygons
``[[x1, y1, x2, y2, ...], ...]`` in pixels or RLE ``{"size": [h, w], "counts": ...}`` (crowd regions
use it), kept as read; its ``area`` is the file's, or the mask's where the file has none. Read for
pose, the task's categories need ``keypoints`` (their names; ``skeleton`` is kept) and every object
``keypoints`` [x, y, v, ...] (v 0, 1 or 2), as in COCO's ``person_keypoints_*.json``.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

from edgebuild.datasets.formats import misplaced
from edgebuild.datasets.images import IMAGE_SUFFIXES, CocoSet, Sample, cap, image_size, spread
from edgebuild.datasets.task_labels import flip_pairs, mask_area, model_of, refuse_task
from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject

__all__ = ["coco_beside", "read_coco"]


def read_coco(ann_path: Path, images_dir: Path, classes: list[str], limit: int | None = None,
              key: str = "data.validation.annotations", task: str = "detection") -> CocoSet:
    """A COCO validation set, its images in order of id; ``limit`` keeps that many, evenly spread over
    them by file name (``images.spread``). Categories are matched to ``classes`` by name: every class
    must be a category (a category the task lacks is allowed).

    Refused, naming the file and the id: an image id or annotation id twice, an annotation of an image
    or category the file does not have, a bbox that is not 4 finite numbers or has a negative size, an
    image whose width/height disagree with its file. A box reaching past the image is clipped to it and
    one of zero width or height dropped, each counted in the set's notes. ``task`` segmentation or pose:
    the masks or keypoints of the task's classes are checked too (the module's docstring).

    Read once a run while the file's stat is unchanged (``edgebuild.statcache.remembered``, where a
    file cache is in use: a compile's stage keys ask for the validation set four times); the callers
    share the answer and none changes it."""
    from edgebuild.statcache import remembered

    what = json.dumps(["coco", os.path.abspath(images_dir), list(classes), limit, key, task])
    return remembered(ann_path, what, lambda: _read_coco(ann_path, images_dir, classes, limit, key, task))


def _read_coco(ann_path: Path, images_dir: Path, classes: list[str], limit: int | None = None,
               key: str = "data.validation.annotations", task: str = "detection") -> CocoSet:
    """``read_coco`` without the memory."""
    refuse_task(task, key)
    if task == "obb":
        raise DataError(f"{key}: {ann_path}: COCO JSON has no oriented boxes; {model_of(task)} is validated on YOLO "
                        "OBB labels (class x1 y1 x2 y2 x3 y3 x4 y4)",
                        hint="point data.dataset at the OBB data.yaml the model was trained on")
    try:
        gt = json.loads(ann_path.read_text(encoding="utf-8-sig"))
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
    where = f"{key}: {ann_path}"
    by_name, category_ids = _categories(gt["categories"], where)
    entries = _images(gt["images"], where)
    unknown = [n for n in classes if n not in by_name]
    if unknown:
        raise DataError(
            f"{key}: task.classes {unknown} are not categories of {ann_path} "
            f"(categories: {sorted(by_name)})"
        )
    in_file = [n for n, _ in sorted(by_name.items(), key=lambda item: item[1]) if n in classes]
    if in_file != list(classes):
        raise DataError(f"{key}: {ann_path}: its categories in id order name task.classes as {in_file}, but "
                        f"task.classes is {list(classes)}: the model predicts task.classes in order, and a COCO "
                        "file's categories in id order are the classes a model trained on it predicts; names "
                        "swapped in the file would score every box against another class",
                        hint="make task.classes the categories' names in id order, or fix the names in the file")
    image_ids = {image_id for image_id, _ in entries}
    annotations = _annotations(gt["annotations"], image_ids, category_ids, where)
    entries.sort()
    available = len(entries)
    most = cap(limit)
    if most and most < available:
        entries = spread(entries, most, lambda entry: Path(entry[1]).stem)
    kept = {i for i, _ in entries}
    samples = [Sample(images_dir / name, image_id) for image_id, name in entries]
    missing = [s.path.name for s in samples if not s.path.is_file()]
    if missing:
        raise DataError(
            f"data.validation.images: {len(missing)} image(s) listed in {ann_path.name} are not in "
            f"{images_dir}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    if not samples:
        raise DataError(f"{key}: {ann_path} lists no images")
    images = [dict(im) for im in gt["images"] if int(im["id"]) in kept]
    sizes = _sizes(images, {s.image_id: s.path for s in samples}, where, "data.validation.images")
    tally: Counter[str] = Counter()
    fitted = [a for a in (_fit(a, sizes[int(a["image_id"])], tally) for a in annotations if int(a["image_id"]) in kept)
              if a is not None]
    ids = {by_name[n] for n in classes}
    kpt_shape: tuple[int, int] | None = None
    flip: list[int] | None = None
    if task == "segmentation":
        fitted = [_with_mask(a, sizes[int(a["image_id"])], where) if int(a["category_id"]) in ids else a
                  for a in fitted]
    elif task == "pose":
        names = _keypoint_names(gt["categories"], ids, where)
        kpt_shape, flip = (len(names), 3), flip_pairs(names)
        fitted = [_with_keypoints(a, len(names), where, tally) if int(a["category_id"]) in ids else a
                  for a in fitted]
    said = {"clipped": "box(es) reach past the image edge: clipped to the image",
            "zero-area": "box(es) of zero width or height: dropped (no detection can match them)",
            "recounted": "annotation(s) whose num_keypoints disagree with their keypoints' visibilities: counted "
                         "again (v > 0)"}
    notes = tuple(f"{ann_path.name}: {tally[k]} {text}" for k, text in said.items() if tally.get(k))
    gt = {**gt, "images": images, "annotations": fitted}
    if kpt_shape is not None:
        gt.update(kpt_shape=list(kpt_shape), flip_idx=flip)
    return CocoSet(ann_path, gt, samples, [by_name[n] for n in classes], available=available, notes=notes,
                   task=task, kpt_shape=kpt_shape, flip_idx=tuple(flip) if flip else None)


def coco_beside(path: Path, key: str = "--data") -> tuple[list[str], Path, Path]:
    """A COCO JSON found alone (``init --data``): its category names in id order, the images folder beside it
    that holds its first image, and a calibration (or train) folder of images near it."""
    try:
        gt = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(gt, dict):
            raise DataError(f"{key}: {path} is not a COCO JSON file edgebuild reads: its top level is a JSON "
                            f"{type(gt).__name__}, expected an object with lists 'images', 'annotations' and "
                            "'categories'")
        names = [str(c["name"]) for c in sorted(gt["categories"], key=lambda c: c["id"])]
        first = gt["images"][0]["file_name"] if gt["images"] else None
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise DataError(f"{key}: {path} is not a COCO JSON file edgebuild reads ({type(exc).__name__}: {exc})") \
            from None
    stem = path.stem.removeprefix("instances_")
    here, up = path.parent, path.parent.parent
    candidates = [here / "images", here / stem, up / "images" / stem, up / stem, up / "images", here]
    # a file_name may name a sub-folder ("val/a0.png" under images/): the folder is the one that holds it
    images = next((c for c in candidates if ((c / first).is_file() if first is not None else _has_images(c))),
                  None)
    if images is None:
        raise DataError(f"{key}: no images folder for {path.name} found next to it (looked in "
                        f"{', '.join(str(c) for c in candidates[:4])}"
                        + (f" for its first image {first!r})" if first is not None else ")"),
                        hint="put the images in an images/ folder beside the JSON, or write [data.validation] by hand")
    calibration = next((c for c in (here / "calibration", up / "calibration", here / "train", up / "train",
                                    up / "images" / "train", up / "train2017") if c != images and _has_images(c)),
                       None)
    if calibration is None:
        raise DataError(f"{key}: {path.name} is one annotated set (validation); no calibration images found next "
                        f"to it (a calibration/ or train/ folder of images in {here} or {up})",
                        hint="put a few hundred training images in a calibration/ folder beside it")
    return names, images, calibration


def _has_images(folder: Path) -> bool:
    return folder.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in folder.iterdir())


def _categories(categories: list[Any], where: str) -> tuple[dict[str, int], set[int]]:
    by_name: dict[str, int] = {}
    ids: set[int] = set()
    for index, category in enumerate(categories):
        try:
            name, category_id = str(category["name"]), _whole(category["id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: categories[{index}] needs a whole-number 'id' and a 'name': "
                            f"{_missing(exc)} in {category!r}") from None
        if category_id in ids:
            raise DataError(f"{where}: category id {category_id} appears more than once")
        if name in by_name:
            raise DataError(f"{where}: category name {name!r} appears more than once (ids {by_name[name]} and "
                            f"{category_id})")
        ids.add(category_id)
        by_name[name] = category_id
    return by_name, ids


def _images(images: list[Any], where: str) -> list[tuple[int, str]]:
    entries: list[tuple[int, str]] = []
    seen: dict[int, str] = {}
    named: dict[str, int] = {}
    for index, image in enumerate(images):
        try:
            image_id, name = _whole(image["id"]), str(image["file_name"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: images[{index}] needs a whole-number 'id' and a 'file_name': "
                            f"{_missing(exc)} in {image!r}") from None
        if image_id in seen:
            raise DataError(f"{where}: image id {image_id} appears more than once ({seen[image_id]} and {name})",
                            hint="give every image its own id; annotations name their image by it")
        if name in named:
            raise DataError(f"{where}: file_name {name!r} is image id {named[name]} and again image id {image_id}: "
                            "one image scored twice (its boxes under one id, missed under the other)",
                            hint="list every image once; remove the second entry")
        seen[image_id] = name
        named[name] = image_id
        entries.append((image_id, name))
    return entries


def _annotations(annotations: list[Any], image_ids: set[int], category_ids: set[int],
                 where: str) -> list[JsonObject]:
    checked: list[JsonObject] = []
    seen: set[int] = set()
    for index, annotation in enumerate(annotations):
        try:
            ann_id = _whole(annotation["id"])
            image_id, category_id = _whole(annotation["image_id"]), _whole(annotation["category_id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: annotations[{index}] needs whole-number 'id', 'image_id' and 'category_id': "
                            f"{_missing(exc)}") from None
        said = f"{where}: annotation id {ann_id}"
        if ann_id in seen:
            raise DataError(f"{said} appears more than once", hint="give every annotation its own id")
        seen.add(ann_id)
        if image_id not in image_ids:
            raise DataError(f"{said}: its image_id {image_id} is not an image of the file")
        if category_id not in category_ids:
            raise DataError(f"{said}: its category_id {category_id} is not a category of the file")
        box = annotation.get("bbox")
        if not (isinstance(box, list) and len(box) == 4 and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in box)):
            raise DataError(f"{said}: bbox must be 4 numbers [x, y, width, height], found {box!r}")
        if box[2] < 0 or box[3] < 0:
            raise DataError(f"{said}: bbox {box} has a negative width or height (COCO boxes are [x, y, width, "
                            "height], not corners)")
        checked.append(annotation)
    return checked


def _sizes(images: list[JsonObject], paths: dict[int, Path], where: str, key: str) -> dict[int, tuple[int, int]]:
    """Each image's (width, height) from its file; a width/height the JSON gives must agree."""
    sizes = {}
    for image in images:
        image_id = int(image["id"])
        path = paths[image_id]
        size = image_size(path, key)
        given = (image.get("width"), image.get("height"))
        if given != (None, None) and given != size:
            raise DataError(f"{where}: image id {image_id} ({path.name}) says width/height {given[0]}x{given[1]}, "
                            f"but the file is {size[0]}x{size[1]}: the boxes were drawn on another version of it",
                            hint="fix its width and height, or annotate the image that is there")
        image["width"], image["height"] = size
        sizes[image_id] = size
    return sizes


def _fit(annotation: JsonObject, size: tuple[int, int], tally: Counter[str]) -> JsonObject | None:
    """The annotation with its box clipped to the image (counted), or None for a box of zero area (counted)."""
    x, y, w, h = (float(v) for v in annotation["bbox"])
    x1, y1 = min(max(x, 0.0), size[0]), min(max(y, 0.0), size[1])
    x2, y2 = min(max(x + w, 0.0), size[0]), min(max(y + h, 0.0), size[1])
    if (x1, y1, x2, y2) != (x, y, x + w, y + h):
        tally["clipped"] += 1
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        tally["zero-area"] += 1
        return None
    if (x1, y1, x2 - x1, y2 - y1) == (x, y, w, h):
        return annotation
    return {**annotation, "bbox": [x1, y1, x2 - x1, y2 - y1]}


def _with_mask(annotation: JsonObject, size: tuple[int, int], where: str) -> JsonObject:
    """The annotation with its segmentation checked (polygons: x y pairs, 3 points or more; RLE: the image's
    size) and its area the mask's where the file gives none."""
    said = f"{where}: annotation id {annotation['id']}"
    segmentation = annotation.get("segmentation")
    if isinstance(segmentation, list) and segmentation:
        for number, polygon in enumerate(segmentation, 1):
            if not (isinstance(polygon, list) and all(_number(v) for v in polygon)):
                raise DataError(f"{said}: segmentation polygon {number} must be a list of numbers x1, y1, x2, y2, "
                                f"..., found {str(polygon)[:80]}")
            if len(polygon) % 2:
                raise DataError(f"{said}: segmentation polygon {number} has {len(polygon)} values, an odd number: "
                                "a polygon is x y pairs")
            if len(polygon) < 6:
                raise DataError(f"{said}: segmentation polygon {number} has {len(polygon) // 2} point(s): a polygon "
                                "needs 3 or more")
    elif isinstance(segmentation, dict):
        rle_size, counts = segmentation.get("size"), segmentation.get("counts")
        if rle_size != [size[1], size[0]]:
            raise DataError(f"{said}: its RLE 'size' {rle_size!r} is not the image's [height, width] "
                            f"[{size[1]}, {size[0]}]")
        if not (isinstance(counts, str) or (isinstance(counts, list) and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts))):
            raise DataError(f"{said}: its RLE 'counts' must be a COCO RLE string or a list of run lengths")
    else:
        found = "none" if segmentation in (None, []) else f"{str(segmentation)[:60]!r}"
        raise DataError(f"{said}: a segmentation model needs its mask as 'segmentation' (polygons [[x1, y1, ...]] "
                        f"or RLE {{'size', 'counts'}}), found {found}",
                        hint="use the instances_*.json with masks, not a boxes-only file")
    if _number(annotation.get("area")) and annotation["area"] >= 0:
        return annotation
    return {**annotation, "area": mask_area(segmentation, *size)}


def _keypoint_names(categories: list[Any], ids: set[int], where: str) -> list[str]:
    """The keypoint names of the task's categories (one list for all of them: a pose model has one kpt_shape)."""
    found: dict[int, list[str]] = {}
    for category in categories:
        if _whole(category["id"]) not in ids:
            continue
        names = category.get("keypoints")
        if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
            raise DataError(f"{where}: category {category['name']!r} (id {category['id']}) has no 'keypoints' (the "
                            f"names of its keypoints): a pose model needs COCO keypoint annotations",
                            hint="use the person_keypoints_*.json form: categories with 'keypoints' and 'skeleton'")
        found[_whole(category["id"])] = names
    counts = {len(n) for n in found.values()}
    if len(counts) > 1:
        raise DataError(f"{where}: the task's categories have {sorted(counts)} keypoints: a pose model predicts one "
                        "number of keypoints for every class")
    return next(iter(found.values()))


def _with_keypoints(annotation: JsonObject, count: int, where: str, tally: Counter[str]) -> JsonObject:
    """The annotation with its keypoints checked (``count`` x, y, v; v 0, 1 or 2) and num_keypoints counted."""
    said = f"{where}: annotation id {annotation['id']}"
    keypoints = annotation.get("keypoints")
    if not (isinstance(keypoints, list) and all(_number(v) for v in keypoints)):
        raise DataError(f"{said}: a pose model needs 'keypoints' [x1, y1, v1, ...] on every object, found "
                        f"{'none' if keypoints is None else str(keypoints)[:60]}")
    if len(keypoints) != 3 * count:
        raise DataError(f"{said}: {len(keypoints)} keypoint values, its category names {count} keypoints "
                        f"({3 * count} values: x, y, v each)")
    bad = [(i // 3 + 1, v) for i, v in enumerate(keypoints) if i % 3 == 2 and v not in (0, 1, 2)]
    if bad:
        raise DataError(f"{said}: keypoint {bad[0][0]} has visibility {bad[0][1]}; it must be 0 (not labelled), "
                        "1 (labelled, not visible) or 2 (visible)")
    labelled = sum(1 for v in keypoints[2::3] if v > 0)
    if annotation.get("num_keypoints") == labelled:
        return annotation
    if "num_keypoints" in annotation:
        tally["recounted"] += 1
    return {**annotation, "num_keypoints": labelled}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> int:
    try:
        whole = not isinstance(value, bool) and isinstance(value, int | float | str) \
            and float(value) == int(float(value))
    except (ValueError, OverflowError):
        whole = False
    if not whole:
        raise ValueError(f"not a whole number: {value!r}")
    return int(float(value))


def _missing(exc: Exception) -> str:
    return f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
