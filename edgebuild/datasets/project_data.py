"""The project's image data, whatever its format: the validation set in its one internal form, the
calibration images, their content digests, what the data is (``describe_data``) and ``data.prepare``.

Which format the data is in (``edgebuild.datasets.formats``): a YOLO data.yaml (``yolo.py``), COCO
JSON (``coco.py``), Pascal VOC (``voc.py``) or class folders (``folders.py``). Each reader returns
the same thing: for detection a ``CocoSet`` (COCO ground truth, samples, category ids in
``task.classes`` order), for classification a list of ``Sample``; calibration is a list of images.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.datasets.coco import read_coco
from edgebuild.datasets.folders import balanced_images, load_class_folders, split_folder
from edgebuild.datasets.formats import DataFormat, data_format
from edgebuild.datasets.images import (
    CocoSet,
    Sample,
    cap,
    image_stem,
    list_images,
    read_image,
    relative_name,
    spread,
)
from edgebuild.datasets.voc import load_voc_folder, load_voc_root, voc_split_images
from edgebuild.datasets.yolo import load_yolo_set, read_data_yaml, split_images
from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["Sample", "calibration_digest", "calibration_images", "read_data", "list_images", "load_coco_set",
           "load_validation_set", "missing_data", "prepare_data", "read_image", "validation_digest"]

#: what the YOLO and VOC readers make of the same files: bump it when that changes, so the stages
#: that read the data run again
READER_VERSION = 2


# -- the validation set ----------------------------------------------------------------------------

def load_validation_set(project: Project, limit: int | None = None) -> tuple[CocoSet | None, list[Sample]]:
    """The validation set, in whatever format it is: (the COCO form of a detection set or None, its samples).
    ``limit`` (or data.validation.max_images) keeps that many images, evenly spread over the set by file
    name (``edgebuild.datasets.images.spread``; class folders: a balanced share of each)."""
    if project.task.kind != "classification":  # detection, segmentation, pose, obb: COCO form
        coco = load_coco_set(project, limit)
        return coco, coco.samples
    return None, load_class_folder_set(project, limit)


def load_coco_set(project: Project, limit: int | None = None) -> CocoSet:
    """The detection validation set in COCO form, read from COCO JSON, a YOLO data.yaml or Pascal VOC; for
    segmentation, pose and OBB (task.kind) with the masks, keypoints or oriented boxes (``CocoSet``)."""
    fmt = data_format(project)
    most = cap(limit, project.data.validation.max_images)
    classes = list(project.task.classes)
    split = project.data.validation_split
    task = project.task.kind
    if fmt.name == "yolo":
        return load_yolo_set(fmt.path, split, classes, most, task=task)
    if fmt.name == "voc" and fmt.has_splits:
        return load_voc_root(fmt.path, split, classes, most)
    if fmt.name == "voc":
        return load_voc_folder(fmt.path, fmt.images or fmt.path, classes, most)
    if fmt.name == "coco":
        return read_coco(fmt.path, fmt.images or fmt.path, classes, most, task=task)
    raise DataError(f"{fmt.key}: {fmt.path} is {fmt.title}, classification data; task.kind is {task}")


def load_class_folder_set(project: Project, limit: int | None = None) -> list[Sample]:
    """A classification validation set: one sub-folder per class name, as in task.classes."""
    fmt = data_format(project)
    if fmt.name != "folders":
        raise DataError(f"{fmt.key}: {fmt.path} is {fmt.title}, detection data; task.kind is classification")
    root = split_folder(fmt.path, project.data.validation_split) if fmt.has_splits else fmt.path
    return load_class_folders(root, list(project.task.classes), cap(limit, project.data.validation.max_images),
                              fmt.key)


# -- calibration -----------------------------------------------------------------------------------

def _from_split(project: Project) -> bool:
    """Calibration comes from the dataset's calibration_split (not from a data.calibration_images folder)."""
    return project.data.dataset is not None and project.data.calibration_images is None


def calibration_images(project: Project) -> list[Path]:
    """The calibration images: the data.calibration_images folder, or the dataset's calibration_split."""
    return _calibration(project)[0]


def _calibration(project: Project) -> tuple[list[Path], int]:
    """(the calibration images, capped by max_calibration_images; how many there are before the cap)."""
    if _from_split(project):
        images, _, available = _calibration_split(project)
        return images, available
    images = list_images(project.path(project.data.calibration_images or ""), "data.calibration_images")
    return spread(images, project.data.max_calibration_images, image_stem), len(images)


