"""What ``edgebuild check`` verifies beyond the project file: the code and the data it names.

The entry points are imported (``importlib`` and ``getattr``), never called: no model is built and
``data.prepare`` does not run. The data folders are listed and a few images of each decoded with
the reader every stage uses, so a mistyped module, a missing class folder or an empty calibration
folder is reported here, in a second, instead of by the stage that first reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import DataError, EdgebuildError, ModelError

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["Finding", "check_code_and_data", "raise_for_problems"]

#: images decoded per folder: enough to catch a folder of broken files, few enough to stay instant
SAMPLE = 4


@dataclass(frozen=True)
class Finding:
    key: str  # the project key it is about
    message: str
    error: type[EdgebuildError] | None = None  # the error class of a problem; None for a note
    hint: str | None = None

    @property
    def is_problem(self) -> bool:
        return self.error is not None

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def check_code_and_data(project: Project) -> list[Finding]:
    """Problems and notes about the project's entry points and data folders, in that order."""
    # a model file ([model] source) is checked by the model stage; only Python entry points import here
    findings = _entry_point(project, project.model.entry_point, "model.entry_point") if project.model.entry_point \
        else []
    if project.data.prepare:
        findings += _entry_point(project, project.data.prepare, "data.prepare")
    findings += _calibration(project)
    findings += _validation(project)
    return findings


def raise_for_problems(project: Project, findings: list[Finding]) -> None:
    """Raise one error listing every problem, of the first problem's class (so its exit code)."""
    problems = [f for f in findings if f.is_problem]
    if not problems:
        return
    if len(problems) == 1:
        message = f"{project.source}: {problems[0]}"
    else:
        message = f"{project.source}: {len(problems)} problems\n" + "\n".join(f"  - {p}" for p in problems)
    hints = [p.hint for p in problems if p.hint]
    raise problems[0].error(message, hint="; ".join(hints) or None)  # type: ignore[misc]


def _entry_point(project: Project, spec: str, key: str) -> list[Finding]:
    from edgebuild.sources.model import resolve_entry_point

    try:
        resolve_entry_point(project, spec, key)
    except ModelError as exc:
        # resolve_entry_point's messages start with the project file and the key; a Finding carries both
        message = exc.message.removeprefix(f"{project.source}: ").removeprefix(f"{key}: ")
        return [Finding(key, message, ModelError, exc.hint)]
    return [Finding(key, f"{spec} imports (not called)")]


def _missing_for_prepare(project: Project, path: Path) -> bool:
    """A data path that data.prepare is to make: `check` says so elsewhere and runs nothing."""
    return bool(project.data.prepare) and not path.exists()


def _gray(project: Project) -> bool:
    return project.task.preprocess.channel_order == "GRAY"


def _folder_images(key: str, folder: Path, gray: bool, sample: int = SAMPLE) -> tuple[list[Finding], int, int]:
    """A folder that must hold readable images: (problems, images found, images decoded)."""
    from edgebuild.datasets.project_data import list_images, unreadable_images

    try:
        images = list_images(folder, key)
    except DataError as exc:
        return [Finding(key, exc.message.removeprefix(f"{key}: "), DataError)], 0, 0
    tried, broken = unreadable_images(images, gray, sample)
    return [Finding(key, message, DataError) for message in broken], len(images), tried


def _calibration(project: Project) -> list[Finding]:
    if project.data.calibration_images is None:
        return []  # the dataset's calibration split: _dataset reports it
    key, folder = "data.calibration_images", project.path(project.data.calibration_images)
    if _missing_for_prepare(project, folder):
        return []
    problems, found, tried = _folder_images(key, folder, _gray(project))
    return problems or [Finding(key, f"{found} images in {folder}, {tried} decoded")]


def _validation(project: Project) -> list[Finding]:
    if project.data.dataset is not None:
        return _dataset(project)
    key, root = "data.validation.images", project.path(project.data.validation.images)
    if _missing_for_prepare(project, root) or (
            project.data.validation.annotations
            and _missing_for_prepare(project, project.path(project.data.validation.annotations))):
        return []
    if project.task.kind == "detection":
        return _detection_set(project, key)
    return _class_folders(project, key, root)


def _dataset(project: Project) -> list[Finding]:
    """``[data] dataset`` (a YOLO data.yaml, a VOC root, split folders): what it is, and a few images of each split."""
    from edgebuild.datasets.project_data import (
        calibration_images,
        describe_data,
        load_validation_set,
        unreadable_images,
    )

    key = "data.dataset"
    if _missing_for_prepare(project, project.path(project.data.dataset)):
        return []
    try:
        summary = describe_data(project)
        splits = [[s.path for s in load_validation_set(project)[1]], calibration_images(project)]
    except DataError as exc:
        found, _, message = exc.message.partition(": ")
        return [Finding(found, message, DataError, exc.hint) if message else Finding(key, exc.message, DataError,
                                                                                      exc.hint)]
    tried, problems = 0, []
    for images in splits:
        count, broken = unreadable_images(images, _gray(project), SAMPLE)
        tried, problems = tried + count, problems + [Finding(key, m, DataError) for m in broken]
    return problems or [Finding(key, f"{summary}, {tried} decoded")]


def _detection_set(project: Project, key: str) -> list[Finding]:
    from edgebuild.datasets.project_data import load_coco_set, unreadable_images

    try:
        coco = load_coco_set(project)
    except DataError as exc:
        wrong = exc.message.split(": ", 1)
        return [Finding(wrong[0], wrong[1], DataError)] if len(wrong) == 2 else [Finding(key, exc.message, DataError)]
    tried, broken = unreadable_images([s.path for s in coco.samples], _gray(project), SAMPLE)
    if broken:
        return [Finding(key, message, DataError) for message in broken]
    return [Finding(key, f"{len(coco.samples)} images in {project.path(project.data.validation.images)} "
                         f"({coco.annotations_path.name}), {tried} decoded")]


def _class_folders(project: Project, key: str, root: Path) -> list[Finding]:
    """Classification: one sub-folder of readable images per task.classes entry."""
    if not root.is_dir():
        return [Finding(key, f"not a folder: {root}", DataError)]
    present = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    classes = project.task.classes
    missing = [c for c in classes if c not in present]
    extra = [p for p in present if p not in classes]
    findings = []
    if missing:
        findings.append(Finding(key, f"{root} needs one folder per task.classes entry; missing {missing}"
                                     + (f", and {extra} are not in task.classes" if extra else "")
                                     + f" (found: {present})", DataError))
    elif extra:
        findings.append(Finding(key, f"folders {extra} in {root} are not in task.classes; their images are "
                                     "not evaluated"))
    # every class folder is listed; the decoding budget is shared, at least one image per class
    per_class = min(SAMPLE, max(1, 4 * SAMPLE // len(classes)))
    found = tried = 0
    for name in (c for c in classes if c in present):
        problems, count, decoded = _folder_images(key, root / name, _gray(project), per_class)
        findings += problems
        found, tried = found + count, tried + decoded
    if not any(f.is_problem for f in findings):
        findings.append(Finding(key, f"{len(classes)} class folders, {found} images in {root}, {tried} decoded"))
    return findings
