"""NMS inside the model: a detector's raw head turned into fixed-size detections in the ONNX graph.

A raw head is edgebuild's detection contract (``boxes [N, A, 4]`` xyxy in input pixels,
``scores [N, A, C]`` per-class probabilities). ``append_nms`` adds, with standard ONNX operators
only, the same decode the host runs (``edgebuild.runtime.base.vision.decode_detections``): every
(anchor, class) pair above ``score_threshold`` is a candidate, the best ``pre_nms_top_k`` of them
go through per-class NMS at ``nms_iou``, and the best ``max_detections`` survivors over all classes
come out sorted by score. The outputs have static shapes, which TensorRT and DeepStream want:

    num_detections    [N, 1]     int32    how many rows of the others are detections
    detection_boxes   [N, K, 4]  float32  x1, y1, x2, y2 in network-input pixels, zero padded
    detection_scores  [N, K]     float32  best first, zero padded
    detection_classes [N, K]     float32  0-based class index, zero padded

K = max_detections. Layout, dtypes and order are what DeepStream's stock bbox parser
``NvDsInferParseYoloV5CustomBatchedNMSTLT`` (``libnvds_infercustomparser.so``, DeepStream 6.1.1
and later) reads by output index; the names are those of TensorRT's EfficientNMS plugin.
``docs/detections.md`` gives the sources and what differs from the host's decode.

Every added node and tensor is named ``edgebuild_nms/...`` so the INT8 quantizer can leave the part
out and preflight can point at it.

Pose and segmentation (``settings.task``) get the same NMS on their boxes and scores and, per kept
detection, the rows of their per-anchor outputs gathered at its anchor (``INSTANCE_NMS_OUTPUTS``):

    detection_keypoints          [N, K, kpts, D]  float32  pose: x, y in input pixels (and D = 3: visibility)
    detection_mask_coefficients  [N, K, M]        float32  segmentation: the detection's mask coefficients
    mask_prototypes              [N, M, H/4, W/4] float32  segmentation: the prototypes, passed through

zero past num_detections. Oriented boxes get none: TensorRT has no rotated NMS.

An NMS-free head (YOLOv10, YOLO26: ``edgebuild.sources.ultralytics.adapter``) already answers these four
outputs from its one-to-one top-k, with no NonMaxSuppression node: ``append_nms`` appends nothing
to such a graph (``answers_detections``) and returns it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.errors import ConfigError, ModelError
from edgebuild.runtime.base.vision import INSTANCE_NMS_OUTPUTS, NMS_OUTPUTS, DetectionParams

if TYPE_CHECKING:
    import onnx

__all__ = ["PREFIX", "answers_detections", "append_nms", "check_nms_settings",
           "nms_target_problem"]

PREFIX = "edgebuild_nms/"
#: NMS_OUTPUTS (runtime/base/vision.py): the order DeepStream's parser reads them (by index): count, boxes, scores,
#: classes
#: candidates the host's decode keeps before NMS (runtime/base/vision.py); more detections cannot come out
PRE_NMS_TOP_K = DetectionParams().pre_nms_top_k
#: TensorRT's TopK layer takes K <= 3840 (NvInfer.h ITopKLayer::setK, 8.5 to 10.x)
TENSORRT_TOPK_MAX = 3840
#: INMSLayer considers at most 2000 boxes per image on SM 5.3 / 6.2 devices, 5000 elsewhere (NvInfer.h)
TENSORRT_NMS_BOX_LIMIT = 2000
MAX_DETECTIONS = min(PRE_NMS_TOP_K, TENSORRT_TOPK_MAX, TENSORRT_NMS_BOX_LIMIT)
#: Unsqueeze and ReduceSum take their axes as inputs from opset 13; the graph is written that way
MIN_OPSET = 13
#: the first TensorRT whose ONNX parser imports NonMaxSuppression as INMSLayer (8.2 used a plugin)
MIN_TENSORRT = "8.5"

_KEY = "task.postprocess."
#: the tasks whose NMS can go inside the model, and the per-anchor outputs each gathers after it
NMS_TASKS = {"detection": (), "pose": ("keypoints_output",),
             "segmentation": ("coefficients_output", "prototypes_output")}


@dataclass(frozen=True)
class NmsSettings:
    """The decode appended to the graph: the project's ``[task.postprocess]`` values, checked."""

    boxes_output: str = "boxes"
    scores_output: str = "scores"
    score_threshold: float = 0.001
    nms_iou: float = 0.6
    max_detections: int = 100
    pre_nms_top_k: int = PRE_NMS_TOP_K
    task: str = "detection"  # pose, segmentation: their per-anchor outputs are gathered too
    keypoints_output: str = "keypoints"
    coefficients_output: str = "mask_coefficients"
    prototypes_output: str = "prototypes"

    @property
    def output_names(self) -> tuple[str, ...]:
        """The graph's outputs once NMS is appended."""
        return INSTANCE_NMS_OUTPUTS.get(self.task, NMS_OUTPUTS)