def _calibration_split(project: Project) -> tuple[list[Path], list[Path], int]:
    """(the calibration split's images, capped: evenly spread by file name; the files that say which
    images they are; how many images the split has)."""
    fmt = data_format(project)
    split, most = project.data.calibration_split, project.data.max_calibration_images
    if fmt.name == "yolo":
        images, lists = split_images(read_data_yaml(fmt.path), split)
        return spread(images, most, image_stem), [fmt.path, *lists], len(images)
    if fmt.name == "voc":
        images, listing = voc_split_images(fmt.path, split)
        return spread(images, most, image_stem), [listing], len(images)
    # class folders: a balanced share of every class, so a capped set sees them all
    folder = split_folder(fmt.path, split)
    return balanced_images(folder, "data.dataset", most), [], len(list_images(folder, "data.dataset"))


def _refuse_shared(project: Project, calibration: list[Path], samples: list[Sample] | None = None) -> None:
    """Calibration images that are validation images too are refused (same file, by its real path)."""
    samples = load_validation_set(project)[1] if samples is None else samples
    validation = {os.path.realpath(s.path) for s in samples}
    shared = [p for p in calibration if os.path.realpath(p) in validation]
    if not shared:
        return
    key = "data.calibration_split" if _from_split(project) else "data.calibration_images"
    raise DataError(f"{key}: {len(shared)} of the {len(calibration)} calibration images are validation images too "
                    f"(e.g. {shared[0]}): INT8 ranges fitted on the images that then judge them make the gate "
                    "look better than the model will do",
                    hint="calibrate on images the validation set does not hold: the training split "
                         "(data.calibration_split) or a folder of its own (data.calibration_images)")


# -- identity ----------------------------------------------------------------------------------------

def _content_digest(part: str, fmt: DataFormat, split: str | None, files: list[Path], base: Path | None = None) -> str:
    """Hash of the files a set is read from (data.yaml, lists, labels, XML, images) by path under
    ``base`` (default: their common folder) and content, with the reader's version, format and split."""
    from edgebuild.content import digest, file_sha256

    unique = [p for p in dict.fromkeys(files) if p.is_file()]
    if base is None:
        base = Path(os.path.commonpath([str(p.parent) for p in unique])) if unique else fmt.path
    return digest({"part": part, "reader": READER_VERSION, "format": fmt.name, "split": split,
                   "files": [[relative_name(p, base), file_sha256(p)] for p in unique]})


def calibration_digest(project: Project) -> str:
    """Content hash of the calibration images (and the data.yaml or split list that names them).

    Refuses calibration images that are validation images too."""
    from edgebuild.content import files_digest

    images = calibration_images(project)
    _refuse_shared(project, images)
    if not _from_split(project):
        return files_digest(images)
    images, files, _ = _calibration_split(project)
    return _content_digest("calibration", data_format(project), project.data.calibration_split, [*files, *images])


def validation_digest(project: Project) -> str:
    """Content hash of the validation set: its images and everything its ground truth is read from
    (the COCO JSON; the data.yaml, image lists and label files; the XML files and split list)."""
    from edgebuild.content import files_digest

    fmt = data_format(project)
    split = project.data.validation_split if fmt.has_splits else None
    if fmt.name == "coco":
        coco = load_coco_set(project)
        return files_digest([coco.annotations_path, *[s.path for s in coco.samples]])
    if fmt.name == "folders":
        samples = [s.path for s in load_class_folder_set(project)]
        if split is None:
            return files_digest(samples, root=fmt.path)
        return _content_digest("validation", fmt, split, samples, base=split_folder(fmt.path, split))
    coco = load_coco_set(project)
    return _content_digest("validation", fmt, split,
                           [coco.annotations_path, *coco.files, *[s.path for s in coco.samples]])


# -- what the data is ----------------------------------------------------------------------------------

_NAMES = {"yolo": "YOLO", "coco": "COCO", "voc": "Pascal VOC", "folders": "class folders"}


