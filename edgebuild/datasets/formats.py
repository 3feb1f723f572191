"""Which format the project's data is in: declared by ``data.format``, or told by the files themselves.

Two ways to name the data (``edgebuild.project.schema.DataSection``):

- ``[data] dataset``: a dataset with splits. A YOLO ``data.yaml`` (or a folder holding one), a
  Pascal VOC root (``Annotations/``, ``JPEGImages/``, ``ImageSets/Main/<split>.txt``) or, for
  classification, a folder of split folders of class folders. Calibration comes from its
  ``calibration_split``, validation from its ``validation_split``.
- ``[data.validation]`` (+ ``[data] calibration_images``): a COCO JSON file or a folder of VOC XML
  files as ``annotations`` with a folder of ``images``; for classification, class folders.

A file of one format given where another is expected is refused with what it is and which key
takes it (``misplaced``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from edgebuild.datasets.images import IMAGE_SUFFIXES
from edgebuild.errors import DataError

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["what_is"]

TITLES = {"yolo": "YOLO data.yaml", "coco": "COCO JSON", "voc": "Pascal VOC", "folders": "class folders"}
_YAML = (".yaml", ".yml")
_YOLO_KEYS = ("train", "val", "names", "nc")

# what each kind of thing is, and which key takes it
_TAKES = {
    "yolo": ("a YOLO data.yaml", "data.dataset takes it (its validation_split, default 'val', is the validation "
             "set and its calibration_split, default 'train', the calibration images), in place of "
             "data.validation.images/annotations"),
    "coco": ("a COCO annotations file", "data.validation.annotations takes it, with its images folder as "
             "data.validation.images"),
    "voc-file": ("one Pascal VOC annotation (XML)", "data.validation.annotations takes the folder of XML files "
                 "(data.validation.images the JPEGImages folder), or data.dataset the VOC root (the folder with "
                 "Annotations/ and JPEGImages/)"),
    "voc-root": ("a Pascal VOC root (Annotations/, JPEGImages/)", "data.dataset takes it (its splits are "
                 "ImageSets/Main/<split>.txt), or data.validation.annotations its Annotations/ folder with "
                 "data.validation.images its JPEGImages/ folder"),
    "voc-folder": ("a folder of Pascal VOC XML files", "data.validation.annotations takes it, with the images "
                   "folder as data.validation.images"),
    "split-folders": ("a folder of split folders", "data.dataset takes it (classification: <split>/<class>/ "
                      "images)"),
    "class-folders": ("a folder of class folders", "data.validation.images takes it (classification)"),
    "images": ("a folder of images", "data.calibration_images takes it (calibration), or "
               "data.validation.images with annotations"),
}


@dataclass(frozen=True)
class DataFormat:
    """The validation data's format and where it is."""

    name: str  # yolo, coco, voc, folders
    key: str  # the project key that names it: data.dataset, data.validation.annotations or data.validation.images
    path: Path  # what that key names (a data.yaml found in a folder replaces the folder)
    told: str  # what said so: "data.format", or what about the files
    images: Path | None = None  # data.validation.images, for the sets that take their images from there

    @property
    def title(self) -> str:
        return TITLES[self.name]

    @property
    def has_splits(self) -> bool:
        return self.key == "data.dataset"


def what_is(path: Path) -> tuple[str | None, str]:
    """(kind, description) of a file or folder, for detection and for saying what a misplaced one is;
    kind is one of ``_TAKES``' keys, or None for anything else."""
    if path.is_dir():
        return _folder_kind(path)
    if not path.is_file():
        return None, "missing"
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return None, "an image"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if head.startswith(b"<"):
        return ("voc-file", _TAKES["voc-file"][0]) if b"<annotation" in head else (None, "an XML file")
    if head.startswith((b"{", b"[")):
        if any(k in head for k in (b'"images"', b'"annotations"', b'"categories"')):
            return "coco", _TAKES["coco"][0]
        return None, "a JSON file"
    if suffix in _YAML or (suffix not in (".json", ".txt") and path.stat().st_size < 1 << 20):
        if _yolo_yaml(path):
            return "yolo", _TAKES["yolo"][0]
        if suffix in _YAML:
            return None, "a YAML file without train/val keys"
    return None, f"a {suffix or 'suffix-less'} file"


def _yolo_yaml(path: Path) -> bool:
    import yaml

    try:
        text = path.read_text(encoding="utf-8-sig")
    except (UnicodeDecodeError, OSError):
        return False
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:  # a data.yaml with a syntax error is still one: its reader names the line
        return sum(bool(re.search(rf"^\s*{k}\s*:", text, re.MULTILINE)) for k in _YOLO_KEYS) >= 2
    return isinstance(data, dict) and sum(k in data for k in _YOLO_KEYS) >= 2


def _folder_kind(path: Path) -> tuple[str | None, str]:
    if (path / "Annotations").is_dir():
        return "voc-root", _TAKES["voc-root"][0]
    yamls = sorted(p for p in path.iterdir() if p.suffix.lower() in _YAML and p.is_file())
    if len(yamls) == 1 and _yolo_yaml(yamls[0]):
        return "yolo", f"a folder holding the YOLO data.yaml {yamls[0].name}"
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    if any(p.suffix.lower() == ".xml" for p in entries):
        return "voc-folder", _TAKES["voc-folder"][0]
    folders = [p for p in entries if p.is_dir()]
    if folders and all(any(q.is_dir() for q in f.iterdir()) for f in folders):
        return "split-folders", _TAKES["split-folders"][0]
    if folders:
        return "class-folders", _TAKES["class-folders"][0]
    if any(p.suffix.lower() in IMAGE_SUFFIXES for p in entries):
        return "images", _TAKES["images"][0]
    return None, "a folder of neither images nor annotations"


