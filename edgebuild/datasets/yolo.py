"""Ultralytics YOLO detection data: a ``data.yaml`` naming split folders or image lists, one label file per image.

The splits are resolved as Ultralytics' ``check_det_dataset`` and ``img2label_paths`` resolve them:

- the dataset root is ``path`` (relative: against the data.yaml's folder; unset: that folder);
- a split (``train``, ``val``, ``test``; ``validation`` is read as ``val``) is a folder (every image
  under it, recursively, hidden files left out), a ``.txt`` list of image paths (``./`` lines are
  relative to the list) or a list of either; a relative split is taken against the root, and one
  starting ``../`` that does not exist there is tried without it;
- an image's labels are in the file found by replacing the last ``/images/`` of its path with
  ``/labels/`` and its suffix with ``.txt``; no label file means no objects;
- ``names`` is a list or a dict {id: name} with ids 0..n-1 (``nc`` alone: the model's names where
  it has them, as Ultralytics takes them, else class_0...).

A label line is ``class cx cy w h``, normalised to [0, 1] by the image's width and height (for
detection a polygon ``class x1 y1 x2 y2 ...`` counts as its bounding box; with ``kpt_shape`` the
keypoints after the box are skipped). Each becomes a COCO box [x, y, w, h] in pixels from the
image's top-left corner. Read for segmentation, pose or OBB, a line is that task's label
(``task_labels``): a polygon, a box with keypoints, 4 corners.
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from edgebuild.datasets.images import CocoSet, Sample, image_size, image_stem, refuse_duplicate_stems, spread
from edgebuild.datasets.task_labels import LabelLayout, model_of, read_objects, refuse_task, to_annotation
from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject

__all__ = ["load_yolo_set", "read_data_yaml", "split_images"]

#: the suffixes Ultralytics takes as images (ultralytics.data.utils.IMG_FORMATS)
IMG_FORMATS = {"avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp"}
_SPLIT_KEYS = ("train", "val", "test", "minival")


@dataclass(frozen=True)
class Keypoints:
    """A pose data.yaml's keypoint keys, checked: ``kpt_shape`` [K, 2|3], ``flip_idx`` (each keypoint's mirror),
    ``kpt_names`` {class id: K names}, ``kpt_oks_sigmas`` (K, for OKS; None: Ultralytics' default)."""

    shape: tuple[int, int]
    flip_idx: tuple[int, ...] | None = None
    names: dict[int, list[str]] | None = None
    oks_sigmas: tuple[float, ...] | None = None


@dataclass(frozen=True)
class YoloData:
    path: Path  # the data.yaml
    root: Path  # its `path`, resolved
    names: list[str]
    splits: dict[str, list[Path]]  # split -> the folders and .txt lists it names, resolved
    extra_fields: int  # keypoint values after the box on every label line (kpt_shape), else 0
    names_given: bool = True  # False: only 'nc' (names are class_0...; Ultralytics then takes the model's)
    keypoints: Keypoints | None = None  # kpt_shape and what goes with it

    def where(self, split: str) -> str:
        return f"{self.path}: {split}"


def read_data_yaml(path: Path, key: str = "data.dataset") -> YoloData:
    import yaml

    try:
        text = path.read_text(encoding="utf-8-sig")
        data = yaml.safe_load(text)
    except FileNotFoundError:
        raise DataError(f"{key}: file not found: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{key}: {path} is a folder, not a YOLO data.yaml") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise DataError(f"{key}: {path} is not valid YAML{at}: {exc.problem or exc.context}",
                        hint="fix the YAML syntax there (indentation, a ':' after each key, quotes)") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DataError(f"{key}: {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise DataError(f"{key}: {path} is not a YOLO data.yaml: needs a mapping with 'train', 'val' and 'names'")
    if "val" not in data and "validation" in data:
        data["val"] = data.pop("validation")
    missing = [k for k in ("train", "val") if k not in data]
    if missing:
        raise DataError(f"{key}: {path}: {' and '.join(repr(m) for m in missing)} missing; a YOLO data.yaml needs "
                        "'train' and 'val' (and 'names')")
    names = _names(data, path, key)
    raw_root = data.get("path")
    if raw_root is not None and not isinstance(raw_root, str):
        raise DataError(f"{key}: {path}: 'path' must be a folder name, found {raw_root!r}")
    root = path.parent.resolve() / (raw_root or "")
    root = root.resolve()
    splits: dict[str, list[Path]] = {}
    for split in _SPLIT_KEYS:
        value = data.get(split)
        if not value:
            continue
        if isinstance(value, str):
            entry = (root / value).resolve()
            if not entry.exists() and value.startswith("../"):
                entry = (root / value[3:]).resolve()
            splits[split] = [entry]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            splits[split] = [(root / v).resolve() for v in value]
        else:
            raise DataError(f"{key}: {path}: {split!r} must be a folder, an image list (.txt) or a list of them, "
                            f"found {value!r}")
    keypoints = _keypoints(data, len(names), f"{key}: {path}")
    extra = keypoints.shape[0] * keypoints.shape[1] if keypoints else 0
    return YoloData(path, root, names, splits, extra, data.get("names") is not None, keypoints)


def _keypoints(data: JsonObject, classes: int, where: str) -> Keypoints | None:
    """The data.yaml's kpt_shape, flip_idx, kpt_names and kpt_oks_sigmas, checked against each other."""
    kpt = data.get("kpt_shape")
    if kpt is None:
        return None
    if not (isinstance(kpt, list) and len(kpt) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in kpt) and kpt[0] > 0 and kpt[1] in (2, 3)):
        raise DataError(f"{where}: 'kpt_shape' must be [keypoints, 2 or 3] (2: x y, 3: x y visibility), "
                        f"found {kpt!r}")
    count = kpt[0]
    flip = data.get("flip_idx")
    if flip is not None and flip != []:
        if not (isinstance(flip, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in flip)):
            raise DataError(f"{where}: 'flip_idx' must be a list of keypoint indices, found {flip!r}")
        if len(flip) != count or sorted(flip) != list(range(count)):
            raise DataError(f"{where}: 'flip_idx' {flip} must name each of the {count} keypoints (kpt_shape "
                            f"{kpt}) once: keypoint i becomes flip_idx[i] when the image is mirrored",
                            hint=f"list {count} indices 0..{count - 1}: at a left eye's place the right eye's index")
    sigmas = data.get("kpt_oks_sigmas")
    if sigmas is not None and not (isinstance(sigmas, list) and len(sigmas) == count and all(
            isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in sigmas)):
        raise DataError(f"{where}: 'kpt_oks_sigmas' must be {count} positive numbers (one per keypoint), "
                        f"found {sigmas!r}")
    names = data.get("kpt_names")
    by_class: dict[int, list[str]] | None = None
    if names is not None:
        ok = isinstance(names, dict) and all(isinstance(v, list) and len(v) == count for v in names.values())
        try:
            by_class = {int(k): [str(n) for n in v] for k, v in names.items()} if ok else None
        except (TypeError, ValueError):
            by_class = None
        if by_class is None or not all(0 <= k < classes for k in by_class):
            raise DataError(f"{where}: 'kpt_names' must be {{class id: [{count} keypoint names]}}, found {names!r}")
    return Keypoints((count, kpt[1]), tuple(flip) if flip else None, by_class,
                     tuple(float(v) for v in sigmas) if sigmas else None)


def _names(data: JsonObject, path: Path, key: str) -> list[str]:
    names, nc = data.get("names"), data.get("nc")
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int | float) or nc != int(nc) or nc < 1):
        raise DataError(f"{key}: {path}: 'nc' must be a whole number of classes, found {nc!r}")
    if names is None:
        if nc is None:
            raise DataError(f"{key}: {path}: 'names' missing (a list of class names, or {{id: name}})")
        return [f"class_{i}" for i in range(int(nc))]
    if isinstance(names, list):
        result = [str(n) for n in names]
    elif isinstance(names, dict):
        try:
            by_id = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            raise DataError(f"{key}: {path}: 'names' keys must be class ids 0..n-1, found {list(names)}") from None
        if sorted(by_id) != list(range(len(by_id))):
            raise DataError(f"{key}: {path}: 'names' needs ids 0..{len(by_id) - 1}, found {sorted(by_id)}")
        result = [by_id[i] for i in range(len(by_id))]
    else:
        raise DataError(f"{key}: {path}: 'names' must be a list or a dict {{id: name}}, found {names!r}")
    if not result:
        raise DataError(f"{key}: {path}: 'names' is empty")
    if nc is not None and int(nc) != len(result):
        raise DataError(f"{key}: {path}: 'names' has {len(result)} classes but 'nc' is {nc}")
    at: dict[str, list[int]] = {}
    for index, name in enumerate(result):
        at.setdefault(name, []).append(index)
    twice = {name: indices for name, indices in at.items() if len(indices) > 1}
    if twice:  # task.classes are these names: refused here, where they are written, not in a project file
        listed = "; ".join(f"{name!r} at ids {', '.join(map(str, indices))}" for name, indices in twice.items())
        raise DataError(f"{key}: {path}: 'names' lists a class name more than once: {listed}",
                        hint="give each class id its own name, in the order the model was trained with (each id "
                             "is one of the model's outputs)")
    return result