@dataclass(frozen=True)
class DataSummary:
    """What the project's data is, for ``check`` and the compile to say: ``data: {summary}``."""

    format: str  # yolo, coco, voc, folders
    source: Path  # the data.yaml, VOC root, COCO JSON, VOC annotations folder or class-folder root
    told: str  # data.format, or what about the files said so
    classes: int
    validation_images: int
    validation_split: str | None  # None: the whole of [data.validation]
    calibration_images: int
    calibration_split: str | None  # None: the data.calibration_images folder
    calibration_source: Path
    validation_available: int = 0  # the images before data.validation.max_images (0: as many as taken)
    calibration_available: int = 0  # the images before data.max_calibration_images (0: as many as taken)

    def capped(self) -> list[str]:
        """``"val 60 of 200 (data.validation.max_images)"``, ... for each set a cap cut."""
        return [f"{what} {taken} of {available} ({key})" for what, taken, available, key in (
            ("val", self.validation_images, self.validation_available, "data.validation.max_images"),
            ("calibration", self.calibration_images, self.calibration_available, "data.max_calibration_images"))
            if available > taken]

    def __str__(self) -> str:
        split = f"{self.validation_split}: " if self.validation_split else ""
        calibration = self.calibration_split or f"{self.calibration_source.name}/"
        capped = self.capped()
        return (f"{_NAMES[self.format]} {self.source.name} ({split}{self.validation_images} images, "
                f"{self.classes} classes; calibration: {calibration}, {self.calibration_images} images)"
                + (f"; capped, evenly spread by file name: {', '.join(capped)}" if capped else ""))

    def as_dict(self) -> JsonObject:
        return {"format": self.format, "source": str(self.source), "told": self.told, "classes": self.classes,
                "validation_images": self.validation_images, "validation_split": self.validation_split,
                "calibration_images": self.calibration_images, "calibration_split": self.calibration_split,
                "calibration_source": str(self.calibration_source),
                "validation_available": self.validation_available or self.validation_images,
                "calibration_available": self.calibration_available or self.calibration_images}


def _validation_available(project: Project, coco: CocoSet | None, taken: int) -> int:
    """How many images the validation set has before data.validation.max_images."""
    if project.data.validation.max_images is None:
        return taken
    if coco is not None:
        return coco.available or taken
    fmt = data_format(project)
    root = split_folder(fmt.path, project.data.validation_split) if fmt.has_splits else fmt.path
    return len(load_class_folders(root, list(project.task.classes), None, fmt.key))


def describe_data(project: Project) -> DataSummary:
    """Read the validation set and list the calibration images (capped as the stages cap them), refuse
    what the stages would refuse (a DataError naming the file and key), and say what the data is, and
    how many images of how many a cap took."""
    return read_data(project)[0]


def read_data(project: Project) -> tuple[DataSummary, CocoSet | None, list[Sample], list[Path]]:
    """``describe_data``'s summary with what it read: the validation set (its COCO form for detection) and the
    calibration images, so a caller that needs them too reads every label once."""
    fmt = data_format(project)
    coco, samples = load_validation_set(project)
    calibration, calibration_available = _calibration(project)
    _refuse_shared(project, calibration, samples)
    from_split = _from_split(project)
    summary = DataSummary(
        fmt.name, fmt.path, fmt.told, len(project.task.classes), len(samples),
        project.data.validation_split if fmt.has_splits else None, len(calibration),
        project.data.calibration_split if from_split else None,
        fmt.path if from_split else project.path(project.data.calibration_images or ""),
        _validation_available(project, coco, len(samples)), calibration_available)
    return summary, coco, samples, calibration


# -- preparation -----------------------------------------------------------------------------------

def missing_data(project: Project) -> dict[str, Path]:
    """The project's data paths (calibration, validation, dataset) that do not exist."""
    from edgebuild.project.config import data_paths

    return {k: p for k, p in data_paths(project).items() if k.startswith("data.") and not p.exists()}


def prepare_data(project: Project, progress: Progress | None = None) -> bool:
    """Run ``data.prepare`` when a data path is missing; True if it ran. Given ``progress``, it then says
    what the data is (``data: YOLO data.yaml (val: 60 images, 3 classes; ...)``) where it can be read.

    This is the only place edgebuild runs the project's data code: ``compile``, ``validate`` and
    ``edgebuild data prepare`` call it before any stage reads the data; ``check`` never does.
    """
    say = progress or (lambda _: None)
    missing = missing_data(project)
    ran = False
    if missing:
        if not project.data.prepare:
            raise DataError("; ".join(f"{key}: path does not exist: {path}" for key, path in missing.items()),
                            hint="add the data, or name a function that makes it with data.prepare")
        from edgebuild.sources.entry_point import call_entry_point

        say(f"data: {', '.join(missing)} missing; running data.prepare ({project.data.prepare})")
        call_entry_point(project, project.data.prepare, "data.prepare", str(project.root))
        still = missing_data(project)
        if still:
            raise DataError("; ".join(f"{key}: path does not exist: {path} (data.prepare ran and did not create it)"
                                      for key, path in still.items()),
                            hint=f"check what {project.data.prepare} writes")
        ran = True
    if progress is not None:
        try:
            progress(f"data: {describe_data(project)}")
        except DataError:
            pass  # the stage that reads the data says what is wrong, with its own context
    return ran