@overload
def misplaced(path: Path, key: str, expected: str, quiet: Literal[False] = False) -> str: ...
@overload
def misplaced(path: Path, key: str, expected: str, quiet: bool) -> str | None: ...
def misplaced(path: Path, key: str, expected: str, quiet: bool = False) -> str | None:
    """What ``path`` is and which key takes it, when it is not ``expected`` (None if quiet and unknown)."""
    kind, description = what_is(path)
    if kind is None:
        return None if quiet else f"{key}: {path} is {description}, not {expected}"
    return f"{key}: {path} is {description}, not {expected}: {_TAKES[kind][1]}"


def data_format(project: Project) -> DataFormat:
    """The format of the validation data: ``data.format`` where declared (checked against the files),
    else what the files say. A DataError names the key and what was found."""
    data = project.data
    declared = data.format
    if data.dataset is not None:
        return _dataset_format(project.path(data.dataset), declared, project.task.kind)
    val = data.validation
    images = project.path(val.images or "")
    if project.task.kind == "classification":
        return DataFormat("folders", "data.validation.images", images, "data.format" if declared else
                          "task.kind classification", images)
    key = "data.validation.annotations"
    path = project.path(val.annotations or "")
    kind, description = what_is(path)
    if kind in ("yolo", "voc-root", "voc-file", "split-folders", "images", "class-folders") or (
            kind is None and path.is_dir()):
        raise DataError(f"{key}: {path} is {description}, not a COCO JSON file or a folder of Pascal VOC XML files"
                        + (f": {_TAKES[kind][1]}" if kind else ""))
    found = "voc" if kind == "voc-folder" else "coco"
    _refuse_for_task(found, project.task.kind, key, path, description)
    told = description if kind else "a file"
    if declared and declared != found:
        raise DataError(f"{key}: data.format is {declared!r}, but {path} is {description} ({TITLES[found]})",
                        hint="remove data.format (the files say what they are) or point the key at the right data")
    return DataFormat(found, key, path, "data.format" if declared else told, images)


def _dataset_format(path: Path, declared: str | None, task: str) -> DataFormat:
    key = "data.dataset"
    if not path.exists():
        raise DataError(f"{key}: path does not exist: {path}")
    kind, description = what_is(path)
    nested = sorted(c.name for c in path.iterdir() if (c / "Annotations").is_dir()) \
        if kind in (None, "split-folders", "class-folders") and path.is_dir() else []
    if nested:  # VOCdevkit/ named for VOCdevkit/VOC2012/
        raise DataError(f"{key}: {path} holds the Pascal VOC root(s) {nested}, not a dataset itself",
                        hint=f"point data.dataset at the VOC root: {path / nested[0]}")
    found = {"yolo": "yolo", "voc-root": "voc", "split-folders": "folders", "class-folders": "folders"}.get(kind or "")
    if kind == "yolo" and path.is_dir():
        path = next(p for p in sorted(path.iterdir()) if p.suffix.lower() in _YAML and p.is_file())
    if found is None and declared is None:
        other = f": {_TAKES[kind][1]}" if kind in _TAKES else ""
        raise DataError(f"{key}: {path} is {description}, not a dataset edgebuild reads (a YOLO data.yaml, a Pascal "
                        f"VOC root with Annotations/ and JPEGImages/, or for classification a folder of split "
                        f"folders of class folders){other}",
                        hint='set data.format ("yolo", "voc" or "folders") if it is one of them')
    if declared and found and declared != found:
        raise DataError(f"{key}: data.format is {declared!r}, but {path} is {description} ({TITLES[found]})",
                        hint="remove data.format (the files say what they are) or point data.dataset at the right data")
    name = declared or found or ""
    _refuse_for_task(name, task, key, path, description)
    told = "data.format" if declared else description
    return DataFormat(name, key, path, told)


#: what each task needs that Pascal VOC (boxes only) or COCO JSON (no oriented boxes) lacks
_NEEDS = {"segmentation": "polygons or masks: a YOLO segmentation data.yaml, or COCO JSON with 'segmentation'",
          "pose": "keypoints: a YOLO pose data.yaml with kpt_shape, or COCO JSON with 'keypoints' "
                  "(person_keypoints_*.json)",
          "obb": "oriented boxes: a YOLO OBB data.yaml (class x1 y1 x2 y2 x3 y3 x4 y4)"}


def _refuse_for_task(name: str, task: str, key: str, path: Path, description: str) -> None:
    """Data of a format that cannot hold what ``task`` (task.kind) is measured on is a DataError saying what can."""
    if (name == "folders") != (task == "classification"):
        wanted = "classification" if name == "folders" else "detection"
        raise DataError(f"{key}: {path} is {description}, {wanted} data; task.kind is {task!r}")
    if (name == "voc" and task in _NEEDS) or (name == "coco" and task == "obb"):
        holds = "Pascal VOC holds axis-aligned boxes only" if name == "voc" else "COCO JSON has no oriented boxes"
        raise DataError(f"{key}: {path} is {description}: {holds}; task.kind {task!r} needs {_NEEDS[task]}")
