"""``edgebuild init --data PATH``: what a dataset says (its format, class names, task and ``[data]`` keys).

A YOLO data.yaml, a Pascal VOC root, a COCO JSON with its images, or split folders of class folders,
each read as ``edgebuild check`` will read it, so a dataset init accepts is one the build reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgebuild.errors import DataError

__all__ = []


@dataclass
class FoundData:
    task: str
    title: str
    names: list[str]
    names_said: str
    data: dict[str, str]  # [data] keys (paths absolute until made relative)
    validation: dict[str, str]


def read_data(path: Path) -> FoundData:
    from edgebuild.datasets.formats import what_is

    if not path.exists():
        raise DataError(f"--data: path does not exist: {path}")
    kind, description = what_is(path)
    roots = sorted(c for c in path.iterdir() if c.is_dir() and (c / "Annotations").is_dir()) \
        if kind in (None, "split-folders", "class-folders") and path.is_dir() else []
    if roots:  # VOCdevkit/ given for VOCdevkit/VOC2012/
        raise DataError(f"--data: {path} holds the Pascal VOC root(s) {[r.name for r in roots]}, not a dataset "
                        "itself", hint=f"pass the VOC root: --data {roots[0]}")
    if kind == "yolo":
        return _yolo(path)
    if kind == "voc-root":
        return _voc(path)
    if kind == "coco":
        return _coco(path)
    if kind == "split-folders":
        return _split_folders(path)
    if kind == "class-folders":
        raise DataError(f"--data: {path} is a folder of class folders, one set: edgebuild needs a calibration set "
                        "apart from the validation set",
                        hint="make split folders (train/<class>/, val/<class>/) and pass the folder holding them")
    raise DataError(f"--data: {path} is {description}, not a dataset edgebuild reads: a YOLO data.yaml, a "
                    "Pascal VOC root (Annotations/, JPEGImages/, ImageSets/Main/), a COCO JSON file with its "
                    "images, or split folders of class folders (train/<class>/, val/<class>/)")


def _yolo(path: Path) -> FoundData:
    from edgebuild.datasets.yolo import load_yolo_set, read_data_yaml, split_images

    if path.is_dir():
        path = next(p for p in sorted(path.iterdir()) if p.suffix.lower() in (".yaml", ".yml") and p.is_file())
    data = read_data_yaml(path, key="--data")
    load_yolo_set(path, "val", data.names, key="--data")  # what `check` reads: every val label, train's images
    split_images(data, "train", key="--data")
    said = f"from {path.name}" if data.names_given else f"{path.name} has only nc: {len(data.names)}, no names"
    return FoundData("detection", "YOLO data.yaml", data.names, said,
                 {"dataset": str(path), "calibration_split": "train", "validation_split": "val"}, {})


def yolo_data_for_task(found: FoundData, task: str) -> FoundData:
    """A YOLO dataset read for a pose, segmentation or OBB model: its val labels must hold the task's (the reader
    names the file and line of one that does not)."""
    from dataclasses import replace

    from edgebuild.datasets.yolo import load_yolo_set

    load_yolo_set(Path(found.data["dataset"]), "val", found.names, key="--data", task=task)
    return replace(found, task=task, title=f"YOLO data.yaml ({task})")


def _voc(root: Path) -> FoundData:
    from edgebuild.datasets.voc import load_voc_root, voc_object_files, voc_split_images

    lists = root / "ImageSets" / "Main"
    missing = [s for s in ("train", "val") if not (lists / f"{s}.txt").is_file()]
    if missing:
        raise DataError(f"--data: {root} is a Pascal VOC root without the split list(s) "
                        f"{', '.join(f'ImageSets/Main/{s}.txt' for s in missing)}",
                        hint="write the image ids of each split there, one a line")
    names = sorted(voc_object_files(root, "val", "--data"))
    load_voc_root(root, "val", names, key="--data")  # what `check` reads: every XML file of val, train's images
    voc_split_images(root, "train", key="--data")
    return FoundData("detection", "Pascal VOC root", names,
                 f"the object names of {root.name}'s val split, sorted", {"dataset": str(root),
                 "calibration_split": "train", "validation_split": "val"}, {})


def _coco(path: Path) -> FoundData:
    from edgebuild.datasets.coco import coco_beside, read_coco

    names, images, calibration = coco_beside(path, "--data")
    read_coco(path, images, names, key="--data")  # what `check` reads: every image and annotation entry
    return FoundData("detection", "COCO JSON", names, f"the categories of {path.name}",
                 {"calibration_images": str(calibration)},
                 {"annotations": str(path), "images": str(images)})


def _split_folders(root: Path) -> FoundData:
    from edgebuild.datasets.folders import load_class_folders
    from edgebuild.datasets.images import list_images

    missing = [s for s in ("train", "val") if not (root / s).is_dir()]
    if missing:
        present = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise DataError(f"--data: {root} has no {' or '.join(repr(m) for m in missing)} split folder "
                        f"(found: {present})", hint="name the split folders train/ and val/")
    names = sorted(p.name for p in (root / "val").iterdir() if p.is_dir() and not p.name.startswith("."))
    load_class_folders(root / "val", names, key="--data")  # what `check` reads: images in every class, in train
    list_images(root / "train", "--data")
    return FoundData("classification", "split folders of class folders", names,
                 f"the class folders of {root.name}/val, sorted",
                 {"dataset": str(root), "calibration_split": "train", "validation_split": "val"}, {})