def check_nms_settings(task_kind: str, settings: Mapping[str, Any]) -> NmsSettings:
    """``[task.postprocess]`` as NMS inside the model needs it, or ConfigError naming the key."""
    if task_kind == "obb":
        raise ConfigError(f"{_KEY}in_model: TensorRT has no rotated NMS, so an OBB task's NMS cannot go inside "
                          "the model", hint=f"remove {_KEY}in_model: the host (or the application) decodes OBB")
    if task_kind not in NMS_TASKS:
        raise ConfigError(f"{_KEY}in_model: NMS inside the model needs task.kind = \"detection\", \"pose\" or "
                          f"\"segmentation\", not {task_kind!r}", hint=f"remove {_KEY}in_model for a {task_kind} task")
    # pre_nms_top_k is not a project key: it is the host decode's own cap, which the graph must share
    names = ("boxes_output", "scores_output", *NMS_TASKS[task_kind])
    keys = (*names, "score_threshold", "nms_iou", "max_detections")
    merged = {**asdict(NmsSettings()), **{k: v for k, v in settings.items() if k in keys}, "task": task_kind}
    for key in names:
        if not isinstance(merged[key], str) or not merged[key]:
            raise ConfigError(f"{_KEY}{key} must name a model output, found {merged[key]!r}")
    if merged["boxes_output"] == merged["scores_output"]:
        raise ConfigError(f"{_KEY}boxes_output and {_KEY}scores_output are both {merged['boxes_output']!r}",
                          hint="name the [N, A, 4] boxes output and the [N, A, C] scores output")
    if len({merged[k] for k in names}) < len(names):
        raise ConfigError(f"{_KEY}: {', '.join(f'{k} = {merged[k]!r}' for k in names)} name one output twice",
                          hint="each names a different output of the model")
    score, iou, limit = _number(merged, "score_threshold"), _number(merged, "nms_iou"), merged["max_detections"]
    if not 0.0 <= score < 1.0:
        raise ConfigError(f"{_KEY}score_threshold = {score} is outside [0, 1)",
                          hint="a detection is kept when its score is above the threshold; 0.001 is COCO's")
    if not 0.0 < iou <= 1.0:
        raise ConfigError(f"{_KEY}nms_iou = {iou} is outside (0, 1]",
                          hint="boxes of one class overlapping more than this are suppressed; 0.6 or 0.7 is usual")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"{_KEY}max_detections must be a positive integer, found {limit!r}")
    if limit > MAX_DETECTIONS:
        raise ConfigError(
            f"{_KEY}max_detections = {limit} is more than NMS inside the model can return ({MAX_DETECTIONS})",
            hint=f"the host's decode keeps the best {PRE_NMS_TOP_K} candidates before NMS, TensorRT's TopK takes "
                 f"K <= {TENSORRT_TOPK_MAX} and its NMS layer considers at most {TENSORRT_NMS_BOX_LIMIT} boxes "
                 f"an image on some devices; set max_detections <= {MAX_DETECTIONS}")
    return NmsSettings(**{**merged, "score_threshold": score, "nms_iou": iou})


