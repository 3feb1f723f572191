"""The checks an ONNX file given as the model (``[model] source``) passes, each a ModelError naming the fix.

Read from the file's structure (loaded without its external data): that it is an ONNX protobuf, the
full checker with strict shape inference, the opset against the fleet's TensorRT parsers, the inputs
against ``[model.inputs]`` (names, rank, dtype, and which axes the min/opt/max profile may vary: a
fixed axis cannot), the outputs against ``model.outputs``, and what its ``metadata_props`` say.
Ultralytics' exports carry their task, class names, image size and stride there; their raw
detection head, [N, 4+C, A], gets edgebuild's adapter (``onnx_file.model_path``,
``edgebuild.sources.ultralytics.adapter.append_detection_adapter``); one the adapter does not apply to
(a project whose task is not detection, a head that is not the metadata's 4+C) is refused with what to do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.errors import ModelError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.ultralytics_facts import TASKS, UltralyticsFacts, facts_from_props, read_literal
from edgebuild.sources.export.tool_output import first_line

if TYPE_CHECKING:
    import onnx

    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["UltralyticsSummary", "graph_inputs", "graph_output_dims", "metadata", "ultralytics_summary"]

OUTPUTS_HINT = ("the ONNX file must output exactly what the task reads: export it again with such outputs, or "
                "build the model in Python with a wrapper torch.nn.Module that reshapes them and name it with "
                "model.entry_point instead of model.source")

_AXIS_NAMES = {0: "batch", 2: "height", 3: "width"}
_PROTOBUF_LIMIT = 2_000_000_000  # bytes: a bigger model is checked from its path


def _where(project: Project, path: Path) -> str:
    return f"{project.source}: model.source: {path.name}"


# -- the file ---------------------------------------------------------------------------------------

def load_structure(project: Project, path: Path) -> onnx.ModelProto:
    """The graph, without its external data (that stays on disk until the checker or a runner reads it)."""
    import onnx

    if not path.is_file():
        raise ModelError(f"{project.source}: model.source: file not found: {path}")
    from edgebuild.sources.file_kinds import content_kind

    try:
        proto = onnx.load(str(path), load_external_data=False)
        if not proto.graph.node and not proto.graph.output:
            raise ValueError("no graph")
        return proto
    except Exception as exc:  # protobuf's DecodeError and friends: not an ONNX model
        found, words = content_kind(path)
        what = (f"starts as an ONNX model but does not parse: truncated or damaged ({path.stat().st_size:,} bytes, "
                f"{type(exc).__name__}: {first_line(exc)})" if found == "onnx"
                else words.removeprefix(f"{path.name} ") if found in ("empty", "truncated")
                else f"is not an ONNX model: its bytes are {words}")
        raise ModelError(f"{_where(project, path)} {what}",
                         hint="a truncated copy or a download that failed? Export or copy the file again") from None


def raise_for_checker(project: Project, path: Path) -> None:
    """The full ONNX checker with strict shape inference, external data included.

    A model with external data under protobuf's 2 GB limit is checked in memory, its data loaded:
    shape inference cannot read a constant (a Reshape's shape, a ReduceMean's axes) left on disk.
    """
    import onnx

    try:
        external = [path.parent / name for name in external_locations(path)]
        size = path.stat().st_size + sum(p.stat().st_size for p in external if p.is_file())
        if external and size < _PROTOBUF_LIMIT:
            onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        else:
            onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # ValidationError, InferenceError, a missing external data file, ...
        which = "strict shape inference fails on" if isinstance(exc, onnx.shape_inference.InferenceError) \
            else "the ONNX checker refuses"
        raise ModelError(f"{project.source}: model.source: {which} {path.name} ({type(exc).__name__}: "
                         f"{first_line(exc)})",
                         hint="a damaged file, or one its exporter wrote wrong: export it again (for external "
                              "data, keep its data file next to it under the name the model gives)") from None


def external_locations(path: Path) -> list[str]:
    """The external data files an ONNX file names (relative to its folder); none for an unreadable file."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # the model stage says what is wrong with it
        return []
    found = []
    for tensor in _tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location and location not in found:
                found.append(location)
    return found


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _tensors(sub)


