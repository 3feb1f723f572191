"""An ONNX file as the model (``[model] source = "model.onnx"``): checked, evaluated and imported, no PyTorch.

What this source yields to the pipeline, stage by stage:

- model: ``onnx_key_parts`` (the file and its external data, hashed, with the declared inputs and
  outputs) and ``check_onnx_model``, which loads the file, runs the full ONNX checker (strict shape
  inference), checks its opset against the fleet's TensorRT parsers, its inputs against
  ``[model.inputs]`` and their min/opt/max profile (``edgebuild.sources.onnx_checks``), and its
  outputs against the task by running it with ONNX Runtime at those shapes. Record:
  ``OnnxModelRecord``, a ``ModelRecord`` with what the file is.
- reference: ``onnx_runner``, ONNX Runtime on the CPU over the file, for ``evaluate``.
- export: ``import_onnx`` copies the file into ``build/export/opset<N>/`` (N: the file's own opset)
  with an ``ExportRecord`` shaped as an export's (exporter ``"import"``, no parity: the checks run
  are in ``exporter_note``), so preflight, gate, engine, container and package read it unchanged.

An Ultralytics detection export's raw head ([N, 4+C, A]) gets edgebuild's adapter appended as ONNX
nodes (``model_path``: a copy under ``build/sources/``, made once per content); the runner and the
import use that copy, and the keys name the adapter. An export of an NMS-free head (YOLOv10/YOLO26
with ``nms=False``: metadata ``end2end``, one output [N, K, 6]) gets its top-k mapped to the four
outputs NMS inside the model has, the same way (``append_top_k_adapter``): no NMS is added.
A pose, segment or OBB export (in a project of its task) gets its head, and a segment export's
prototypes, split into the task's outputs (``append_instance_adapter``), the values the checkpoint's
adapter gives.

No PyTorch is imported on this route. torch is not needed to read the file, and ultralytics is never
imported: an Ultralytics export's metadata is read from the file itself.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import atomic_output_dir, digest, file_sha256, tool_versions
from edgebuild.errors import EdgebuildError, ModelError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import INSTANCE_KINDS
from edgebuild.project.ultralytics_facts import UltralyticsFacts
from edgebuild.sources.entry_point import ModelRecord
from edgebuild.sources.export.checks import SHAPES
from edgebuild.text import Progress

if TYPE_CHECKING:
    import onnx

    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.sources.onnx_checks import UltralyticsSummary
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["read_model_record"]

IMPORTER = "import"  # ExportRecord.exporter of an imported ONNX
_TOOLS = ("onnx", "onnxruntime")



@dataclass(frozen=True)
class OnnxModelRecord(ModelRecord):
    """The model stage's result for a model file: ``entry_point`` holds ``model.source`` as written."""

    kind: str = "onnx"
    told_by: str = ""  # what said it is ONNX: model.kind, its suffix, its content
    path: str = ""
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256: the model and its external data
    opset: int = 0
    fleet_opset: int = 0  # the highest opset every selected target's TensorRT parser takes
    producer: str = ""
    metadata: dict[str, str] = field(default_factory=dict)  # metadata_props, values cut to 200 characters
    #: task, classes, imgsz, stride: what an Ultralytics export says of itself (None, stored as {}: another file)
    ultralytics: UltralyticsSummary | None = None
    checks: list[str] = field(default_factory=list)  # what was checked, in order

    def as_dict(self) -> JsonObject:
        data = asdict(replace(self, ultralytics=None))
        data["ultralytics"] = self.ultralytics.as_dict() if self.ultralytics is not None else {}
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> OnnxModelRecord:
        from edgebuild.sources.onnx_checks import UltralyticsSummary

        return cls(**{**data, "ultralytics": UltralyticsSummary.from_dict(data.get("ultralytics") or {})})


