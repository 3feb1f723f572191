"""What ``edgebuild check`` verifies beyond the project file: the code and the data it names.

``model.entry_point`` is called: the model is built (with ``model.weights``) and run at the profile's min,
opt and max shapes against the task, as validate's model stage does (a forward of the model at three
shapes, so that a weights file that does not fit, an image size off the model's stride or outputs the
task cannot read are found here); ``data.prepare`` is imported (``importlib`` and ``getattr``), never
called. The data is read with the readers every stage uses: every label and
annotation parsed, every image the stages will read decoded (``edgebuild.datasets.decoded``: once per
content, remembered in the build folder, so a second ``check`` is instant), so a mistyped module, a
missing class folder, a bad label or a broken image is reported here instead of by the stage that
first reads it; and what the readers did to the data (boxes clipped or dropped, EXIF orientation
applied, 16-bit images scaled, alpha dropped) is said, with counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import ConfigError, DataError, EdgebuildError, ModelError

if TYPE_CHECKING:
    from edgebuild.datasets.images import CocoSet
    from edgebuild.project.config import Project

__all__ = []

#: broken images listed one by one; the rest are counted
SHOWN = 5


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
    # a model file ([model] source) is checked by model_file_findings; an entry point's model is built and run here
    findings = _model(project) if project.model.entry_point else []
    if project.data.prepare:
        findings += _entry_point(project, project.data.prepare, "data.prepare")
    return findings + _check_data(project)


def _check_data(project: Project) -> list[Finding]:
    """Problems and notes about the project's data: every label read, every image decoded (``init`` can run it
    on its draft so that it never writes a project ``check`` refuses)."""
    return _calibration(project) + _validation(project)


def refuse_data(project: Project, flag: str = "--data") -> None:
    """Raise what ``check`` refuses of the data, said of ``flag`` (``init``'s option), not of a project file
    ``init`` has not written: so ``init`` never writes a project whose data ``check`` refuses."""
    problems = [f for f in _check_data(project) if f.is_problem]
    if not problems:
        return
    said = [p.message for p in problems]  # each names its file; the keys are of a file not written yet
    message = f"{flag}: {said[0]}" if len(said) == 1 else \
        f"{flag}: {len(said)} problems\n" + "\n".join(f"  - {line}" for line in said)
    hints = [p.hint for p in problems if p.hint]
    raise problems[0].error(message, hint="; ".join(dict.fromkeys(hints)) or None)  # type: ignore[misc]


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
    from edgebuild.sources.entry_point import resolve_entry_point

    try:
        resolve_entry_point(project, spec, key)
    except ModelError as exc:
        # resolve_entry_point's messages start with the project file and the key; a Finding carries both
        message = exc.message.removeprefix(f"{project.source}: ").removeprefix(f"{key}: ")
        return [Finding(key, message, ModelError, exc.hint)]
    return [Finding(key, f"{spec} imports (not called)")]


def _model(project: Project) -> list[Finding]:
    """``model.entry_point`` imported, then the model built and run at the min, opt and max shapes against the task
    (``check_model``, the model stage's own check)."""
    from edgebuild.sources.entry_point import TorchRunner, check_model

    key, spec = "model.entry_point", project.model.entry_point
    assert spec is not None, "check_code_and_data calls this only with model.entry_point set"
    imported = _entry_point(project, spec, key)
    if any(f.is_problem for f in imported):
        return imported
    try:
        record = check_model(project, TorchRunner(project))
    except (ConfigError, ModelError) as exc:
        return [_finding(project, exc, key)]
    return [Finding(key, f"{spec} builds ({record.parameters:,} parameters); run at the min/opt/max shapes, its "
                         f"outputs {list(project.model.outputs)} fit the {project.task.kind} task "
                         f"({record.seconds:.1f} s)")]


def _finding(project: Project, error: EdgebuildError, key: str) -> Finding:
    """``error`` as a finding of the key its message names after the project file (``model.weights: ...``), else of
    ``key``."""
    message = error.message.removeprefix(f"{project.source}: ")
    named, _, rest = message.partition(": ")
    if rest and named.startswith(("model.", "task.")):
        return Finding(named, rest, type(error), error.hint)
    return Finding(key, message.removeprefix(f"{key}: "), type(error), error.hint)


def _missing_for_prepare(project: Project, path: Path) -> bool:
    """A data path that data.prepare is to make: `check` says so elsewhere and runs nothing."""
    return bool(project.data.prepare) and not path.exists()


def _gray(project: Project) -> bool:
    return project.task.preprocess.channel_order == "GRAY"


def _decoded(project: Project, key: str, paths: list[Path], what: str) -> tuple[list[Finding], str]:
    """Decode every one of ``paths`` (the cache in the build folder knows the unchanged ones): (the broken
    images as problems, or what the reader did to them as notes; ``N decoded`` for the summary line)."""
    from edgebuild.datasets.decoded import decode_all
    from edgebuild.project.layout import BuildLayout

    decoded = decode_all(paths, BuildLayout.of(project).decoded_images, desc=f"check {what}")
    if decoded.problems:
        more = len(decoded.problems) - SHOWN
        findings = [Finding(key, message, DataError) for message in decoded.problems[:SHOWN]]
        if more > 0:
            findings.append(Finding(key, f"and {more} more images of {what} cannot be read", DataError))
        return findings, ""
    cached = len(set(paths)) - decoded.decoded_now
    said = f"{decoded.images} decoded" + (f" ({cached} known by their content from an earlier check)" if cached else "")
    return [Finding(key, f"{what}: {note}") for note in decoded.notes(_gray(project))], said


def _folder_images(key: str, folder: Path, project: Project, what: str) -> tuple[list[Finding], int, str]:
    """A folder that must hold readable images: (problems or notes, images found, ``N decoded``)."""
    from edgebuild.datasets.project_data import list_images

    try:
        images = list_images(folder, key)
    except DataError as exc:
        return [Finding(key, exc.message.removeprefix(f"{key}: "), DataError)], 0, ""
    findings, said = _decoded(project, key, images, what)
    return findings, len(images), said


def _calibration(project: Project) -> list[Finding]:
    if project.data.calibration_images is None:
        return []  # the dataset's calibration split: _dataset reports it
    key, folder = "data.calibration_images", project.path(project.data.calibration_images)
    if _missing_for_prepare(project, folder):
        return []
    findings, found, said = _folder_images(key, folder, project, "calibration images")
    if any(f.is_problem for f in findings):
        return findings
    return [Finding(key, f"{found} images in {folder}, {said}"), *_skipped(key, [folder], "calibration images"),
            *findings]


def _validation(project: Project) -> list[Finding]:
    if project.data.dataset is not None:
        return _dataset(project)
    images = project.data.validation.images
    assert images is not None, "load_project requires data.validation.images without data.dataset"
    key, root = "data.validation.images", project.path(images)
    if _missing_for_prepare(project, root) or (
            project.data.validation.annotations
            and _missing_for_prepare(project, project.path(project.data.validation.annotations))):
        return []
    if project.task.kind == "detection":
        return _detection_set(project, key)
    return _class_folders(project, key, root)


def _refused(exc: DataError, key: str) -> list[Finding]:
    found, _, message = exc.message.partition(": ")
    if message and (found.startswith(("data.", "task.")) or found == key):
        return [Finding(found, message, DataError, exc.hint)]
    return [Finding(key, exc.message, DataError, exc.hint)]


def _dataset(project: Project) -> list[Finding]:
    """``[data] dataset`` (a YOLO data.yaml, a VOC root, split folders): what it is, every label read and
    every image of the validation and calibration sets decoded."""
    from edgebuild.datasets.project_data import read_data

    key, dataset = "data.dataset", project.data.dataset
    assert dataset is not None, "_validation calls this only with data.dataset set"
    if _missing_for_prepare(project, project.path(dataset)):
        return []
    try:
        summary, coco, samples, calibration = read_data(project)
    except DataError as exc:
        return _refused(exc, key)
    if coco is not None and (nothing := _nothing_to_score(coco, key)):
        return nothing
    notes = [Finding(key, note) for note in (coco.notes if coco is not None else ())]
    if summary.format == "folders":
        notes += _skipped(key, [summary.source / project.data.validation_split], "validation images")
        if summary.calibration_split:
            notes += _skipped(key, [summary.source / summary.calibration_split], "calibration images")
    validation, said = _decoded(project, key, [s.path for s in samples], "validation images")
    more, said_more = _decoded(project, key, calibration, "calibration images")
    problems = [f for f in [*validation, *more] if f.is_problem]
    if problems:
        return problems
    return [Finding(key, f"{summary}; validation {said}, calibration {said_more}"), *notes, *validation, *more]


def _detection_set(project: Project, key: str) -> list[Finding]:
    from edgebuild.datasets.project_data import load_coco_set

    try:
        coco = load_coco_set(project)
    except DataError as exc:
        return _refused(exc, key)
    if nothing := _nothing_to_score(coco, "data.validation.annotations"):
        return nothing
    findings, said = _decoded(project, key, [s.path for s in coco.samples], "validation images")
    if any(f.is_problem for f in findings):
        return findings
    notes = [Finding(key, note) for note in coco.notes]
    images = project.data.validation.images
    assert images is not None, "load_project requires data.validation.images without data.dataset"
    return [Finding(key, f"{len(coco.samples)} images in {project.path(images)} "
                         f"({coco.annotations_path.name}), {said}"), *notes, *findings]


def _nothing_to_score(coco: CocoSet, key: str) -> list[Finding]:
    """A detection set without one object that can be scored (every box ignored as iscrowd/difficult, or
    none at all) is refused: mAP over it is 0 whatever the model does, and validate would blame the model."""
    annotations = coco.ground_truth.get("annotations") or []
    if any(not a.get("iscrowd") for a in annotations):
        return []
    images = len(coco.samples)
    why = (f"all {len(annotations)} of its objects are crowd regions (COCO iscrowd=1, Pascal VOC difficult=1), "
           "which the evaluation ignores" if annotations else "it holds no object (no annotation, label line or "
           "<object> of task.classes)")
    return [Finding(key, f"{coco.annotations_path}: the {images} validation images have no object that can be "
                         f"scored: {why}; mAP over them is 0 whatever the model detects", DataError,
                    "validate on a split with labelled objects of task.classes")]


def _class_folders(project: Project, key: str, root: Path) -> list[Finding]:
    """Classification: one sub-folder of readable images per task.classes entry."""
    from edgebuild.datasets.project_data import list_images

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
        from edgebuild.datasets.folders import refuse_other_classes

        try:  # one holding images is refused (init refuses it too); an empty one is said
            refuse_other_classes(root, list(classes), key)
            findings.append(Finding(key, f"folders {extra} in {root} are not in task.classes; they hold no images"))
        except DataError as exc:
            findings.append(Finding(key, exc.message.removeprefix(f"{key}: "), DataError, exc.hint))
    images: list[Path] = []
    for name in (c for c in classes if c in present):
        try:
            images += list_images(root / name, f"{key} ({name})")
        except DataError as exc:
            findings.append(Finding(key, exc.message.removeprefix(f"{key} ({name}): "), DataError))
    if any(f.is_problem for f in findings):
        return findings
    decoded, said = _decoded(project, key, images, "validation images")
    if any(f.is_problem for f in decoded):
        return decoded
    return [*findings, Finding(key, f"{len(classes)} class folders, {len(images)} images in {root}, {said}"),
            *_skipped(key, [root / c for c in classes], "validation"), *decoded]


def _skipped(key: str, folders: list[Path], what: str) -> list[Finding]:
    """A note counting the files in ``folders`` that are not images (by suffix) and so not read."""
    from edgebuild.datasets.images import IMAGE_SUFFIXES, non_images

    skipped = [p for folder in folders for p in non_images(folder)]
    if not skipped:
        return []
    suffixes = sorted({p.suffix.lower() or "(none)" for p in skipped})
    return [Finding(key, f"{what}: {len(skipped)} file(s) that are not images skipped ({', '.join(suffixes[:6])}; "
                         f"e.g. {skipped[0]}); images are {', '.join(IMAGE_SUFFIXES)}")]