def split_images(data: YoloData, split: str, key: str = "data.dataset") -> tuple[list[Path], list[Path]]:
    """The images of ``split`` in Ultralytics' order (sorted paths), and the image lists read for them."""
    entries = data.splits.get(split)
    if not entries:
        named = sorted(data.splits)
        raise DataError(f"{key}: {data.path} has no {split!r} split (splits: {', '.join(named) or 'none'})")
    found: list[str] = []
    lists: list[Path] = []
    for entry in entries:
        if entry.is_dir():
            found += glob.glob(str(Path(glob.escape(str(entry))) / "**" / "*.*"), recursive=True)
        elif entry.is_file():
            lists.append(entry)
            found += _listed(entry, key)
        else:
            raise DataError(f"{key}: {data.where(split)}: {entry} does not exist")
    images = sorted(x for x in found if x.rpartition(".")[-1].lower() in IMG_FORMATS)
    if not images:
        raise DataError(f"{key}: {data.where(split)}: no images ({', '.join(sorted(IMG_FORMATS))}) in "
                        f"{', '.join(str(e) for e in entries)}")
    paths = [Path(x) for x in images]
    refuse_duplicate_stems(paths, key, data.where(split))
    return paths, lists


def _listed(listing: Path, key: str) -> list[str]:
    """The image paths of a .txt list: ``./x`` and other relative lines against the list's folder."""
    try:
        lines = listing.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{key}: {listing}: not a UTF-8 image list: {exc}") from None
    parent = listing.parent
    found = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        path = os.path.normpath(os.path.join(parent, line[2:] if line.startswith("./") else line))
        if line.rpartition(".")[-1].lower() in IMG_FORMATS and not os.path.isfile(path):
            raise DataError(f"{key}: {listing}:{number}: image {path} does not exist")
        found.append(path)
    return found