def read_model_record(data: JsonObject) -> ModelRecord:
    """A stored model record of any route (an entry point's has no ``kind``)."""
    if data.get("kind") == "ultralytics":
        from edgebuild.sources.ultralytics.checkpoint import UltralyticsModelRecord

        return UltralyticsModelRecord(**{**data, "ultralytics": UltralyticsFacts(**data["ultralytics"])})
    if data.get("kind") in ("torchscript", "hub"):
        from edgebuild.sources.torch_source import TorchSourceModelRecord

        return TorchSourceModelRecord(**data)
    return OnnxModelRecord.from_dict(data) if "kind" in data else ModelRecord(**data)


# -- what the model is: its key -------------------------------------------------------------------

def source_path(project: Project) -> Path:
    return project.path(_source(project))


def _source(project: Project) -> str:
    assert project.model.source is not None, "the ONNX route runs only for a model.source"
    return project.model.source


# An Ultralytics detection export's raw head, [N, 4+C, A], gets edgebuild's adapter appended
# (edgebuild.sources.ultralytics.adapter.append_detection_adapter): the graph the later stages use is that
# adapted copy, written once per source content and output names under build/sources/.
ADAPTER = "ultralytics-detect-v1"
# A pose, segment or OBB export's head (and prototypes) split into the task's outputs as the checkpoint's
# adapter splits them (append_instance_adapter; docs/tasks.md "The outputs")
INSTANCE_ADAPTER = "ultralytics-instance-v1"
# An export of an NMS-free head (YOLOv10/YOLO26 with nms=False: metadata end2end, output [N, K, 6])
# gets its top-k mapped to NMS_OUTPUTS instead (append_top_k_adapter): no NMS is added
TOP_K_ADAPTER = "ultralytics-top-k-v1"


def model_path(project: Project) -> Path:
    """The ONNX the stages run and import: ``model.source``, or its adapted copy for an Ultralytics raw head."""
    adapted = _adapted(project)
    return adapted[0] if adapted else source_path(project)


def _adapted(project: Project, *, write: bool = True) -> tuple[Path, str] | None:
    """(the adapted copy, its head output) for an Ultralytics detection, pose, segment or OBB export, written if
    absent (unless ``write`` is false: a key names it without making it); else None."""
    path = source_path(project)
    stamp = _stamp(path)
    if stamp is not None and project.task.kind in INSTANCE_KINDS:
        return _adapted_instance(project, path, stamp, write)
    if stamp is None or project.task.kind != "detection":
        return None
    post = project.task.postprocess
    top_k, classes = _top_k_head(str(path), *stamp, len(project.task.classes)), len(project.task.classes)
    head = top_k[0] if top_k else _raw_head(str(path), *stamp, classes)
    if head is None:
        return None
    layout = top_k[1] if top_k else ""
    detr = [layout, post.max_detections] if layout else []  # RT-DETR: its layout, its top-k
    name = digest([TOP_K_ADAPTER, source_files(path), head, post.score_threshold, *detr] if top_k else
                  [ADAPTER, source_files(path), head, post.boxes_output, post.scores_output, classes])[:16]
    target = BuildLayout.of(project).adapted_sources / f"{path.stem}-{name}.onnx"
    if write and not target.is_file():
        import onnx

        from edgebuild.sources.ultralytics.adapter import append_detection_adapter, append_top_k_adapter
        from edgebuild.sources.ultralytics.detr import append_detr_rows

        threshold, proto = float(post.score_threshold), onnx.load(str(path))
        proto = append_top_k_adapter(*append_detr_rows(proto, head, layout, classes, post.max_detections),
                                     threshold) if detr else \
            append_top_k_adapter(proto, head, threshold) if top_k else \
            append_detection_adapter(proto, head, post.boxes_output, post.scores_output, classes)
        _save(proto, target)
    return target, head


