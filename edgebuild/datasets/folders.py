"""Classification data: one sub-folder of images per class name (``task.classes``).

Named by ``[data.validation] images``, or by ``[data] dataset`` as a folder of split folders
(``train/``, ``val/``), each of class folders, as Ultralytics' classification datasets are laid out.
"""

from __future__ import annotations

from pathlib import Path

from edgebuild.datasets.images import Sample, list_images
from edgebuild.errors import DataError

__all__ = ["balanced_images", "load_class_folders", "split_folder"]


def split_folder(root: Path, split: str, key: str = "data.dataset") -> Path:
    folder = root / split
    if not folder.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise DataError(f"{key}: {root} has no {split!r} split folder (found: {present})")
    return folder


def load_class_folders(root: Path, classes: list[str], limit: int | None = None,
                       key: str = "data.validation.images") -> list[Sample]:
    """One sub-folder per class name, as in ``classes``; a capped set takes the first images of every class in turn."""
    if not root.is_dir():
        raise DataError(f"{key}: not a folder: {root}")
    present = sorted(p.name for p in root.iterdir() if p.is_dir())
    missing = [c for c in classes if c not in present]
    if missing:
        raise DataError(
            f"{key}: {root} needs one folder per class; missing {missing} "
            f"(found: {present})"
        )
    ranked = []  # (rank within its class, label, path)
    for label, name in enumerate(classes):
        for rank, path in enumerate(list_images(root / name, f"{key} ({name})")):
            ranked.append((rank, label, path))
    if limit:
        # take the first images of every class in turn, so a capped set stays balanced
        ranked = sorted(ranked)[:limit]
    ranked.sort(key=lambda item: (item[1], item[0]))
    return [Sample(path, i, label) for i, (_, label, path) in enumerate(ranked)]


def balanced_images(root: Path, key: str, limit: int | None = None) -> list[Path]:
    """The images under ``root`` (a split folder of class folders), capped by taking the first image of
    every sub-folder in turn, then the second, ... (a capped calibration set sees every class)."""
    ranked = sorted((rank, path.parent.relative_to(root).as_posix(), path)
                    for images in _by_folder(list_images(root, key)).values()
                    for rank, path in enumerate(images))
    kept = ranked[:limit] if limit else ranked
    return sorted(path for _, _, path in kept)


def _by_folder(images: list[Path]) -> dict[Path, list[Path]]:
    folders: dict[Path, list[Path]] = {}
    for path in images:
        folders.setdefault(path.parent, []).append(path)
    return folders