def label_path(image: Path) -> Path:
    """Ultralytics' img2label_paths: the last /images/ becomes /labels/, the suffix .txt."""
    images, labels = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return Path(labels.join(str(image).rsplit(images, 1)).rsplit(".", 1)[0] + ".txt")


def read_labels(path: Path, classes: int, extra_fields: int = 0, key: str = "data.dataset",
                tally: Counter[str] | None = None) -> list[tuple[int, float, float, float, float]]:
    """(class, cx, cy, w, h) of each line of a detection label file, normalised, clipped to the image
    (``task_labels.read_objects``; ``extra_fields``: keypoint values after the box, skipped)."""
    layout = LabelLayout("detection", (extra_fields, 1) if extra_fields else None)
    return [(o.label, *o.box) for o in read_objects(path, classes, layout, key, tally)]


def _box_notes(tally: Counter[str], where: str) -> tuple[str, ...]:
    """What reading the labels did, with counts: boxes clipped to the image, dropped, lines counted once."""
    said = {"clipped": "box(es) reach past the image edge: clipped to the image",
            "zero-area": "box(es) of zero width or height: dropped (no detection can match them)",
            "duplicate": "label line(s) repeated exactly: counted once, as Ultralytics does",
            "not-rectangle": "oriented box(es) whose 4 corners are not a rectangle: taken as the smallest rectangle "
                             "holding them, as Ultralytics does (cv2.minAreaRect)",
            "orphan": "label file(s) without an image: not read (as Ultralytics does)"}
    return tuple(f"{where}: {tally[k]} {text}" for k, text in said.items() if tally.get(k))