def _adapted_instance(project: Project, path: Path, stamp: tuple[int, int], write: bool) -> tuple[Path, str] | None:
    """``_adapted`` for a pose, segment or OBB export: its head (and prototypes) split into the task's outputs."""
    classes, kpt_shape = len(project.task.classes), tuple(getattr(project.task, "kpt_shape", ()))
    found = _instance_head(str(path), *stamp, project.task.kind, classes, kpt_shape)
    if found is None:
        return None
    task, head, prototypes = found
    names = _instance_names(project)
    name = digest([INSTANCE_ADAPTER, source_files(path), task, head, prototypes, names, classes, kpt_shape])[:16]
    target = BuildLayout.of(project).adapted_sources / f"{path.stem}-{name}.onnx"
    if write and not target.is_file():
        import onnx

        from edgebuild.sources.ultralytics.adapter import append_instance_adapter

        _save(append_instance_adapter(onnx.load(str(path)), task, head, names, classes, kpt_shape, prototypes),
              target)
    return target, head if prototypes is None else f"{head}, {prototypes}"


def _instance_names(project: Project) -> list[str]:
    """The task's outputs in the order the adapter gives them (boxes, scores, then keypoints or mask
    coefficients and prototypes), as the checkpoint route's adapter names them."""
    return [v for k, v in project.task.postprocess.model_dump().items() if k.endswith("_output")]


@lru_cache(maxsize=8)
def _instance_head(path: str, mtime_ns: int, size: int, kind: str, classes: int,
                   kpt_shape: tuple[int, ...]) -> tuple[str, str, str | None] | None:
    """(Ultralytics' task, the head output, the prototypes output or None) of an Ultralytics export of the
    project's task ``kind`` (by its metadata_props), or None."""
    import onnx

    from edgebuild.project.ultralytics_facts import TASKS
    from edgebuild.sources.onnx_checks import metadata, ultralytics_summary
    from edgebuild.sources.ultralytics.adapter import instance_head_outputs

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # the model stage says what is wrong with it
        return None
    summary = ultralytics_summary(metadata(proto))
    if summary is None or TASKS.get(summary.task) != kind:
        return None
    task = summary.task
    found = instance_head_outputs(proto, task, len(summary.classes) or classes, kpt_shape)
    return (task, *found) if found else None


def _save(proto: onnx.ModelProto, target: Path) -> None:
    import onnx

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(f".{time.time_ns()}.tmp")
    onnx.save_model(proto, str(staging))
    staging.replace(target)


def _adapted_outputs(project: Project) -> tuple[str, str]:
    """The adapter's outputs: the task's boxes and scores."""
    task = project.task
    assert task.kind == "detection", "only a detection task's raw head is adapted"
    return task.postprocess.boxes_output, task.postprocess.scores_output


def _is_top_k(project: Project) -> bool:
    stamp = _stamp(source_path(project))
    return stamp is not None and project.task.kind == "detection" and \
        _top_k_head(str(source_path(project)), *stamp, len(project.task.classes)) is not None


@lru_cache(maxsize=8)
def _top_k_head(path: str, mtime_ns: int, size: int, classes: int) -> tuple[str, str] | None:
    """(the output, "") of an Ultralytics export of an NMS-free head (metadata end2end: [N, K, 6]), or (the output,
    its layout) of an RT-DETR export (edgebuild.sources.ultralytics.detr); else None."""
    import onnx

    from edgebuild.project.ultralytics_facts import facts_from_props
    from edgebuild.sources.onnx_checks import metadata
    from edgebuild.sources.ultralytics.adapter import top_k_output
    from edgebuild.sources.ultralytics.detr import detr_head_output, export_layout

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # the model stage says what is wrong with it
        return None
    facts = facts_from_props(metadata(proto))
    if facts is not None and facts.detr:
        head = detr_head_output(proto)
        layout = export_layout(proto, head, len(facts.classes) or classes) if head else None
        return (head, layout) if head and layout else None
    head = top_k_output(proto) if facts is not None and facts.nms_free else None
    return (head, "") if head else None


@lru_cache(maxsize=8)
def _raw_head(path: str, mtime_ns: int, size: int, classes: int) -> str | None:
    """The raw detection head output of an Ultralytics detect export (by its metadata_props), or None."""
    import onnx

    from edgebuild.sources.onnx_checks import metadata, ultralytics_summary
    from edgebuild.sources.ultralytics.adapter import raw_head_output

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # the model stage says what is wrong with it
        return None
    summary = ultralytics_summary(metadata(proto))
    if summary is None or summary.task != "detect":
        return None
    return raw_head_output(proto, len(summary.classes) or classes)