def _number(settings: Mapping[str, Any], key: str) -> float:
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{_KEY}{key} must be a number, found {value!r}")
    return float(value)


def nms_target_problem(tensorrt: str, use_dla: bool = False) -> tuple[str, str] | None:
    """(problem, fix) where a target cannot run the appended NMS as written, else None.

    The parser tables alone do not say it: 8.2's table marks NonMaxSuppression supported, but
    through an experimental plugin whose inputs must be initializers and whose output shape
    TensorRT 8.2 cannot follow (data-dependent shapes came in 8.5 with INMSLayer).
    """
    have = tuple(int(p) for p in tensorrt.split(".")[:2] if p.isdigit())
    if have < tuple(int(p) for p in MIN_TENSORRT.split(".")):
        return (f"TensorRT {tensorrt} imports NonMaxSuppression only through an experimental plugin, without "
                f"the data-dependent shapes the NMS graph needs; INMSLayer came with TensorRT {MIN_TENSORRT}",
                f"target a JetPack with TensorRT >= {MIN_TENSORRT} (JetPack 5.1 or later), or set {_KEY}in_model = "
                f"false (the fleet's server or clients then decode)")
    if use_dla:
        return ("the DLA has no NonMaxSuppression, TopK, GatherElements or ScatterND layer and runs no "
                "data-dependent shapes, so the NMS part cannot run on the DLA",
                f"place this group on the GPU (accelerator = \"gpu\"), or {_KEY}in_model = false")
    return None


def is_nms_node(name: str) -> bool:
    """Whether a node (or tensor) name belongs to the appended NMS part."""
    return name.startswith(PREFIX)


# -- building the graph ----------------------------------------------------------------------