def parameter_count(proto: onnx.ModelProto) -> int:
    """Values in the graph's initializers (the weights), without loading external data."""
    total = 0
    for tensor in proto.graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= dim
        total += count
    return total


# -- the opset --------------------------------------------------------------------------------------

def default_opset(project: Project, path: Path, proto: onnx.ModelProto) -> int:
    found = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if found is None:
        raise ModelError(f"{_where(project, path)} imports no version of the default ONNX domain (opset_import: "
                         f"{[(o.domain, o.version) for o in proto.opset_import]})")
    return found


def opset_error(project: Project, path: Path, opset: int, ceiling: int, groups: Sequence[SelectedGroup]) -> ModelError:
    """An opset above what some selected target's TensorRT parser takes: which targets cap it."""
    capping = sorted({f"{g.name} ({g.target.id}: TensorRT {g.target.release.tensorrt} takes up to opset "
                      f"{g.target.release.max_onnx_opset})" for g in groups
                      if g.target.release.max_onnx_opset < opset})
    return ModelError(f"{_where(project, path)} is ONNX opset {opset}, above what these targets' TensorRT parser "
                      f"takes: {', '.join(capping)}",
                      hint=f"export the file again at opset {ceiling} or lower (Ultralytics: opset={ceiling}; "
                           f"torch.onnx.export: opset_version={ceiling}), or leave those targets out with --target")


# -- metadata: Ultralytics' exports -----------------------------------------------------------------

def metadata(proto: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in proto.metadata_props}


#: a metadata value as Ultralytics writes it, read as a Python literal (imgsz 640 or [h, w]; stride 32 or the strides),
#: or its text where it is no number or list of numbers
MetadataLiteral = int | float | str | list[int | float] | None


def _metadata_literal(text: str | None) -> MetadataLiteral:
    value = read_literal(text)
    if isinstance(value, tuple):
        value = list(value)
    if value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
        return value
    return text


@dataclass(frozen=True)
class UltralyticsSummary:
    """What an Ultralytics export says of itself, as its model record stores it (``OnnxModelRecord.ultralytics``):
    sparse, ``nms_free``/``max_det``, ``kpt_shape`` and ``names_unread`` written only where they are said."""

    task: str  # Ultralytics' name: detect, classify, segment, pose, obb
    classes: list[str]
    imgsz: MetadataLiteral
    stride: MetadataLiteral
    version: str
    nms_free: bool = False  # YOLOv10/YOLO26 exported with nms=False: its one-to-one top-k, [N, K, 6]
    max_det: int = 0  # that top-k's K
    detr: bool = False  # RT-DETR: a DETR decoder's top-k queries (edgebuild.sources.ultralytics.detr)
    kpt_shape: list[int] = field(default_factory=list)  # pose: [keypoints, 2 or 3]
    names_unread: str = ""  # names said, but not a dict or list of names (its first 60 characters)
    summary: str = ""  # the line that describes it

    @property
    def head_note(self) -> str:
        """What the project says of its NMS-free head (YOLO's one-to-one branch, RT-DETR's decoder)."""
        return UltralyticsFacts(self.task, nms_free=self.nms_free, detr=self.detr).head_note

    def as_dict(self) -> JsonObject:
        out: JsonObject = {"task": self.task, "classes": list(self.classes), "imgsz": self.imgsz,
                           "stride": self.stride, "version": self.version}
        if self.nms_free:
            out.update(nms_free=True, max_det=self.max_det)
        if self.detr:
            out["detr"] = True
        if self.kpt_shape:
            out["kpt_shape"] = list(self.kpt_shape)
        if self.names_unread:
            out["names_unread"] = self.names_unread
        out["summary"] = self.summary
        return out

    @classmethod
    def from_dict(cls, data: JsonObject) -> UltralyticsSummary | None:
        """The stored summary; None for ``{}`` (a file that is no Ultralytics export)."""
        if not data:
            return None
        return cls(task=str(data["task"]), classes=[str(c) for c in data.get("classes") or []],
                   imgsz=data.get("imgsz"), stride=data.get("stride"), version=str(data.get("version") or ""),
                   nms_free=bool(data.get("nms_free", False)), max_det=int(data.get("max_det") or 0),
                   detr=bool(data.get("detr", False)),
                   kpt_shape=[int(v) for v in data.get("kpt_shape") or []],
                   names_unread=str(data.get("names_unread") or ""), summary=str(data.get("summary") or ""))