def source_files(path: Path) -> dict[str, str]:
    """{file name: sha256} of an ONNX file and every external data file it names ("missing" where absent).

    Each file is hashed (and the model parsed for its data files) once per content stamp (its mtime
    and size): the model, reference and export stages all key on it."""
    stamp = _stamp(path)
    if stamp is None:
        return {path.name: "missing"}
    found = {path.name: _sha256(str(path), *stamp)}
    for location in _locations(str(path), *stamp):
        data = path.parent / location
        data_stamp = _stamp(data)
        found[location] = _sha256(str(data), *data_stamp) if data_stamp else "missing"
    return dict(sorted(found.items()))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size) if path.is_file() else None


@lru_cache(maxsize=32)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


@lru_cache(maxsize=8)
def _locations(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    from edgebuild.sources.onnx_checks import external_locations

    return tuple(external_locations(Path(path)))


def onnx_key_parts(project: Project) -> dict[str, str]:
    """What the model is on this route: the file (and its external data) and the declared inputs/outputs."""
    from edgebuild.project.config import model_source_kind

    kind, _ = model_source_kind(project)
    parts = {
        "source": _source(project),
        "kind": kind,
        "files": digest(source_files(source_path(project))),
        "io": digest([[s.model_dump() for s in project.model.inputs], project.model.outputs]),
    }
    adapted = _adapted(project, write=False)
    if adapted and project.task.kind in INSTANCE_KINDS:
        parts["adapter"] = f"{INSTANCE_ADAPTER}: {adapted[1]} -> {', '.join(_instance_names(project))}"
    elif adapted and _is_top_k(project):
        from edgebuild.project.ultralytics_facts import source_facts

        post, facts = project.detection_postprocess, source_facts(project)
        parts["adapter"] = f"{TOP_K_ADAPTER}: {adapted[1]} -> NMS_OUTPUTS, score > {post.score_threshold}" + \
            (f", RT-DETR top {post.max_detections}" if facts is not None and facts.detr else "")
    elif adapted:
        boxes, scores = _adapted_outputs(project)
        parts["adapter"] = f"{ADAPTER}: {adapted[1]} -> {boxes}, {scores}"
    return parts


def fleet_opset(project: Project, groups: Sequence[SelectedGroup]) -> tuple[int, str]:
    """The highest opset every selected target's TensorRT parser takes, and which parsers cap it."""
    from edgebuild.sources.export.onnx_export import choose_opset

    return choose_opset(project, [g.target.release for g in groups])


def model_check_key_parts(project: Project, groups: Sequence[SelectedGroup]) -> dict[str, str]:
    """The model stage's key on this route: the file, the task's outputs, the fleet's opset, the tools."""
    from edgebuild.sources.task_outputs import task_outputs_key

    return {**onnx_key_parts(project), "task_outputs": task_outputs_key(project),
            "fleet_opset": str(fleet_opset(project, groups)[0]), "tools": digest(tool_versions(*_TOOLS))}


# -- the model stage --------------------------------------------------------------------------------

def check_onnx_model(project: Project, groups: Sequence[SelectedGroup], *,
                     progress: Progress = lambda _: None, run: bool = True) -> OnnxModelRecord:
    """Every check an ONNX file passes before the pipeline uses it as the model; raises ModelError.

    In order: it loads, the full checker and strict shape inference pass, its opset is one every
    selected target's TensorRT parses, an Ultralytics raw head is named, the inputs fit
    ``[model.inputs]`` and the profile, the outputs are ``model.outputs``, the profile's image sizes
    are multiples of the model's stride, and ONNX Runtime's outputs at the min, opt and max shapes
    are what the task reads (``run=False``: all but that run, for ``edgebuild check`` of a big file).
    """
    from edgebuild.project.config import model_source_kind
    from edgebuild.sources import onnx_checks as checks
    from edgebuild.sources.entry_point import example_inputs
    from edgebuild.sources.task_outputs import raise_for_task_outputs

    started = time.perf_counter()
    kind, told_by = model_source_kind(project)
    path = source_path(project)
    files = source_files(path)
    proto = checks.load_structure(project, path)
    missing = [name for name, sha in files.items() if sha == "missing" and name != path.name]
    if missing:
        raise ModelError(f"{project.source}: model.source: {path.name} keeps weights in {', '.join(missing)}, "
                         f"not found in {path.parent}", hint="copy the external data file(s) next to the model, "
                                                             "under the name(s) the model gives")
    checks.raise_for_checker(project, path)
    done = ["ONNX checker (full, with strict shape inference)"]
    opset = checks.default_opset(project, path, proto)
    ceiling = fleet_opset(project, groups)[0]
    if opset > ceiling:
        raise checks.opset_error(project, path, opset, ceiling, groups)
    done.append(f"opset {opset} <= {ceiling}, the highest every selected target's TensorRT parser takes")
    metadata = checks.metadata(proto)
    ultralytics = checks.ultralytics_summary(metadata, proto)
    if ultralytics is not None:
        progress("model: " + ultralytics.summary)
    adapted = _adapted(project) if ultralytics is not None else None
    utask = ultralytics.task if ultralytics is not None else ""
    if adapted and project.task.kind in INSTANCE_KINDS:
        proto = checks.load_structure(project, adapted[0])
        checks.raise_for_checker(project, adapted[0])
        names = ", ".join(_instance_names(project))
        done.append(f"Ultralytics {utask} head {adapted[1]!r} adapted by appended nodes to {names} "
                    f"(docs/tasks.md, the outputs; {adapted[0].name}); the checker passes")
        progress(f"model: appended edgebuild's Ultralytics {utask} adapter: {adapted[1]} -> {names}")
    elif adapted and _is_top_k(project):
        from edgebuild.project.ultralytics_facts import NMS_FREE_NOTE

        proto = checks.load_structure(project, adapted[0])
        checks.raise_for_checker(project, adapted[0])
        done.append(f"{NMS_FREE_NOTE}: the export's top-k {adapted[1]!r} [N, K, 6] mapped by appended nodes to "
                    f"num_detections, detection_boxes, detection_scores, detection_classes ({adapted[0].name})")
        progress(f"model: {NMS_FREE_NOTE}: {adapted[1]} [N, K, 6] -> num_detections, detection_boxes, "
                 "detection_scores, detection_classes")
    elif adapted:
        proto = checks.load_structure(project, adapted[0])
        checks.raise_for_checker(project, adapted[0])
        boxes, scores = _adapted_outputs(project)
        done.append(f"Ultralytics raw head {adapted[1]!r} [N, 4+C, A] adapted by appended nodes to "
                    f"{boxes!r} [N, A, 4] (x1, y1, x2, y2) and {scores!r} [N, A, C] ({adapted[0].name}); "
                    "the checker passes")
        progress(f"model: appended edgebuild's Ultralytics adapter: {adapted[1]} [N, 4+C, A] -> {boxes}, {scores}")
    checks.raise_for_ultralytics_head(project, path, ultralytics, checks.graph_output_dims(proto))
    checks.raise_for_inputs(project, path, proto)
    done.append(f"inputs {[s.name for s in project.model.inputs]} against [model.inputs]: names, rank, dtype, "
                "the min/opt/max profile")
    checks.raise_for_output_names(project, path, proto, ultralytics)
    stride = checks.model_stride(project, ultralytics, checks.graph_output_dims(proto))
    checks.raise_for_stride(project, path, stride)
    if stride:
        done.append(f"image sizes multiples of the model's stride {stride[0]} ({stride[1]})")

    def record(shapes: dict[str, dict[str, list[int]]]) -> OnnxModelRecord:
        return OnnxModelRecord(
            entry_point=_source(project), parameters=checks.parameter_count(proto), output_shapes=shapes,
            seconds=round(time.perf_counter() - started, 3), kind=kind, told_by=told_by, path=str(path), files=files,
            opset=opset, fleet_opset=ceiling, producer=f"{proto.producer_name} {proto.producer_version}".strip(),
            metadata={k: v[:200] for k, v in metadata.items()}, ultralytics=ultralytics, checks=done)

    if not run:
        return record({})
    runner = onnx_runner(project)
    runs = {}
    for which in ("opt_shape", "min_shape", "max_shape"):  # opt first: the size the model is made for
        inputs = example_inputs(project, which, seed=SHAPES.index(which))
        try:
            outputs = runner.run(inputs)
        except EdgebuildError as exc:
            checks.raise_for_stride(project, path, _probed_stride(project, runner, ultralytics))
            raise ModelError(f"{project.source}: model.source: {exc.message}") from None
        runs[which] = (inputs, {name: outputs[name] for name in project.model.outputs})
        if which == "opt_shape" and stride is None:  # a detector's anchors tell its stride
            stride = checks.model_stride(project, ultralytics, {n: list(a.shape) for n, a in outputs.items()})
            checks.raise_for_stride(project, path, stride)
            if stride:
                done.append(f"image sizes multiples of the model's stride {stride[0]} ({stride[1]})")
    runs = {which: runs[which] for which in SHAPES}
    checks.raise_for_ultralytics_head(project, path, ultralytics,
                                      {n: list(a.shape) for n, a in runs["opt_shape"][1].items()})
    try:
        raise_for_task_outputs(project, runs)
    except ModelError as exc:
        raise ModelError(exc.message, hint=checks.OUTPUTS_HINT) from None
    done.append(f"outputs {list(project.model.outputs)} against the {project.task.kind} task, run with "
                f"{runner.backend} at the min/opt/max shapes")
    return record({which: {name: list(array.shape) for name, array in outputs.items()}
                   for which, (_, outputs) in runs.items()})


def _probed_stride(project: Project, runner: OnnxRuntimeRunner,
                   ultralytics: UltralyticsSummary | None) -> tuple[int, str] | None:
    """A detector that fails to run at the profile's size: its stride, from its anchors at a size that is a
    multiple of 64 near the opt size (None where it says nothing or fails there too)."""
    from edgebuild.sources import onnx_checks as checks
    from edgebuild.sources.entry_point import example_inputs

    if project.task.kind != "detection" or len(project.model.inputs) != 1 or \
            len(project.model.inputs[0].opt_shape) != 4:
        return checks.model_stride(project, ultralytics, {})
    spec = project.model.inputs[0]
    size = [max(64, round(side / 64) * 64) for side in spec.opt_shape[2:]]
    inputs = example_inputs(project.model_copy(update={"model": project.model.model_copy(update={"inputs": [
        spec.model_copy(update={"opt_shape": [spec.min_shape[0], spec.opt_shape[1], *size]})]})}))
    try:
        outputs = runner.run(inputs)
    except EdgebuildError:
        return None
    return checks.model_stride(project, ultralytics, {n: list(a.shape) for n, a in outputs.items()}, size)


def describe_model(record: OnnxModelRecord) -> str:
    """The model stage's line for a model file."""
    made = f", from {record.producer}" if record.producer else ""
    ultralytics = f"; {record.ultralytics.summary}" if record.ultralytics is not None else ""
    return (f"{record.entry_point} [{record.kind}, told by {record.told_by}] (opset {record.opset}, "
            f"{record.parameters:,} parameters{made}){ultralytics}; checked, ONNX Runtime at min/opt/max shapes "
            f"in {record.seconds:.1f} s")


# -- the reference stage ----------------------------------------------------------------------------

def onnx_runner(project: Project) -> OnnxRuntimeRunner:
    """ONNX Runtime (CPU) over ``model.source``: the route's FP32 reference backend."""
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    try:
        return OnnxRuntimeRunner(model_path(project))
    except EdgebuildError as exc:
        raise ModelError(f"{project.source}: model.source: {exc.message}") from None


# -- the export stage: an import ------------------------------------------------------------------

def import_key_parts(project: Project, model: OnnxModelRecord) -> dict[str, str]:
    """What an import depends on: the file, its opset, the fleet's opset (named in the record), the tools."""
    return {**onnx_key_parts(project), "opset": str(model.opset), "fleet_opset": str(model.fleet_opset),
            "exporter": IMPORTER, "tools": digest(tool_versions(*_TOOLS))}


def import_onnx(project: Project, model: OnnxModelRecord, groups: Sequence[SelectedGroup], *,
                progress: Progress = lambda _: None) -> ExportRecord:
    """Copy the checked file into ``build/export/opset<N>/model.onnx`` and say so in an ``ExportRecord``.

    The copy is the file as given; a file with external data is written again with its data in
    ``model.onnx.data`` (the names later stages expect). Either way the result must be what the model
    stage checked: a file changed since is refused.
    """
    from edgebuild.sources.export.onnx_export import MODEL_FILE, RECORD_FILE, ExportRecord, export_dir
    from edgebuild.sources.onnx_checks import dynamic_axis_names, load_structure, raise_for_checker

    started = time.perf_counter()
    path = source_path(project)
    if source_files(path) != model.files:
        raise ModelError(f"{project.source}: model.source: {path} changed after the model stage checked it",
                         hint="run the compile again: the model stage checks the new file first")
    ceiling, reason = fleet_opset(project, groups)
    parts = import_key_parts(project, model)
    final = export_dir(project, model.opset)
    progress(f"export: importing {path.name} (opset {model.opset}) as given")
    with atomic_output_dir(final) as staging:
        target = staging / MODEL_FILE
        checks = list(model.checks)
        adapted = _adapted(project)
        if adapted:
            shutil.copyfile(adapted[0], target)
            raise_for_checker(project, target)
            checks.append(f"imported the adapted copy {adapted[0].name}; the ONNX checker passes on it")
        elif len(model.files) == 1:
            shutil.copyfile(path, target)
            if file_sha256(target) != model.files[path.name]:
                raise ModelError(f"{project.source}: model.source: the copy of {path} differs from the file")
            checks.append("the copy's sha256 is the checked file's")
        else:
            _rewrite_external(project, path, target)
            raise_for_checker(project, target)
            checks.append(f"external data {sorted(set(model.files) - {path.name})} moved to {MODEL_FILE}.data; "
                          "the ONNX checker passes on the copy")
        files = {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        record = ExportRecord(
            onnx_path=final / MODEL_FILE, files=files, opset=model.opset,
            opset_reason=f"the opset model.source was exported at ({ceiling} is the {reason})",
            exporter=IMPORTER,
            exporter_note=f"imported {project.model.source} as given, no export (parity with itself is moot); "
                          f"checks run: {'; '.join(checks)}",
            simplified=False, simplify_note="not applied: an imported ONNX is used as given",
            inputs=list(project.model.inputs), outputs=list(project.model.outputs),
            dynamic_axes=dynamic_axis_names(project, load_structure(project, target)),
            atol=project.export.atol, rtol=project.export.rtol, parity=[], cache_key=digest(parts),
            key_parts=parts, versions=tool_versions(*_TOOLS), seconds=round(time.perf_counter() - started, 3))
        (staging / RECORD_FILE).write_text(json.dumps(record.as_dict(), indent=2))
    return record


def _rewrite_external(project: Project, path: Path, target: Path) -> None:
    """The model with its external data in one ``<name>.data`` beside it (small constants stay inline)."""
    import onnx

    try:
        proto: onnx.ModelProto = onnx.load(str(path))
    except Exception as exc:  # a missing or short external data file
        raise ModelError(f"{project.source}: model.source: cannot read {path} with its external data: "
                         f"{type(exc).__name__}: {exc}") from None
    onnx.save_model(proto, str(target), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{target.name}.data", size_threshold=1024)


def describe_import(record: ExportRecord) -> str:
    """The export stage's line for an imported file."""
    return (f"opset {record.opset}, imported as given (no export, no parity to check) -> "
            f"{record.onnx_path.parent.name}/{record.onnx_path.name}")
