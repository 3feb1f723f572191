"""Loading ``edgebuild.toml``: read, parse and validate it into a ``Project``.

Validation happens in two passes, and every problem of a pass is reported at once:
1. shape and types (pydantic, the models in ``edgebuild.project.schema``): unknown keys, wrong
   types, values out of range;
2. meaning: modules and JetPack releases against ``profiles/``, shapes against each other,
   output names against the task, paths on disk.
Each problem names the file, the key, what was found and what is allowed. Loading runs no user code.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from edgebuild.errors import ConfigError
from edgebuild.project.groups import check_groups, check_precisions, static_shape_problems
from edgebuild.project.schema import HUB_SOURCE, PROJECT_FILE, TASK_KINDS, Project
from edgebuild.project.streams_schema import check_regions_file, check_streams
from edgebuild.project.toml_file import find_project_file, format_problems, format_validation_error, read_toml
from edgebuild.targets.profiles import Catalog, load_catalog

__all__ = ["PROJECT_FILE", "Project", "data_paths", "is_torchscript_archive", "load_project", "model_source_kind"]


def load_project(location: str | Path = ".", *, check_paths: bool = True) -> Project:
    """Read, parse and validate a project file (or the edgebuild.toml in a folder)."""
    source = find_project_file(location)
    raw = read_toml(source)
    if "models" in raw:
        raise ConfigError(f"{source}: a fleet file ([models] names the model projects it composes), not a model "
                          "project", hint="`edgebuild compile` builds a fleet file; the other commands take one "
                                          "model's folder (-p " + ", -p ".join(str(v) for v in raw["models"].values())
                          + ")" if isinstance(raw["models"], dict) else "")
    raw = _with_model_defaults(source, raw)
    try:
        project = Project.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc, raw)) from None
    project = project.model_copy(update={"root": source.parent.resolve(), "source": source})
    problems = _check_meaning(project, load_catalog())
    if check_paths and not problems:
        problems = _check_paths_exist(project)
    if problems:
        raise ConfigError(format_problems(source, problems))
    return project


# -- pass 2: meaning ---------------------------------------------------------------------

def _check_meaning(project: Project, catalog: Catalog) -> list[str]:
    """Problems that need more than one key, or the profile catalog, to see."""
    problems: list[str] = []
    problems += check_groups(project.fleet, project.ota, project.runtime, catalog)
    problems += check_precisions(project.quantize.precisions, project.fleet, catalog)
    problems += _check_model_against_task(project)
    problems += _check_data(project)
    problems += _check_model_source(project)
    problems += _check_batching(project)
    problems += [problem for i, group in enumerate(project.fleet) if group.accelerator != "gpu"
                 for problem in static_shape_problems(f"fleet[{i}].{group.accelerator_key}", project.model.inputs,
                                                      project.runtime)]
    problems += _check_build_location(project)
    problems += check_streams(project.streams, project.runtime.tracking, [g.name for g in project.fleet],
                              project.task.kind)
    return problems


def _check_build_location(project: Project) -> list[str]:
    """``project.build_dir`` is a folder of its own: stages write and clear files under it, so it must not
    be the project folder, one of its parents, or a filesystem root."""
    build, root = project.build_dir, project.root.resolve()
    given = project.project.build_dir
    if not given.strip():
        what = "is empty, which is the project folder itself"
    elif build == root:
        what = f"is the project folder itself ({build})"
    elif build == Path(build.anchor):
        what = f"is a filesystem root ({build})"
    elif build in root.parents:
        what = f"is {build}, a parent of the project folder {root}"
    else:
        return []
    return [f"project.build_dir: {given!r} {what}: every stage writes and replaces its outputs there; "
            'name a folder of its own (the default is "build")']


def _with_model_defaults(source: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """An Ultralytics model (checkpoint or ONNX export) as ``model.source``: what ``[task]`` leaves out
    (kind, classes, input size, preprocessing, Ultralytics' val settings) comes from the model. Read
    without running the checkpoint's pickle (``edgebuild.project.ultralytics_facts.peek_checkpoint``)."""
    model = raw.get("model")
    name = model.get("source") if isinstance(model, dict) else None
    if not isinstance(name, str):
        return raw
    from edgebuild.project.ultralytics_facts import facts_for_source, fill_raw_defaults

    facts = facts_for_source((source.parent / name).resolve())
    return fill_raw_defaults(raw, facts) if facts else raw


def _check_model_source(project: Project) -> list[str]:
    """A model file is used as given: the keys that steer an export from PyTorch do not apply to it.
    An Ultralytics model's task, classes, image size, preprocessing and stride are checked against the project."""
    if project.model.source is None:
        return []
    from edgebuild.project.ultralytics_facts import facts_for_source, project_problems

    path = project.path(project.model.source)
    facts = facts_for_source(path) if path.is_file() else None
    problems = [f"model.source {project.model.source!r}: {p}" for p in project_problems(project, facts)] \
        if facts else []
    if facts and facts.told_by == "checkpoint":  # exported from PyTorch: the [export] keys apply
        return problems
    kind = _source_kind(project)[0]
    if kind == "hub" and project.task.kind != "classification":
        problems.append(f"model.source {project.model.source!r}: a torchvision or timm model by name is a "
                        f"classifier here; task.kind is {project.task.kind!r}: name a detection model with "
                        "model.entry_point instead")
    if kind in ("hub", "torchscript"):  # exported from PyTorch: the [export] keys apply
        return problems
    return problems + [f"export.{key}: applies to an export from model.entry_point; model.source "
                       f"{project.model.source!r} is used as given (its own opset, outputs and weights): "
                       f"remove export.{key}" for key in sorted(project.export.model_fields_set)]


def model_source_kind(project: Project) -> tuple[str, str]:
    """What ``model.source`` is (``"onnx"``, ...) and what told it: ``model.kind``,
    the file's suffix, or its first bytes. A file that says nothing edgebuild reads is a ConfigError."""
    kind, told = _source_kind(project)
    if kind is None:
        raise ConfigError(f"{project.source}: {told}", hint='set model.kind = "onnx" if it is an ONNX model')
    return kind, told


def _source_kind(project: Project) -> tuple[str | None, str]:
    """(kind, what told it), or (None, why not) for a source that is none of MODEL_SOURCE_KINDS."""
    model = project.model
    if model.source is None:
        return None, "model.entry_point"
    if HUB_SOURCE.match(model.source):
        return "hub", "its name (library:model)"
    if model.kind is not None:
        return model.kind, "model.kind"
    if not model.source.strip():
        return None, 'model.source: empty: name the model file (e.g. "model.onnx")'
    path = project.path(model.source)
    if path.is_dir():
        return None, f"model.source: {path} is a folder, not a model file (name the model file in it)"
    if path.suffix.lower() == ".onnx":
        return "onnx", "its .onnx suffix"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as exc:
        return None, f"model.source: cannot read {path}: {exc.strerror or exc}"
    if not head:
        return None, f"model.source: {path} is empty (0 bytes): a download or copy that failed? Copy it again"
    if len(head) > 1 and head[0] == 0x08 and 0 < head[1] < 64:  # a ModelProto starts with ir_version (field 1)
        return "onnx", "its content (an ONNX ModelProto)"
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        return None, (f"model.source: {path} is a truncated or damaged zip archive (its table of contents at the end "
                      "is missing): a download or copy that did not finish? Copy it again")
    if head == b"PK\x03\x04":
        from edgebuild.project.ultralytics_facts import facts_from_checkpoint

        if is_torchscript_archive(path):
            return "torchscript", "its content (a TorchScript archive)"

        facts = facts_from_checkpoint(path)  # read without running the pickle
        if facts is not None:
            return "ultralytics", f"its content (an Ultralytics {facts.model_class} checkpoint)"
    what = ("a zip archive that is neither TorchScript nor an Ultralytics checkpoint: a PyTorch checkpoint? "
            "Build such a model in Python and name "
            "that function with model.entry_point (and its weights with model.weights)" if head == b"PK\x03\x04"
            else "a Python pickle: a PyTorch checkpoint? Name the function that builds the model with "
                 "model.entry_point and the file with model.weights" if head[:1] == b"\x80"
            else "not ONNX by its suffix or its first bytes")
    return None, f"model.source: cannot tell what kind of model {path} is ({what})"


def is_torchscript_archive(path: Path) -> bool:
    """Whether ``path`` is a zip archive that TorchScript wrote (``torch.jit.save``: ``constants.pkl``, ``code/``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(n.endswith("/constants.pkl") or "/code/" in n for n in names)


def _check_batching(project: Project) -> list[str]:
    """Dynamic batching stacks requests on axis 0, so that axis must be dynamic and reach the batch size."""
    size = project.runtime.max_batch_size
    problems = [f"runtime.preferred_batch_size: {wrong} is outside 2 to max_batch_size ({size}): a batch size the "
                "batcher runs at once when it is reached" for wrong in
                [[s for s in project.runtime.preferred_batch_size if not 2 <= s <= size]] if wrong]
    if size == 1:
        return problems
    return problems + [
        f"runtime.max_batch_size: {size} needs input {spec.name!r} to take a batch of {size} on axis 0, "
        f"but its max_shape is {spec.max_shape}; raise max_shape[0] or lower max_batch_size"
        for spec in project.model.inputs if spec.max_shape[0] < size]


def _check_model_against_task(project: Project) -> list[str]:
    problems: list[str] = []
    task = project.task
    outputs = project.model.outputs
    if len(set(outputs)) != len(outputs):
        problems.append(f"model.outputs: names must be unique, found {outputs}")
    names = [spec.name for spec in project.model.inputs]
    if len(set(names)) != len(names):
        problems.append(f"model.inputs: names must be unique, found {names}")
    if task.kind == "classification":
        wanted = {"task.postprocess.logits_output": task.postprocess.logits_output}
    else:  # detection, segmentation, pose: their outputs are named by the *_output keys
        wanted = {f"task.postprocess.{key}": value for key, value in task.postprocess.model_dump().items()
                  if key.endswith("_output")}
    allowed_metrics = TASK_KINDS[task.kind][1]
    for key, name in wanted.items():
        if name not in outputs:
            problems.append(f"{key}: {name!r} is not one of model.outputs {outputs}")
    if project.metric not in allowed_metrics:
        problems.append(
            f"accuracy.metric: {project.metric!r} does not apply to {task.kind} "
            f"(allowed: {', '.join(allowed_metrics)})"
        )
    tracking = project.accuracy.tracking
    if tracking is not None and tracking.enabled and task.kind != "detection":
        problems.append(f"accuracy.tracking: the tracking gate follows a detector's boxes; this task is {task.kind} "
                        "(remove [accuracy.tracking] or set enabled = false)")
    if len(set(task.classes)) != len(task.classes):
        problems.append(f"task.classes: class names must be unique, found {task.classes}")
    top_k = re.fullmatch(r"top-(\d+)", project.metric)
    if top_k and task.kind == "classification" and int(top_k.group(1)) >= len(task.classes) > 0:
        problems.append(
            f"accuracy.metric: {project.metric!r} with {len(task.classes)} classes in task.classes: the right "
            f"class is always among the top {top_k.group(1)}, so it scores 1.0 and the gate can never fail; "
            "use \"top-1\""
        )
    image_input = project.model.inputs[0]
    if len(image_input.opt_shape) != 4:
        problems.append(
            f"model.inputs[0].opt_shape: the image input must be NCHW (rank 4), found {image_input.opt_shape}"
        )
    else:
        pre = task.preprocess
        if image_input.opt_shape[1] != pre.channels:
            problems.append(
                f"model.inputs[0]: {image_input.opt_shape[1]} channels, but task.preprocess.channel_order "
                f"{pre.channel_order!r} gives {pre.channels}"
                + (f" (opt_shape {image_input.opt_shape} looks channels-last, NHWC; edgebuild feeds images "
                   "[N, C, H, W]: export the model with an NCHW input)"
                   if image_input.opt_shape[3] == pre.channels else "")
            )
        for axis, size in zip((2, 3), pre.input_size):
            lo, hi = image_input.min_shape[axis], image_input.max_shape[axis]
            if not lo <= size <= hi:
                problems.append(
                    f"task.preprocess.input_size: {pre.input_size} is outside the shape range of input "
                    f"{image_input.name!r} on axis {axis} ({lo}..{hi})"
                )
    return problems


def _check_data(project: Project) -> list[str]:
    """Which keys name the data, and whether they fit together and the task (the files are read later,
    by edgebuild.datasets: loading a project reads no data)."""
    data, val, kind = project.data, project.data.validation, project.task.kind
    problems: list[str] = []
    if data.format is not None:
        wanted = "classification" if data.format == "folders" else "detection"
        if wanted != kind:
            allowed = "folders" if kind == "classification" else "yolo, coco, voc"
            problems.append(f"data.format: {data.format!r} is {wanted} data; task.kind is {kind!r} "
                            f"(allowed: {allowed})")
    if data.dataset is None:
        if data.calibration_images is None:
            problems.append("data.calibration_images: required key is missing (a folder of images; or name a "
                            "dataset with splits as data.dataset to calibrate on its calibration_split)")
        if val.images is None:
            problems.append("data.validation.images: required key is missing (or name a dataset with splits "
                            "as data.dataset)")
        for key in sorted({"calibration_split", "validation_split"} & data.model_fields_set):
            problems.append(f"data.{key}: applies to a dataset with splits, and data.dataset is not set")
        if data.format == "yolo":
            problems.append('data.format: "yolo" reads a data.yaml, which data.dataset names (not set)')
        elif kind == "detection" and val.annotations is None:
            problems.append("data.validation.annotations: detection needs annotations: a COCO JSON file or a "
                            "folder of Pascal VOC XML files (or a YOLO data.yaml as data.dataset)")
        return problems
    for key in ("images", "annotations"):
        if getattr(val, key) is not None:
            problems.append(f"data.validation.{key}: not used with data.dataset (the validation set is its "
                            f"{data.validation_split!r} split); remove one of them")
    if data.calibration_split == data.validation_split and data.calibration_images is None:
        problems.append(f"data.calibration_split: {data.calibration_split!r} is also data.validation_split: INT8 "
                        "ranges fitted on the images that then judge them make the gate look better than the "
                        "model will do; calibrate on the training split")
    if data.format == "coco":
        problems.append('data.format: "coco" is one annotations file: name it with data.validation.annotations '
                        "(and its images with data.validation.images), not with data.dataset")
    return problems


def data_paths(project: Project) -> dict[str, Path]:
    paths = {}
    if project.data.dataset:
        paths["data.dataset"] = project.path(project.data.dataset)
    if project.data.calibration_images:
        paths["data.calibration_images"] = project.path(project.data.calibration_images)
    if project.data.validation.images:
        paths["data.validation.images"] = project.path(project.data.validation.images)
    if project.data.validation.annotations:
        paths["data.validation.annotations"] = project.path(project.data.validation.annotations)
    if project.accuracy.tracking is not None and project.accuracy.tracking.sequences:
        paths["accuracy.tracking.sequences"] = project.path(project.accuracy.tracking.sequences)
    if project.model.weights:
        paths["model.weights"] = project.path(project.model.weights)
    if project.model.source and not HUB_SOURCE.match(project.model.source):  # a hub's name is no path
        paths["model.source"] = project.path(project.model.source)
    return paths


def _check_paths_exist(project: Project) -> list[str]:
    """Paths that do not exist. Data that ``data.prepare`` makes is not asked for here: loading a
    project runs no user code (``edgebuild.datasets.project_data.prepare_data`` runs it, before a stage reads data)."""
    missing = {k: p for k, p in data_paths(project).items() if not p.exists()}
    if project.data.prepare:
        missing = {k: p for k, p in missing.items() if not k.startswith("data.")}
    problems = [f"{key}: path does not exist: {path}" for key, path in missing.items()]
    if project.model.source and "model.source" not in missing and _source_kind(project)[0] is None:
        problems.append(_source_kind(project)[1])
    if project.ota.signing_key and not project.path(project.ota.signing_key).is_file():
        key = project.path(project.ota.signing_key)
        problems.append(f"ota.signing_key: {'a folder, not a key file' if key.is_dir() else 'file not found'}: {key}")
    problems += _check_build_dir(project)
    problems += check_regions_file(project.runtime.tracking, project.root)
    return problems


def _check_build_dir(project: Project) -> list[str]:
    """``project.build_dir``: a folder, or a path one can be made at (no file on the way)."""
    build = project.build_dir
    for path in (build, *build.parents):
        if path.exists():
            if path.is_dir():
                return []
            what = "is a file" if path == build else f"cannot be made: {path} is a file"
            return [f"project.build_dir: {build} {what}, not a folder (every stage writes its outputs there)"]
    return []