def ultralytics_summary(props: dict[str, str], proto: onnx.ModelProto | None = None) -> UltralyticsSummary | None:
    """What an Ultralytics export says of itself (task, class names, imgsz, stride), or None for another file; an
    RT-DETR's top-k is its graph's (``proto``), where the metadata does not say it."""
    facts = facts_from_props(props, proto)
    if facts is None:
        return None
    unread = props["names"][:60] if not facts.classes and props.get("names") else ""  # not a dict or list of names
    found = UltralyticsSummary(task=facts.task, classes=list(facts.classes),
                               imgsz=_metadata_literal(props.get("imgsz")),
                               stride=_metadata_literal(props.get("stride")), version=facts.version,
                               nms_free=facts.nms_free, max_det=facts.max_det if facts.nms_free else 0,
                               detr=facts.detr,
                               kpt_shape=list(facts.kpt_shape), names_unread=unread)
    return replace(found, summary=describe_ultralytics(found))


def describe_ultralytics(summary: UltralyticsSummary) -> str:
    classes = summary.classes
    shown = ", ".join(classes[:3]) + (", ..." if len(classes) > 3 else "")
    version = f" {summary.version}" if summary.version else ""
    if summary.names_unread:
        return (f"Ultralytics{version} export: task {summary.task}, class names unreadable "
                f"(names = {summary.names_unread!r}), imgsz {summary.imgsz}, stride {summary.stride}")
    nms_free = f", {summary.head_note} (top {summary.max_det})" if summary.nms_free else ""
    kind = "RT-DETR export" if summary.detr else "export"
    return (f"Ultralytics{version} {kind}: task {summary.task}, {len(classes)} classes ({shown}), "
            f"imgsz {summary.imgsz}, stride {summary.stride}{nms_free}")


def graph_output_dims(proto: onnx.ModelProto) -> dict[str, list[int | None]]:
    """{output: dims} as the graph declares them or shape inference finds them (None: symbolic or unknown)."""
    import onnx

    def dims(value: Any) -> list[int | None]:
        return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]

    found = {o.name: dims(o) for o in proto.graph.output}
    if any(not d or None in d for d in found.values()):
        try:
            inferred = onnx.shape_inference.infer_shapes(proto)
            found.update({o.name: dims(o) for o in inferred.graph.output if dims(o)})
        except Exception:  # the checker has passed; inference is only a better guess here
            pass
    return found


def raise_for_ultralytics_head(project: Project, path: Path, summary: UltralyticsSummary | None,
                               dims: dict[str, list[int | None]]) -> None:
    """An Ultralytics detection head [N, 4+C, A] (before NMS) is not what the task reads: say so, and what to do."""
    if summary is None:
        return
    task = summary.task
    if task in ("segment", "pose", "obb"):  # its head is adapted in a project of its task (onnx_file._adapted)
        if project.task.kind != TASKS[task]:
            raise ModelError(f"{_where(project, path)} is an Ultralytics {task} export ({summary.summary}); "
                             f"task.kind is {project.task.kind!r}: edgebuild's adapter splits its head into the "
                             f"{TASKS[task]} task's outputs", hint=f"make task.kind \"{TASKS[task]}\" (or leave it "
                                                                   "out to take the export's)")
        return
    classes = len(summary.classes) or len(project.task.classes)
    for name, shape in dims.items():
        if len(shape) == 3 and shape[1] == 4 + classes and (shape[2] is None or shape[2] > shape[1]):
            got = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
            raise ModelError(
                f"{_where(project, path)}: output {name!r} {got} is the raw Ultralytics detection head, "
                f"[N, 4+C, A]: per anchor 4 box values (cx, cy, w, h in input pixels) and {classes} class "
                "scores, before NMS. The detection task reads boxes [N, A, 4] (x1, y1, x2, y2) and scores "
                f"[N, A, C] (task.postprocess.boxes_output, scores_output); edgebuild's built-in Ultralytics "
                f"adapter applies to a detect export whose metadata names its classes, in a detection project "
                f"({summary.summary})",
                hint="make task.kind \"detection\" and task.classes the export's classes (or leave them out to "
                     "take the export's), or write the task's outputs yourself: build the model in Python with a "
                     "wrapper that transposes the head to [N, A, 4+C], converts cx, cy, w, h to x1, y1, x2, y2 "
                     "and splits boxes from scores, and name it with model.entry_point instead of model.source")


