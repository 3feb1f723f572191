"""Classification data: one sub-folder of images per class name (``task.classes``).

Named by ``[data.validation] images``, or by ``[data] dataset`` as a folder of split folders
(``train/``, ``val/``), each of class folders, as Ultralytics' classification datasets are laid out.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from edgebuild.datasets.images import Sample, image_stem, list_images, spread
from edgebuild.errors import DataError

__all__ = ["load_class_folders", "refuse_other_classes"]


def split_folder(root: Path, split: str, key: str = "data.dataset") -> Path:
    if not root.is_dir():
        raise DataError(f"{key}: {root} is {'a file' if root.exists() else 'missing'}: split folders of class folders "
                        "are a folder holding train/<class>/ and val/<class>/",
                        hint="point it at that folder, or set [data] format to what the file is")
    folder = root / split
    if not folder.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise DataError(f"{key}: {root} has no {split!r} split folder (found: {present})")
    return folder


def load_class_folders(root: Path, classes: list[str], limit: int | None = None,
                       key: str = "data.validation.images") -> list[Sample]:
    """One sub-folder per class name, as in ``classes``; a capped set stays balanced (``balanced``)."""
    if not root.is_dir():
        raise DataError(f"{key}: not a folder: {root}")
    present = sorted(p.name for p in root.iterdir() if p.is_dir())
    missing = [c for c in classes if c not in present]
    if missing:
        raise DataError(
            f"{key}: {root} needs one folder per class; missing {missing} "
            f"(found: {present})"
        )
    refuse_other_classes(root, classes, key)
    per_class = balanced([list_images(root / name, f"{key} ({name})") for name in classes], limit)
    return [Sample(path, i, label) for i, (label, path) in
            enumerate((label, path) for label, images in enumerate(per_class) for path in images)]


def refuse_other_classes(root: Path, classes: list[str], key: str) -> None:
    """Folders beside the class folders that hold images but are not in ``classes`` are refused (as ``init``
    refuses a class folder the model does not predict): their images would be dropped unsaid. An empty
    one is no set's business."""
    extra = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                   and p.name not in classes and _images_in(p))
    if extra:
        raise DataError(f"{key}: {root}: folders {extra} hold images but are not in task.classes {classes}: the "
                        "model predicts task.classes only, so their images cannot be scored",
                        hint="remove those folders from the split, or add the class (a model trained on it)")


def _images_in(folder: Path) -> list[Path]:
    from edgebuild.datasets.images import IMAGE_SUFFIXES

    return [p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES]


def balanced(groups: list[list[Path]], limit: int | None) -> list[list[Path]]:
    """At most ``limit`` images of ``groups`` (the images of each class folder), balanced: every group
    gets one in turn, then a second, ... (a small group runs out first); within a group, its share is
    evenly spread over its images by file name (``images.spread``), not its first images."""
    if limit is None:
        return [list(g) for g in groups]
    turns = sorted((rank, index) for index, group in enumerate(groups) for rank in range(len(group)))[:limit]
    shares = Counter(index for _, index in turns)
    return [spread(group, shares[index], image_stem) for index, group in enumerate(groups)]


def balanced_images(root: Path, key: str, limit: int | None = None) -> list[Path]:
    """The images under ``root`` (a split folder of class folders), capped with each sub-folder's
    balanced share (``balanced``: a capped calibration set sees every class)."""
    folders = _by_folder(list_images(root, key))
    ordered = sorted(folders, key=lambda folder: folder.relative_to(root).as_posix())
    return sorted(path for images in balanced([folders[f] for f in ordered], limit) for path in images)


def _by_folder(images: list[Path]) -> dict[Path, list[Path]]:
    folders: dict[Path, list[Path]] = {}
    for path in images:
        folders.setdefault(path.parent, []).append(path)
    return folders