class _Graph:
    """Nodes and constants to append, every name under PREFIX."""

    def __init__(self, taken: set[str]) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.taken = taken

    def _name(self, name: str) -> str:
        full = PREFIX + name
        if full in self.taken:
            raise ModelError(f"the model already has a tensor or node named {full!r}",
                             hint="the NMS part may have been appended already: append it to the raw-head model")
        self.taken.add(full)
        return full

    def reserve(self, name: str) -> str:
        """A tensor name under PREFIX for a node output named explicitly."""
        return self._name(name)

    def const(self, name: str, value: Any, dtype: Any) -> str:
        from onnx import numpy_helper

        full = self._name(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), full))
        return full

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int | list[str] = 1, **attrs: Any) -> Any:
        """Add one node; returns its output name (or the list, for several)."""
        from onnx import helper

        node_name = self._name(name)
        if isinstance(outputs, int):
            outputs = [node_name] if outputs == 1 else [self._name(f"{name}_{i}") for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=node_name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs


def answers_detections(model: onnx.ModelProto) -> bool:
    """Whether the graph's outputs are already ``NMS_OUTPUTS`` with no NonMaxSuppression in it: an
    NMS-free (one-to-one) head, whose top-k needs no NMS."""
    return [o.name for o in model.graph.output] == list(NMS_OUTPUTS) and \
        not any(n.op_type == "NonMaxSuppression" for n in model.graph.node)


def append_nms(model: onnx.ModelProto | str | Path, settings: NmsSettings,
               num_classes: int | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs are ``settings.output_names`` (the raw head's outputs are dropped).

    ``model``: an ONNX model (or its path) returning ``settings.boxes_output`` [N, A, 4] and
    ``settings.scores_output`` [N, A, C] in float32; N (and A) may be dynamic, C must be known
    from the graph or given as ``num_classes``. Pose adds ``keypoints_output`` [N, A, kpts, D],
    segmentation ``coefficients_output`` [N, A, M] and ``prototypes_output`` [N, M, h, w], their
    sizes known from the graph. The model keeps its opset (13 or later).
    A model that ``answers_detections`` (an NMS-free head) is returned unchanged: nothing is appended.
    """
    import onnx

    source = onnx.load(str(model)) if isinstance(model, (str, Path)) else model
    out = onnx.ModelProto()
    out.CopyFrom(source)
    if answers_detections(out):
        return out
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise ModelError(f"NMS inside the model needs ONNX opset >= {MIN_OPSET}; the model imports opset {opset}",
                         hint=f"export at a later opset (export.opset = 17), or leave {_KEY}in_model off")
    taken = {t for n in out.graph.node for t in (n.name, *n.output)} | {i.name for i in out.graph.initializer} \
        | {i.name for i in out.graph.input}
    names = settings.output_names
    clash = sorted(taken & set(names))
    if clash:
        raise ModelError(f"the model already has tensors named {', '.join(clash)}, the names of the NMS outputs",
                         hint="NMS may be inside the model already: use its raw-head export")
    batch, anchors, classes = _head_dims(out, settings, num_classes)
    extra = _extra_dims(out, settings)
    g = _Graph(taken | set(names))
    kept = _build(g, settings, anchors, classes)
    _gather_extras(g, settings, kept, extra)
    out.graph.node.extend(g.nodes)
    out.graph.initializer.extend(g.initializers)
    del out.graph.output[:]
    k = settings.max_detections
    shapes: list[list[int | str | None]] = [[batch, 1], [batch, k, 4], [batch, k], [batch, k]]
    if settings.task == "pose":
        shapes.append([batch, k, *extra["keypoints_output"]])
    elif settings.task == "segmentation":
        shapes += [[batch, k, *extra["coefficients_output"]], [batch, *extra["prototypes_output"]]]
    for name, shape in zip(names, shapes):
        elem = onnx.TensorProto.INT32 if name == NMS_OUTPUTS[0] else onnx.TensorProto.FLOAT
        out.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, shape))
    _prune(out.graph)
    return out


def _extra_dims(model: onnx.ModelProto, settings: NmsSettings) -> dict[str, list[int | str | None]]:
    """{settings key: the sizes after (N, A)} of pose's or segmentation's other outputs (the prototypes' after N);
    every size but the prototypes' height and width must be known."""
    import onnx

    keys = NMS_TASKS[settings.task]
    if not keys:
        return {}
    outputs = {o.name: o for o in model.graph.output}
    missing = [f"{_KEY}{k} = {getattr(settings, k)!r}" for k in keys if getattr(settings, k) not in outputs]
    if missing:
        raise ModelError(f"{', '.join(missing)}: not an output of the model (outputs: {', '.join(outputs)})",
                         hint=f"name the raw head's {settings.task} outputs in [task.postprocess]")
    declared = [d for k in keys for d in outputs[getattr(settings, k)].type.tensor_type.shape.dim[1:]]
    if not all(d.HasField("dim_value") for d in declared):  # as _head_dims: ONNX's inference may know them
        outputs = {o.name: o for o in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output}
    found: dict[str, list[int | str | None]] = {}
    for key, rank in zip(keys, (4,) if settings.task == "pose" else (3, 4)):
        name = getattr(settings, key)
        tensor = outputs[name].type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
        fixed = dims[2:] if key != "prototypes_output" else dims[1:2]
        if tensor.elem_type != onnx.TensorProto.FLOAT or len(dims) != rank or \
                not all(isinstance(d, int) for d in fixed):
            want = {"keypoints_output": "[N, A, kpts, D]", "coefficients_output": "[N, A, M]",
                    "prototypes_output": "[N, M, H/4, W/4]"}[key]
            raise ModelError(f"cannot append NMS: {_KEY}{key} = {name!r} is {dims} "
                             f"({onnx.TensorProto.DataType.Name(tensor.elem_type)}), not float32 {want} with "
                             "its sizes known", hint="export the raw head in float32 with those sizes fixed")
        found[key] = dims[1:] if key == "prototypes_output" else dims[2:]
    if settings.task == "segmentation" and found["coefficients_output"][0] != found["prototypes_output"][0]:
        raise ModelError(f"cannot append NMS: {settings.coefficients_output} has {found['coefficients_output'][0]} "
                         f"coefficients, {settings.prototypes_output} {found['prototypes_output'][0]} prototypes",
                         hint="one coefficient per prototype")
    return found


def _head_dims(model: onnx.ModelProto, settings: NmsSettings,
               num_classes: int | None) -> tuple[int | str | None, int | None, int]:
    """(N, A, C) of the raw head from the graph's outputs; A is None when dynamic."""
    import onnx

    outputs = {o.name: o for o in model.graph.output}
    for key in ("boxes_output", "scores_output"):
        name = getattr(settings, key)
        if name not in outputs:
            raise ModelError(f"{_KEY}{key} = {name!r} is not an output of the model "
                             f"(outputs: {', '.join(outputs) or 'none'})",
                             hint="name the raw head's outputs in [task.postprocess]")
    if not all(d.HasField("dim_value") for key in ("boxes_output", "scores_output")
               for d in outputs[getattr(settings, key)].type.tensor_type.shape.dim[2:]):
        # exporters often leave the last axes symbolic ("Concatboxes_dim_2"); ONNX's inference knows them
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        outputs = {o.name: o for o in inferred.graph.output}
    dims: dict[str, list[int | str | None]] = {}
    for key in ("boxes_output", "scores_output"):
        name = getattr(settings, key)
        tensor = outputs[name].type.tensor_type
        if tensor.elem_type != onnx.TensorProto.FLOAT:
            raise ModelError(f"{_KEY}{key} = {name!r} is {onnx.TensorProto.DataType.Name(tensor.elem_type)}, "
                             "not FLOAT; NMS inside the model reads float32 boxes and scores",
                             hint="export the model in float32 (FP16 comes later, from TensorRT)")
        dims[key] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    boxes, scores = dims["boxes_output"], dims["scores_output"]
    if len(boxes) != 3 or len(scores) != 3 or (isinstance(boxes[2], int) and boxes[2] != 4):
        raise ModelError(f"cannot append NMS: {settings.boxes_output} is {boxes} and {settings.scores_output} is "
                         f"{scores}, not [N, A, 4] and [N, A, C]",
                         hint="the raw head must return boxes [N, A, 4] (xyxy, input pixels) and scores [N, A, C]")
    if isinstance(boxes[1], int) and isinstance(scores[1], int) and boxes[1] != scores[1]:
        raise ModelError(f"cannot append NMS: {settings.boxes_output} has {boxes[1]} anchors and "
                         f"{settings.scores_output} {scores[1]}", hint="both outputs must list the same anchors")
    found = scores[2] if isinstance(scores[2], int) else None
    if found is not None and num_classes is not None and found != num_classes:
        raise ModelError(f"{settings.scores_output} has {found} classes; task.classes lists {num_classes}",
                         hint="task.classes must list every class the model scores, in its order")
    classes = found or num_classes
    if not classes:
        raise ModelError(f"the number of classes of {settings.scores_output} is not in the graph",
                         hint="pass the number of classes (task.classes) to append_nms")
    anchors = boxes[1] if isinstance(boxes[1], int) else scores[1] if isinstance(scores[1], int) else None
    return boxes[0], anchors, classes


@dataclass(frozen=True)
class _Kept:
    """What the per-anchor outputs of pose and segmentation need of the NMS part (tensor names)."""

    anchor: str  # [N, keep] int64: the anchor of each kept row (any in-range anchor on padding rows)
    valid: str  # [N, keep] float32: 1 on a detection's row, 0 past num_detections
    keep: int  # rows the NMS part yields; padded with zeros to max_detections
    extra_rows: int  # dynamic anchors: rows to pad a per-anchor table with, so every candidate's anchor is in it


def _build(g: _Graph, settings: NmsSettings, anchors: int | None, classes: int) -> _Kept:
    """The host's decode as ONNX nodes, ending in the four ``NMS_OUTPUTS``."""
    from onnx import TensorProto, helper

    i64, f32 = np.int64, np.float32
    top = settings.pre_nms_top_k if anchors is None else min(settings.pre_nms_top_k, anchors * classes)
    keep = min(settings.max_detections, top)
    pad = settings.max_detections - keep  # fewer candidates than max_detections: rows padded to K
    boxes, scores = settings.boxes_output, settings.scores_output
    axis_1, axis_2 = g.const("axis_1", [1], i64), g.const("axis_2", [2], i64)
    by_coordinate = g.const("by_coordinate", [1, 1, 4], i64)

    def rows(table: str, index: str, name: str) -> str:
        """table [N, R, 4] at index [N, M] -> [N, M, 4]."""
        wide = g.op("Expand", [g.op("Unsqueeze", [index, axis_2], f"{name}_index"), by_coordinate],
                    f"{name}_index4")
        return g.op("GatherElements", [table, wide], name, axis=1)

    # Candidates: the best `top` (anchor, class) pairs of each image, as TopK over the flat scores
    # (ties: the lower flat index first, the order of numpy's nonzero in the host's decode).
    flat = g.op("Reshape", [scores, g.const("flat_shape", [0, -1], i64)], "flat_scores")
    extra = 0
    if anchors is None:
        # A dynamic anchor count may be below `top`: pad with scores no threshold lets through, and
        # the boxes with enough rows that a padded candidate's anchor index stays in range.
        flat = g.op("Pad", [flat, g.const("score_pads", [0, 0, 0, top], i64), g.const("score_fill", -1.0, f32)],
                    "padded_scores")
        extra = -(-top // classes)
        boxes = g.op("Pad", [boxes, g.const("box_pads", [0, 0, 0, 0, extra, 0], i64),
                             g.const("box_fill", 0.0, f32)], "padded_boxes")
    cand_scores, cand_index = g.op("TopK", [flat, g.const("top_k", [top], i64)], "candidates", outputs=2,
                                   axis=-1, largest=1, sorted=1)
    num_classes = g.const("num_classes", classes, i64)
    anchor = g.op("Div", [cand_index, num_classes], "anchor")
    label = g.op("Sub", [cand_index, g.op("Mul", [anchor, num_classes], "anchor_start")], "label")
    cand_boxes = rows(boxes, anchor, "candidate_boxes")

    # Per-class NMS: a candidate scores only in its own class row, so classes never suppress each other.
    one_hot = g.op("Equal", [g.op("Unsqueeze", [label, axis_1], "label_row"),
                             g.const("class_ids", np.arange(classes).reshape(1, classes, 1), i64)], "class_match")
    class_scores = g.op("Mul", [g.op("Cast", [one_hot], "class_mask", to=TensorProto.FLOAT),
                                g.op("Unsqueeze", [cand_scores, axis_1], "score_row")], "class_scores")
    selected = g.op("NonMaxSuppression",
                    [cand_boxes, class_scores, g.const("max_per_class", [keep], i64),
                     g.const("iou_threshold", [settings.nms_iou], f32),
                     g.const("score_threshold", [settings.score_threshold], f32)],
                    "nms", center_point_box=0)

    # The survivors of every class back in one [N, top] row per image (0 elsewhere: a kept score is
    # above a threshold >= 0), then the best `keep` of them, best first.
    where = g.op("Gather", [selected, g.const("batch_and_box", [0, 2], i64)], "selected_at", axis=1)
    zeros = g.op("ConstantOfShape", [g.op("Shape", [cand_scores], "candidate_shape")], "zeros",
                 value=helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0]))
    kept = g.op("ScatterND", [zeros, where, g.op("GatherND", [cand_scores, where], "selected_scores")],
                "kept_scores")
    outputs = list(NMS_OUTPUTS) if pad == 0 else [NMS_OUTPUTS[0]] + [g.reserve(f"{n}_unpadded")
                                                                      for n in NMS_OUTPUTS[1:]]
    det_scores, position = g.op("TopK", [kept, g.const("keep", [keep], i64)], "detections",
                                outputs=[outputs[2], g.reserve("position")], axis=-1, largest=1, sorted=1)
    valid = g.op("Cast", [g.op("Greater", [det_scores, g.const("zero", 0.0, f32)], "is_detection")],
                 "valid", to=TensorProto.FLOAT)
    g.op("Cast", [g.op("ReduceSum", [valid, axis_1], "count", keepdims=1)], "num_detections",
         outputs=[outputs[0]], to=TensorProto.INT32)
    g.op("Mul", [rows(cand_boxes, position, "kept_boxes"), g.op("Unsqueeze", [valid, axis_2], "valid_box")],
         "detection_boxes", outputs=[outputs[1]])
    label_value = g.op("Cast", [g.op("GatherElements", [label, position], "kept_labels", axis=1)],
                       "kept_label_values", to=TensorProto.FLOAT)
    g.op("Mul", [label_value, valid], "detection_classes", outputs=[outputs[3]])
    if pad:
        pads = {3: g.const("pad_rows_3d", [0, 0, 0, 0, pad, 0], i64), 2: g.const("pad_rows_2d", [0, 0, 0, pad], i64)}
        for source, target in zip(outputs[1:], NMS_OUTPUTS[1:]):
            rank = 3 if target == NMS_OUTPUTS[1] else 2
            g.op("Pad", [source, pads[rank]], f"{target}_padded", outputs=[target])
    if not NMS_TASKS[settings.task]:
        return _Kept("", valid, keep, extra)
    kept_anchor = g.op("GatherElements", [anchor, position], "kept_anchors", axis=1)
    return _Kept(kept_anchor, valid, keep, extra)


def _gather_extras(g: _Graph, settings: NmsSettings, kept: _Kept, dims: dict[str, list[int | str | None]]) -> None:
    """Pose's keypoints or segmentation's mask coefficients of each kept detection, at its anchor (zero rows past
    num_detections), and segmentation's prototypes passed through: the outputs after ``NMS_OUTPUTS``."""
    i64 = np.int64
    names = settings.output_names[len(NMS_OUTPUTS):]
    for key, name in zip(NMS_TASKS[settings.task], names):
        source = getattr(settings, key)
        if key == "prototypes_output":
            g.op("Identity", [source], name, outputs=[name])
            continue
        sizes = [int(d) for d in dims[key] if isinstance(d, int)]
        width = int(np.prod(sizes))
        table = g.op("Reshape", [source, g.const(f"{key}_flat_shape", [0, 0, width], i64)], f"{key}_rows")
        if kept.extra_rows:  # as the boxes: a padded candidate's anchor must index a row
            table = g.op("Pad", [table, g.const(f"{key}_pads", [0, 0, 0, 0, kept.extra_rows, 0], i64),
                                 g.const(f"{key}_fill", 0.0, np.float32)], f"{key}_padded_rows")
        index = g.op("Expand", [g.op("Unsqueeze", [kept.anchor, g.const(f"{key}_axis_2", [2], i64)],
                                     f"{key}_index"), g.const(f"{key}_width", [1, 1, width], i64)], f"{key}_index_w")
        rows = g.op("GatherElements", [table, index], f"{key}_kept", axis=1)
        valid = g.op("Unsqueeze", [kept.valid, g.const(f"{key}_valid_axis", [2], i64)], f"{key}_valid")
        rows = g.op("Mul", [rows, valid], f"{key}_detections")
        if kept.keep < settings.max_detections:
            pads = g.const(f"{key}_pad_rows", [0, 0, 0, 0, settings.max_detections - kept.keep, 0], i64)
            rows = g.op("Pad", [rows, pads], f"{key}_padded")
        g.op("Reshape", [rows, g.const(f"{key}_shape", [0, 0, *sizes], i64)], name, outputs=[name])


def _prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes and constants that no output needs any more (the raw head's side branches)."""
    producer = {o: index for index, node in enumerate(graph.node) for o in node.output if o}
    needed = {o.name for o in graph.output}
    wanted, used = list(needed), set()
    while wanted:  # by producer, not by position: converters (e.g. float16's input casts) append out of order
        index = producer.get(wanted.pop())
        if index is None or index in used:
            continue
        used.add(index)
        node = graph.node[index]
        reads = [i for i in node.input if i]
        for attr in node.attribute:  # subgraphs (If/Loop) read outer tensors too
            for sub in [attr.g, *attr.graphs]:
                reads.extend(i for n in sub.node for i in n.input if i)
        fresh = [i for i in reads if i not in needed]
        needed.update(fresh)
        wanted.extend(fresh)
    kept = [node for index, node in enumerate(graph.node) if index in used]
    del graph.node[:]
    graph.node.extend(kept)
    dropped = {i.name for i in graph.initializer if i.name not in needed}
    initializers = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    # IR < 4 models also list their initializers as inputs: a dropped one must not become a required feed
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)


# -- parity of detections ------------------------------------------------------------------------

def detections_mismatch(want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], atol: float,
                        rtol: float, box_atol: float | None = None) -> tuple[float, str]:
    """How far ``got``'s ``NMS_OUTPUTS`` are from ``want``'s, compared as detections: (the largest box or
    score difference of matched rows, "" or what does not match).

    A top-k (an NMS-free head's, or NMS inside's last step) is not continuous: two candidates whose scores
    differ by float rounding may come out in either order, and at the last place (the K-th row, or the
    score threshold) either may be kept. So rows are matched per image by class, score and box (each
    within ``atol + rtol * |want|``; the boxes within ``box_atol`` (default ``atol``) + ``rtol * |want|``: the
    export's parity scales it by the boxes' pixel scale) in any order, and a row without a match is
    allowed only where its score is that close to its side's lowest kept score."""
    count, boxes, scores, classes = NMS_OUTPUTS
    box_atol = atol if box_atol is None else box_atol
    worst, problems = 0.0, []
    for image in range(len(np.asarray(want[count]).reshape(-1))):
        rows = []
        for side in (want, got):
            n = int(np.asarray(side[count]).reshape(-1)[image])
            rows.append((np.asarray(side[boxes][image][:n], np.float64), np.asarray(side[scores][image][:n],
                         np.float64), np.asarray(side[classes][image][:n])))
        (wb, ws, wc), (gb, gs, gc) = rows
        free = np.ones(len(gs), bool)
        lost = []
        for i in range(len(ws)):
            close = free & (gc == wc[i]) & (np.abs(gs - ws[i]) <= atol + rtol * abs(ws[i])) & \
                np.all(np.abs(gb - wb[i]) <= box_atol + rtol * np.abs(wb[i]), axis=1)
            if close.any():
                j = int(np.argmax(close))
                free[j] = False
                worst = max(worst, float(np.abs(gb[j] - wb[i]).max()), float(abs(gs[j] - ws[i])))
            else:
                lost.append(i)
        marginal = [_at_margin(ws, i, atol, rtol) for i in lost] + \
            [_at_margin(gs, int(j), atol, rtol) for j in np.flatnonzero(free)]
        if not all(marginal):
            problems.append(f"image {image}: {len(lost)} of {len(ws)} detections unmatched, "
                            f"{int(free.sum())} of {len(gs)} extra")
    return worst, "; ".join(problems[:3])


def _at_margin(scores: np.ndarray, index: int, atol: float, rtol: float) -> bool:
    """Whether a row's score is within the tolerance of the lowest score kept (the top-k's last place)."""
    return bool(abs(scores[index] - scores.min()) <= atol + rtol * abs(scores[index]))