# -- inputs and outputs -----------------------------------------------------------------------------

def graph_inputs(proto: onnx.ModelProto) -> list[Any]:
    """The graph's real inputs (before IR 4, initializers are listed as inputs too)."""
    initializers = {t.name for t in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in initializers]


def image_dtype_problem(name: str, dtype: str) -> str | None:
    """The image input (model.inputs[0]) takes what edgebuild feeds it: float32 pixels scaled and normalized by
    task.preprocess (the gate, calibration and the device runtime all feed float32). Another dtype: why not."""
    if dtype == "float32":
        return None
    why = ("edgebuild does not feed raw uint8 pixels: it scales and normalizes them (task.preprocess) into float32"
           if dtype == "uint8" else
           "a float16 input is not needed for FP16: edgebuild builds FP16 and INT8 engines from a float32 model"
           if dtype == "float16" else "an image input is float pixels")
    return (f"image input {name!r} is {dtype} (model.inputs[0].dtype {dtype!r}); edgebuild feeds the image "
            f"input float32 [N, C, H, W]: {why}; export the model with a float32 image input")


FLOAT_HINT = ("export the float32 model (Ultralytics: without half=True; torch: model.float() before "
               "torch.onnx.export) and let edgebuild choose FP16 or INT8")


def raise_for_inputs(project: Project, path: Path, proto: onnx.ModelProto) -> None:
    """Every way the file's inputs miss ``[model.inputs]``, in one error."""
    from onnx.helper import tensor_dtype_to_np_dtype

    real = {i.name: i for i in graph_inputs(proto)}
    declared = [s.name for s in project.model.inputs]
    problems = [f"{name!r} is an input of the file that model.inputs does not declare (every input needs a "
                "profile)" for name in real if name not in declared]
    for index, spec in enumerate(project.model.inputs):
        key = f"model.inputs[{index}] ({spec.name!r})"
        if spec.name not in real:
            problems.append(f"{key} is not an input of the file (its inputs: {list(real)})")
            continue
        tensor = real[spec.name].type.tensor_type
        try:
            dtype = str(tensor_dtype_to_np_dtype(tensor.elem_type))
        except Exception:  # an element type numpy has no name for
            dtype = f"ONNX type {tensor.elem_type}"
        if dtype != spec.dtype:
            problems.append(f"{key}: dtype {spec.dtype}, the file's input is {dtype}")
        elif index == 0 and image_dtype_problem(spec.name, dtype):
            problems.append(f"{key}: {image_dtype_problem(spec.name, dtype)}")
        dims = list(tensor.shape.dim)
        shown = "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                                for d in dims) + "]"
        rank = len(spec.opt_shape)
        if len(dims) != rank:
            missing = " (no batch axis: the file takes one image, edgebuild's inputs are batched, axis 0 first)" \
                if len(dims) == rank - 1 else ""
            problems.append(f"{key}: the profile has rank {rank} ({spec.opt_shape}), the file's input has rank "
                            f"{len(dims)} {shown}{missing}")
            continue
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value"):
                continue  # symbolic: the profile may vary it
            size, profile = dim.dim_value, (spec.min_shape[axis], spec.opt_shape[axis], spec.max_shape[axis])
            label = f"axis {axis} ({_AXIS_NAMES[axis]})" if rank == 4 and axis in _AXIS_NAMES else f"axis {axis}"
            if len(set(profile)) > 1:
                problems.append(f"{key}: {label} is fixed at {size} in the file {shown}, but the profile varies it "
                                f"(min {profile[0]}, opt {profile[1]}, max {profile[2]})")
            elif profile[0] != size:
                problems.append(f"{key}: {label} is fixed at {size} in the file {shown}, the profile asks for "
                                f"{profile[0]}")
    if problems:
        hints = []
        if any("declare" in p or "not an input of the file" in p for p in problems):
            hints.append(f"model.inputs names the file's inputs, {list(real)}, one [[model.inputs]] each")
        if any(": dtype " in p for p in problems):
            hints.append("model.inputs[].dtype is the file's input type")
        if any("feeds the image input float32" in p for p in problems):
            hints.append(FLOAT_HINT)
        if any(" rank " in p or " axis " in p for p in problems) or not hints:
            hints.append("export the file with the axes the profile varies dynamic (Ultralytics: dynamic=True; "
                         "torch.onnx.export: dynamic_axes or dynamic_shapes), or make min_shape, opt_shape and "
                         "max_shape equal the file's size on a fixed axis (a fixed batch of 1 also needs "
                         "runtime.max_batch_size = 1)")
        raise ModelError(
            f"{_where(project, path)}: its inputs do not fit model.inputs ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="; ".join(hints))


def raise_for_output_names(project: Project, path: Path, proto: onnx.ModelProto,
                           summary: UltralyticsSummary | None = None) -> None:
    """model.outputs against the file's outputs; ``summary``: what an Ultralytics export says of itself, so that its raw
    detection head left unadapted (it scores another number of classes than task.classes lists) is named as such."""
    outputs = [o.name for o in proto.graph.output]
    if outputs != list(project.model.outputs):
        order = " (the same names in another order: list them in the file's order)" \
            if sorted(outputs) == sorted(project.model.outputs) else ""
        head = _unadapted_head(project, proto, summary, outputs)
        raise ModelError(f"{_where(project, path)}: its outputs are {outputs}, model.outputs lists "
                         f"{list(project.model.outputs)}{order}{head[0] if head else ''}",
                         hint=head[1] if head else "model.outputs names the file's outputs, in its order, and "
                                                   "task.postprocess says which the task reads; " + OUTPUTS_HINT)


def _unadapted_head(project: Project, proto: onnx.ModelProto, summary: UltralyticsSummary | None,
                    outputs: list[str]) -> tuple[str, str] | None:
    """(what is said, the hint) where the file is an Ultralytics detect export whose one output, the raw head
    [N, 4+C, A], scores another number of classes than task.classes lists: edgebuild's adapter, which gives the
    boxes and scores ``init`` writes in model.outputs, fits only a head of len(task.classes) classes."""
    if summary is None or summary.task != "detect" or project.task.kind != "detection" or len(outputs) != 1:
        return None
    shape = graph_output_dims(proto).get(outputs[0]) or []
    classes = len(project.task.classes)
    if len(shape) != 3 or shape[1] is None or shape[1] <= 4 or shape[1] - 4 == classes or \
            (shape[2] is not None and shape[2] <= shape[1]):
        return None
    from edgebuild.sources.task_outputs import class_sources

    scored = shape[1] - 4
    got = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    said = (f": {outputs[0]!r} {got} is the Ultralytics raw detection head [N, 4+C, A], which scores {scored} "
            f"classes, and task.classes lists {classes}; edgebuild's Ultralytics adapter turns that head into the "
            f"boxes and scores model.outputs names only when task.classes lists the {scored} classes the model "
            "scores")
    said += "".join("\n" + line for line in class_sources(project))
    hint = (f"make task.classes the {scored} classes the model was trained on, in its output order, and keep "
            f"model.outputs = {list(project.model.outputs)} (what `edgebuild init` writes for an Ultralytics detect "
            "export: the adapter's outputs); an object name in the dataset that the model was not trained on (a "
            "stray label) is no class of it: fix or remove those objects in the annotations")
    return said, hint


def dynamic_axis_names(project: Project, proto: onnx.ModelProto) -> dict[str, dict[str, str]]:
    """{input: {axis: name}} for every axis the profile varies: the file's symbolic name, else batch/height/width."""
    real = {i.name: list(i.type.tensor_type.shape.dim) for i in graph_inputs(proto)}
    names = {}
    for spec in project.model.inputs:
        dims = real.get(spec.name, [])
        readable = _AXIS_NAMES if len(spec.opt_shape) == 4 else {0: "batch"}
        names[spec.name] = {str(a): (dims[a].dim_param if a < len(dims) and dims[a].dim_param else
                                     readable.get(a, f"{spec.name}_dim{a}")) for a in spec.dynamic_axes}
    return names


# -- the stride -------------------------------------------------------------------------------------

#: a detector's feature-map strides, tried in turn against its anchor count: one level, then the usual pyramids
_STRIDE_SETS = ((8,), (16,), (32,), (64,), (8, 16, 32), (8, 16, 32, 64), (16, 32, 64), (8, 16), (16, 32),
                (32, 64))


def model_stride(project: Project, summary: UltralyticsSummary | None, dims: dict[str, list[int | None]],
                 size: Sequence[int] | None = None) -> tuple[int, str] | None:
    """(the model's largest stride, what says it): Ultralytics' metadata, or a detector's anchor count A at
    ``size`` (default: the profile's opt size) from its boxes [N, A, 4] (A = sum over its strides s of
    H/s * W/s); None where nothing says."""
    stride = summary.stride if summary is not None else None
    if isinstance(stride, (list, tuple)) and stride and all(isinstance(v, (int, float)) for v in stride):
        stride = max(stride)
    if isinstance(stride, (int, float)) and not isinstance(stride, bool) and stride > 0:
        return int(stride), "its Ultralytics metadata"
    if project.task.kind != "detection" or len(project.model.inputs[0].opt_shape) != 4:
        return None
    boxes = dims.get(project.task.postprocess.boxes_output) or []
    anchors = boxes[1] if len(boxes) == 3 and boxes[2] == 4 else None
    height, width = size or project.model.inputs[0].opt_shape[2:]
    if not anchors:
        return None
    for strides in _STRIDE_SETS:
        if all(height % s == 0 and width % s == 0 for s in strides) and \
                sum((height // s) * (width // s) for s in strides) == anchors:
            levels = f"stride {strides[0]}" if len(strides) == 1 else f"strides {', '.join(map(str, strides))}"
            return max(strides), f"its {anchors} anchors at {height}x{width}: feature maps at {levels}"
    return None


def raise_for_stride(project: Project, path: Path, found: tuple[int, str] | None) -> None:
    """Every image size of the profile a multiple of the model's stride: a detector's feature maps at another size
    do not line up (ONNX Runtime fails with a broadcast error, or the boxes come out shifted)."""
    if found is None:
        return
    stride, said = found
    spec = project.model.inputs[0]
    off = [f"{which} {getattr(spec, which)}" for which in ("min_shape", "opt_shape", "max_shape")
           if len(getattr(spec, which)) == 4 and any(size % stride for size in getattr(spec, which)[2:])]
    if off:
        raise ModelError(f"{_where(project, path)}: model.inputs[0] ({spec.name!r}) image size is not a multiple of "
                         f"the model's stride {stride} ({said}): {', '.join(off)}",
                         hint=f"make the height and width of min_shape, opt_shape, max_shape (and "
                              f"task.preprocess.input_size) multiples of {stride}, e.g. "
                              f"{_multiple(spec.opt_shape[2], stride)}x{_multiple(spec.opt_shape[3], stride)}")


def _multiple(size: int, stride: int) -> int:
    return max(stride, round(size / stride) * stride)