def load_yolo_set(yaml_path: Path, split: str, classes: list[str], limit: int | None = None,
                  key: str = "data.dataset", task: str = "detection") -> CocoSet:
    """A split of a YOLO dataset in COCO form; its names must be ``classes``, in order. ``limit`` keeps
    that many images, evenly spread over the split by file name (``images.spread``). ``task``: what the
    label lines hold (``task_labels``); pose needs the data.yaml's kpt_shape."""
    refuse_task(task, key)
    data = read_data_yaml(yaml_path, key)
    if task == "pose" and data.keypoints is None:
        raise DataError(f"{key}: {yaml_path} has no 'kpt_shape': {model_of(task)} needs it ([keypoints, 2 or 3]) and "
                        "label lines of class cx cy w h followed by the keypoints",
                        hint="a detection data.yaml cannot validate a pose model: use the pose dataset it was "
                             "trained on")
    layout = LabelLayout(task, data.keypoints.shape if data.keypoints else None)
    unnamed = not data.names_given and len(data.names) == len(classes)
    if unnamed:  # only nc: Ultralytics names the classes by the model's names; so do task.classes
        data = replace(data, names=list(classes))
    if data.names != list(classes):
        raise DataError(f"{key}: {yaml_path} names {data.names} differ from task.classes {list(classes)}: the model "
                        "predicts task.classes in order, and a YOLO model the names of the data.yaml it was trained on",
                        hint="make task.classes the data.yaml's names, in their order")
    images, lists = split_images(data, split, key)
    _refuse_without_labels(data, split, images, key)
    available, every = len(images), images
    images = spread(images, limit, image_stem)
    records: list[JsonObject] = []
    annotations: list[JsonObject] = []
    read: list[Path] = []
    tally: Counter[str] = Counter()
    for image_id, image in enumerate(images, 1):
        width, height = image_size(image, key)
        records.append({"id": image_id, "file_name": image.name, "width": width, "height": height})
        labels = label_path(image)
        if not labels.is_file():
            continue  # no label file: an image without objects
        read.append(labels)
        for obj in read_objects(labels, len(data.names), layout, key, tally):
            fields = to_annotation(obj, layout, width, height, tally)
            if fields is not None:
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": obj.label + 1,
                                    **fields, "iscrowd": 0})
    tally["orphan"] = _orphans(every)
    ground_truth: JsonObject = {"images": records, "annotations": annotations,
                                "categories": [{"id": i + 1, "name": n} for i, n in enumerate(data.names)]}
    keypoints = data.keypoints if task == "pose" else None
    if keypoints is not None:
        ground_truth.update(_pose_keys(keypoints))
        for category in ground_truth["categories"]:
            if keypoints.names and category["id"] - 1 in keypoints.names:
                category["keypoints"] = keypoints.names[category["id"] - 1]
    samples = [Sample(image, i) for i, image in enumerate(images, 1)]
    notes = _box_notes(tally, f"{yaml_path.name} {split}")
    if unnamed:
        notes = (f"{yaml_path.name}: no 'names', only nc: {len(classes)}: its classes are taken as task.classes "
                 f"{list(classes)} (as Ultralytics takes the model's names)", *notes)
    return CocoSet(yaml_path, ground_truth, samples, list(range(1, len(classes) + 1)), "yolo",
                   tuple([*lists, *read]), available, notes, task,
                   keypoints.shape if keypoints else None, keypoints.flip_idx if keypoints else None)


def _pose_keys(keypoints: Keypoints) -> JsonObject:
    """The ground truth's top-level keypoint keys: kpt_shape, flip_idx (None: none), kpt_oks_sigmas if given."""
    keys: JsonObject = {"kpt_shape": list(keypoints.shape),
                        "flip_idx": list(keypoints.flip_idx) if keypoints.flip_idx else None}
    if keypoints.oks_sigmas:
        keys["kpt_oks_sigmas"] = list(keypoints.oks_sigmas)
    return keys


def _refuse_without_labels(data: YoloData, split: str, images: list[Path], key: str) -> None:
    """A split none of whose images has a label file: most likely no labels/ folder beside images/."""
    if any(label_path(image).is_file() for image in images):
        return
    expected = label_path(images[0])
    folder = expected.parent
    if f"{os.sep}images{os.sep}" not in str(images[0]):
        why = (f"its images are not under an images/ folder ({images[0].parent}), so Ultralytics looks for each "
               "image's labels beside it")
    elif not folder.is_dir():
        why = f"there is no labels folder {folder} (the images' path with /images/ replaced by /labels/)"
    else:
        why = f"{folder} holds no label file of them (e.g. {expected.name})"
    raise DataError(f"{key}: {data.where(split)}: none of its {len(images)} images has a label file: {why}",
                    hint="put one .txt label file per image in a labels/ folder beside images/ "
                         "(images/val/a.jpg -> labels/val/a.txt)")


def _orphans(images: list[Path]) -> int:
    """Label files in the images' label folders that no image of the split reads."""
    wanted = {label_path(image) for image in images}
    folders = {path.parent for path in wanted if path.parent.is_dir()}
    labels, images_of = f"{os.sep}labels{os.sep}", f"{os.sep}images{os.sep}"
    count = 0
    for folder in folders:
        beside = Path(images_of.join(f"{folder}{os.sep}".rsplit(labels, 1)).rstrip(os.sep))
        stems = {p.stem for p in beside.iterdir() if p.suffix[1:].lower() in IMG_FORMATS} if beside.is_dir() else set()
        count += sum(1 for path in folder.glob("*.txt") if path not in wanted and path.stem not in stems)
    return count
