"""Ultralytics models as edgebuild models: a checkpoint (``best.pt``) or an Ultralytics ONNX export.

Ultralytics' detection head (``Detect``, in eval mode) outputs ``[N, 4+C, A]``: per anchor the box
centre x, centre y, width and height in input pixels, then C class scores, already sigmoid-ed.
edgebuild's detection task reads ``boxes [N, A, 4]`` (x1, y1, x2, y2 in input pixels) and
``scores [N, A, C]``. This module adapts one to the other, in two forms:

- ``adapter_module``: an ``nn.Module`` around a checkpoint's ``DetectionModel`` (or
  ``ClassificationModel``: its probabilities become the task's logits output), with the head's
  anchor grid computed from the input's size inside the graph (``Detect.dynamic``), so an export
  takes any image size the profile allows instead of baking in the trace's. An NMS-free head
  (YOLOv10, YOLO26: a one-to-one branch) runs that branch, as Ultralytics exports it: its top-k
  detections ``[N, K, 6]`` (x1, y1, x2, y2, score, class) become the four outputs NMS inside the
  model has (``NMS_OUTPUTS``: count, boxes, scores, classes; rows at or under the score threshold
  zeroed), so no NonMaxSuppression is added and every consumer of those outputs reads them; an
  RT-DETR's decoder (``RTDETRDecoder``) gives its top-k queries the same way, its boxes turned from
  normalised centre and size to pixels (``edgebuild.sources.ultralytics.detr``);
- ``append_detection_adapter``: ONNX nodes (Transpose, Slice, the xywh -> xyxy arithmetic) appended
  to an Ultralytics export's graph, so the imported model has the two outputs; for an export of an
  NMS-free head (``[N, K, 6]``), ``append_top_k_adapter`` maps it to ``NMS_OUTPUTS`` the same way
  as the module does; for a pose, segment or OBB export, ``append_instance_adapter`` appends the split
  ``instance_outputs`` makes. No ultralytics import.

What a model says of itself (task, class names, imgsz, stride: ``UltralyticsFacts``) comes from a
checkpoint read *without running its pickle* (``peek_checkpoint``: every class it names is a stub)
or from an export's ``metadata_props``, in ``edgebuild.project.ultralytics_facts`` (project loading
uses them too); it fills what the project leaves out and is checked against what it states.
Loading a checkpoint for real unpickles arbitrary code: only with ``[model] trust_checkpoint = true``.

Ultralytics is AGPL-3.0; edgebuild does not depend on it: ``ultralytics`` (its classes) is imported
only when a trusted checkpoint is loaded, by ``torch.load``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgebuild.errors import ModelError
from edgebuild.project.ultralytics_facts import (
    DETR_HEADS,
    TASKS,
    VAL_DEFAULTS,
    UltralyticsFacts,
    facts_from_checkpoint,
)

if TYPE_CHECKING:
    import onnx
    import torch
    from numpy.typing import DTypeLike

    from edgebuild.project.config import Project

__all__ = ["TASKS", "VAL_DEFAULTS", "facts_from_checkpoint", "raise_for_task"]

#: Ultralytics' heads whose outputs ``instance_outputs`` splits (the task's per-anchor outputs, decoded on the host)
INSTANCE_HEADS = ("pose", "segment", "obb")
TRUST_HINT = ("a .pt checkpoint is a Python pickle: loading it runs whatever code it names, so edgebuild loads "
              "one only when told to. If you made it (yolo train) or trust who did, set [model] "
              "trust_checkpoint = true; otherwise export it to ONNX (yolo export format=onnx dynamic=True) "
              "and name the .onnx with model.source: that route runs no pickle")



# -- the task --------------------------------------------------------------------------------------

def raise_for_task(where: str, facts: UltralyticsFacts) -> None:
    """A task edgebuild does not build (anything unknown) is refused, with what to do."""
    if facts.task in TASKS:
        return
    what = f"an Ultralytics {facts.task} model ({facts.summary()})"
    raise ModelError(f"{where} is {what}: edgebuild does not take the {facts.task} task yet; it builds detection "
                     "(boxes and class scores), classification, segmentation, pose and oriented-box (obb) "
                     "models", hint="train or export one of those variants (e.g. yolo11n.pt, yolo11n-obb.pt), "
                                    "or write a wrapper torch.nn.Module that outputs boxes and scores and name "
                                    "it with model.entry_point")



# -- the checkpoint: loaded only when trusted ------------------------------------------------------

def load_trusted(project: Project, path: Path) -> torch.nn.Module:
    """The checkpoint's model in FP32 eval mode: ``torch.load`` with full unpickling, only when trusted."""
    import torch

    where = f"{project.source}: model.source: {path.name}"
    if not project.model.trust_checkpoint:
        raise ModelError(f"{where} is an Ultralytics checkpoint, a pickle: loading it runs arbitrary code, and "
                         "[model] trust_checkpoint is not set", hint=TRUST_HINT)
    try:
        import ultralytics  # noqa: F401  # the classes the pickle names
    except ImportError as exc:
        raise ModelError(f"{where}: loading an Ultralytics checkpoint needs the ultralytics package ({exc})",
                         hint="pip install ultralytics (AGPL-3.0; edgebuild does not install it), or export the "
                              "model to ONNX and name the .onnx with model.source") from None
    try:
        checkpoint = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ModelError(f"{where}: torch.load failed: {type(exc).__name__}: {exc}") from None
    model = (checkpoint.get("ema") or checkpoint.get("model")) if isinstance(checkpoint, dict) else None
    if model is None or not isinstance(model, torch.nn.Module):
        raise ModelError(f"{where}: no Ultralytics model in the checkpoint (keys: {list(checkpoint)[:8]})")
    return model.float().eval()


def adapter_module(model: torch.nn.Module, task: str, outputs: list[str], top_k: int = 0,
                   score_threshold: float = 0.0) -> torch.nn.Module:
    """``model`` (an Ultralytics DetectionModel or ClassificationModel) with edgebuild's outputs, by name.

    ``top_k`` > 0: the head is NMS-free and its one-to-one branch runs, keeping its best ``top_k``
    (its ``max_det``); ``outputs`` are then ``NMS_OUTPUTS`` and a detection counts when its score
    is above ``score_threshold``."""
    return _adapter_class()(model, task, outputs, top_k, score_threshold)


@lru_cache(maxsize=1)
def _adapter_class() -> type:
    import torch

    class UltralyticsOutputs(torch.nn.Module):
        """detect: ``[N, 4+C, A]`` -> {boxes: [N, A, 4] xyxy, scores: [N, A, C]}; classify: {logits: [N, C]}."""

        def __init__(self, model: torch.nn.Module, task: str, outputs: list[str], top_k: int = 0,
                     score_threshold: float = 0.0) -> None:
            super().__init__()
            self.model, self.task, self.names = model, task, list(outputs)
            self.top_k, self.score_threshold = top_k, score_threshold
            # pose: (classes, keypoints, 2 or 3); segment, obb: (classes,)
            self.head_shape: tuple[int, ...] = ()
            # model.model: Ultralytics' nn.Sequential of layers; its last, the Detect/Classify head, has
            # attributes torch's Module type does not know
            head: Any = cast("torch.nn.Sequential", model.model)[-1] if hasattr(model, "model") else None
            self.detr = ""  # RT-DETR: its decoder's layout (edgebuild.sources.ultralytics.detr)
            if task == "detect" and type(head).__name__ in DETR_HEADS:
                from edgebuild.sources.ultralytics.detr import decoder_layout

                # its top-k queries as exported (export: K = min(queries, max_det)); dynamic stays off so K is
                # a constant of the graph (TensorRT 8.5's TopK takes no other), and forward clears the
                # anchors' cache so they are made from the input's size, inside the graph when exported
                self.detr, head.export, head.max_det = decoder_layout(head), True, top_k
            elif task in ("detect", *INSTANCE_HEADS) and head is not None:
                # The anchor grid from the input's size inside the graph: by default a Python shape check
                # decides when to recompute it, which an export runs once, baking in the trace's size.
                head.dynamic = True
                if top_k:  # YOLOv10/YOLO26: the one-to-one branch and its top-k, as trained to run
                    head.end2end, head.max_det = True, top_k
                elif getattr(head, "end2end", False):
                    head.end2end = False  # the one-to-many branch: raw per-anchor outputs, NMS after
                if task != "detect":
                    self.head_shape = (int(head.nc), *(int(k) for k in getattr(head, "kpt_shape", ())))

        def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
            if self.detr:
                decoder: Any = cast("torch.nn.Sequential", self.model.model)[-1]
                decoder.shapes = []  # its anchors made from this input's size
            y = self.model(images)
            y = y[0] if isinstance(y, (list, tuple)) else y  # eval mode: (decoded, raw maps)
            if self.detr:
                from edgebuild.sources.ultralytics.detr import rtdetr_detections

                found = rtdetr_detections(y, images, self.top_k, self.detr)
                return dict(zip(self.names, top_k_to_detections(found, self.score_threshold)))
            if self.task in INSTANCE_HEADS:
                return dict(zip(self.names, instance_outputs(y, self.task, self.head_shape)))
            if self.task != "detect":
                return {self.names[0]: y}
            if self.top_k:
                return dict(zip(self.names, top_k_to_detections(y, self.score_threshold)))
            return dict(zip(self.names, head_to_boxes_scores(y)))

    return UltralyticsOutputs


def head_to_boxes_scores(head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, 4+C, A]`` (cx, cy, w, h, scores) -> boxes ``[N, A, 4]`` (x1, y1, x2, y2), scores ``[N, A, C]``."""
    import torch

    y = head.transpose(1, 2)
    centre, size = y[..., 0:2], y[..., 2:4]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1), y[..., 4:]


def instance_outputs(y: Any, task: str, head_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """A pose, segment or OBB head's eval output in the documented convention (docs/tasks.md), by task:

    pose ``[N, 4+C+K*D, A]`` -> boxes [N, A, 4] xyxy, scores [N, A, C], keypoints [N, A, K, D] (x, y in
    input pixels, and with D = 3 the visibility, sigmoid-ed); segment ``([N, 4+C+M, A], prototypes
    [N, M, H/4, W/4])`` -> boxes, scores, mask coefficients [N, A, M], prototypes; obb ``[N, 4+C+1, A]``
    (cx, cy, w, h in input pixels, scores, the angle in radians) -> boxes [N, A, 5] xywhr, scores."""
    classes = head_shape[0]
    if task == "obb":  # the rotated box stays centre and size, as Ultralytics' rotated NMS reads it
        import torch

        y = y.transpose(1, 2)
        return torch.cat([y[..., :4], y[..., 4 + classes:]], dim=-1), y[..., 4:4 + classes]
    if task == "segment":
        head, prototypes = y
        boxes, rest = head_to_boxes_scores(head)
        return boxes, rest[..., :classes], rest[..., classes:], prototypes
    boxes, rest = head_to_boxes_scores(y)
    keypoints = rest[..., classes:]
    return boxes, rest[..., :classes], keypoints.reshape(*keypoints.shape[:2], head_shape[1], head_shape[2])


def top_k_to_detections(found: torch.Tensor, score_threshold: float) -> tuple[torch.Tensor, ...]:
    """An NMS-free head's ``[N, K, 6]`` (x1, y1, x2, y2, score, class; best first) -> ``NMS_OUTPUTS``:
    the count [N, 1] int32 of rows above ``score_threshold``, boxes [N, K, 4], scores and classes [N, K],
    the other rows zeroed (Ultralytics' val keeps the rows above its conf, as this count does)."""
    import torch

    valid = (found[..., 4] > score_threshold).to(found.dtype)
    count = valid.sum(dim=1, keepdim=True).to(torch.int32)
    return count, found[..., :4] * valid.unsqueeze(-1), found[..., 4] * valid, found[..., 5] * valid


# -- the ONNX export: the same adapter as nodes ----------------------------------------------------

PREFIX = "edgebuild_ultralytics_"


def _constant(graph: onnx.GraphProto, name: str, value: object, dtype: DTypeLike | None = None) -> str:
    """An initializer ``name`` holding ``value`` (int64 unless ``dtype``) added to ``graph``; its name."""
    import numpy as np
    from onnx import numpy_helper

    graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype or np.int64), name))
    return name


def _copy_with_output(proto: onnx.ModelProto, head: str) -> tuple[onnx.ModelProto, onnx.ValueInfoProto]:
    """A copy of ``proto`` to append nodes to, and its output ``head`` (a ValueError where it has none)."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    found = [o for o in model.graph.output if o.name == head]
    if not found:
        raise ValueError(f"no output {head!r} (outputs: {[o.name for o in model.graph.output]})")
    return model, found[0]


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A graph dimension: its size, its symbolic name, or None where it has neither."""
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)


def append_detection_adapter(proto: onnx.ModelProto, head: str, boxes: str = "boxes", scores: str = "scores",
                             classes: int | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` whose output ``head`` ([N, 4+C, A]) is replaced by ``boxes`` and ``scores``.

    Appended: Transpose to [N, A, 4+C]; Slice the centre, the size and the scores; x1y1 = centre -
    size / 2, x2y2 = centre + size / 2; Concat. Only opset 10+ operators, no ultralytics import.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    model, found = _copy_with_output(proto, head)
    graph = model.graph
    dims = list(found.type.tensor_type.shape.dim)
    elem = found.type.tensor_type.elem_type or TensorProto.FLOAT
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)

    def const(name: str, value: object, dtype: DTypeLike | None = None) -> str:
        return _constant(graph, PREFIX + name, value, dtype)

    n = lambda name: PREFIX + name  # noqa: E731
    axes = const("axes", [2])
    nodes = [
        helper.make_node("Transpose", [head], [n("anchors")], perm=[0, 2, 1], name=n("transpose")),
        helper.make_node("Slice", [n("anchors"), const("s0", [0]), const("e2", [2]), axes], [n("centre")],
                         name=n("slice_centre")),
        helper.make_node("Slice", [n("anchors"), const("s2", [2]), const("e4", [4]), axes], [n("size")],
                         name=n("slice_size")),
        helper.make_node("Slice", [n("anchors"), const("s4", [4]), const("end", [np.iinfo(np.int64).max]), axes],
                         [scores], name=n("slice_scores")),
        helper.make_node("Mul", [n("size"), const("half", 0.5, np_dtype)], [n("half_size")], name=n("half_size")),
        helper.make_node("Sub", [n("centre"), n("half_size")], [n("x1y1")], name=n("x1y1")),
        helper.make_node("Add", [n("centre"), n("half_size")], [n("x2y2")], name=n("x2y2")),
        helper.make_node("Concat", [n("x1y1"), n("x2y2")], [boxes], axis=2, name=n("boxes")),
    ]
    graph.node.extend(nodes)
    batch, channels, anchors = (_dim(d) for d in dims) if len(dims) == 3 else (None, None, None)
    classes = channels - 4 if isinstance(channels, int) else classes
    index = [o.name for o in graph.output].index(head)
    del graph.output[index]
    graph.output.insert(index, helper.make_tensor_value_info(scores, elem, [batch, anchors, classes]))
    graph.output.insert(index, helper.make_tensor_value_info(boxes, elem, [batch, anchors, 4]))
    return model


def raw_head_output(proto: onnx.ModelProto, classes: int) -> str | None:
    """The output that is a raw detection head, [N, 4+C, A] with A > 4+C, or None. A dynamic export's
    axes may all be symbolic: then its one output of rank 3 is the head (the model stage's run checks it)."""
    from edgebuild.sources.onnx_checks import graph_output_dims

    dims = graph_output_dims(proto)
    for name, shape in dims.items():
        if len(shape) == 3 and shape[1] == 4 + classes and (shape[2] is None or shape[2] > shape[1]):
            return name
    unknown = [name for name, shape in dims.items() if len(shape) == 3 and shape[1] is None]
    return unknown[0] if len(dims) == 1 and unknown else None


def top_k_output(proto: onnx.ModelProto) -> str | None:
    """The output of an NMS-free export (Ultralytics' one-to-one head: [N, K, 6]), or None."""
    from edgebuild.sources.onnx_checks import graph_output_dims

    found = [name for name, shape in graph_output_dims(proto).items() if len(shape) == 3 and shape[2] == 6]
    return found[0] if len(found) == 1 else None


def append_top_k_adapter(proto: onnx.ModelProto, head: str, score_threshold: float) -> onnx.ModelProto:
    """A copy of ``proto`` whose output ``head`` ([N, K, 6]: x1, y1, x2, y2, score, class, best first)
    is replaced by ``NMS_OUTPUTS``, as ``top_k_to_detections`` computes them: Slice, Greater, Cast,
    Mul and ReduceSum (opset 13+), no NonMaxSuppression."""
    import numpy as np
    from onnx import TensorProto, helper

    from edgebuild.runtime.base.vision import NMS_OUTPUTS

    model, found = _copy_with_output(proto, head)
    graph = model.graph
    dims = [_dim(d) for d in found.type.tensor_type.shape.dim]
    batch, k = (dims[0], dims[1]) if len(dims) == 3 else (None, None)

    def const(name: str, value: object, dtype: DTypeLike | None = None) -> str:
        return _constant(graph, PREFIX + name, value, dtype)

    n = lambda name: PREFIX + name  # noqa: E731
    axes = const("top_k_axes", [2])

    def column(name: str, start: int, end: int, out: str) -> onnx.NodeProto:
        return helper.make_node("Slice", [head, const(f"{name}_s", [start]), const(f"{name}_e", [end]), axes],
                                [out], name=n(f"slice_{name}"))

    count, boxes, scores, classes = NMS_OUTPUTS
    nodes = [
        column("boxes", 0, 4, n("top_k_boxes")), column("score", 4, 5, n("top_k_score")),
        column("class", 5, 6, n("top_k_class")),
        helper.make_node("Greater", [n("top_k_score"), const("threshold", [[[score_threshold]]], np.float32)],
                         [n("above")], name=n("above")),
        helper.make_node("Cast", [n("above")], [n("valid")], to=TensorProto.FLOAT, name=n("valid")),
        helper.make_node("Mul", [n("top_k_boxes"), n("valid")], [boxes], name=n("detection_boxes")),
        helper.make_node("Mul", [n("top_k_score"), n("valid")], [n("scores_3d")], name=n("scores_3d")),
        helper.make_node("Mul", [n("top_k_class"), n("valid")], [n("classes_3d")], name=n("classes_3d")),
        helper.make_node("Squeeze", [n("scores_3d"), axes], [scores], name=n("detection_scores")),
        helper.make_node("Squeeze", [n("classes_3d"), axes], [classes], name=n("detection_classes")),
        helper.make_node("ReduceSum", [n("valid"), const("rows", [1])], [n("count_3d")], keepdims=1,
                         name=n("count_3d")),
        helper.make_node("Squeeze", [n("count_3d"), axes], [n("count_float")], name=n("count_2d")),
        helper.make_node("Cast", [n("count_float")], [count], to=TensorProto.INT32, name=n("num_detections")),
    ]
    graph.node.extend(nodes)
    index = [o.name for o in graph.output].index(head)
    del graph.output[index]
    for offset, (name, elem, shape) in enumerate(zip(NMS_OUTPUTS, (TensorProto.INT32,) + (TensorProto.FLOAT,) * 3,
                                                     ([batch, 1], [batch, k, 4], [batch, k], [batch, k]))):
        graph.output.insert(index + offset, helper.make_tensor_value_info(name, elem, shape))
    return model


def instance_head_outputs(proto: onnx.ModelProto, task: str, classes: int,
                          kpt_shape: tuple[int, ...] = ()) -> tuple[str, str | None] | None:
    """(the head output, the prototypes output or None) of an Ultralytics pose, segment or OBB export, or None.

    pose ``[N, 4+C+K*D, A]``; obb ``[N, 4+C+1, A]``; segment ``[N, 4+C+M, A]`` and its prototypes
    ``[N, M, H/4, W/4]``. An axis the graph leaves symbolic matches; one fixed to another size does not."""
    from edgebuild.sources.onnx_checks import graph_output_dims

    dims = graph_output_dims(proto)
    heads = [name for name, shape in dims.items() if len(shape) == 3]
    found = [name for name, shape in dims.items() if len(shape) == 4] if task == "segment" else []
    if len(heads) != 1 or (task == "segment") != (len(found) == 1):
        return None
    channels = dims[heads[0]][1]
    extra = {"pose": math.prod(kpt_shape) if len(kpt_shape) == 2 else None, "obb": 1,
             "segment": dims[found[0]][1] if found else None}.get(task)
    if channels is not None and extra is not None and channels != 4 + classes + extra:
        return None
    return heads[0], (found[0] if found else None)


def append_instance_adapter(proto: onnx.ModelProto, task: str, head: str, names: Sequence[str], classes: int,
                            kpt_shape: tuple[int, ...] = (), prototypes: str | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` whose Ultralytics pose, segment or OBB head is replaced by the task's outputs
    ``names``, in ``instance_outputs``' order and with its values (docs/tasks.md, "The outputs"):

    pose: boxes [N, A, 4] xyxy, scores [N, A, C], keypoints [N, A, K, D]; segment: boxes, scores, mask
    coefficients [N, A, M], the prototypes passed through (``prototypes``: the export's output); obb:
    boxes [N, A, 5] (cx, cy, w, h, angle), scores. Transpose, Slice, the xywh -> xyxy arithmetic,
    Reshape and Concat (opset 10+), no ultralytics import."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    declared = {o.name: o for o in graph.output}
    for name in (head, prototypes):
        if name is not None and name not in declared:
            raise ValueError(f"no output {name!r} (outputs: {list(declared)})")
    elem = declared[head].type.tensor_type.elem_type or TensorProto.FLOAT
    p = f"{PREFIX}{task}_"

    def const(name: str, value: object, dtype: DTypeLike | None = None) -> str:
        return _constant(graph, p + name, value, dtype)

    axes = const("axes", [2])

    def columns(start: int, end: int, out: str) -> onnx.NodeProto:
        return helper.make_node("Slice", [p + "anchors", const(f"s{start}", [start]), const(f"e{end}", [end]), axes],
                                [out], name=out if out.startswith(p) else p + out)

    last = int(np.iinfo(np.int64).max)
    boxes, scores, *rest = names
    nodes = [helper.make_node("Transpose", [head], [p + "anchors"], perm=[0, 2, 1], name=p + "transpose"),
             columns(4, 4 + classes, scores)]
    if task == "obb":  # the rotated box stays centre, size and angle
        nodes += [columns(0, 4, p + "xywh"), columns(4 + classes, last, p + "angle"),
                  helper.make_node("Concat", [p + "xywh", p + "angle"], [boxes], axis=2, name=p + "boxes")]
    else:
        half = const("half", 0.5, helper.tensor_dtype_to_np_dtype(elem))
        nodes += [columns(0, 2, p + "centre"), columns(2, 4, p + "size"),
                  helper.make_node("Mul", [p + "size", half], [p + "half_size"], name=p + "half_size"),
                  helper.make_node("Sub", [p + "centre", p + "half_size"], [p + "x1y1"], name=p + "x1y1"),
                  helper.make_node("Add", [p + "centre", p + "half_size"], [p + "x2y2"], name=p + "x2y2"),
                  helper.make_node("Concat", [p + "x1y1", p + "x2y2"], [boxes], axis=2, name=p + "boxes")]
    if task == "pose":
        nodes += [columns(4 + classes, last, p + "keypoints_flat"),
                  helper.make_node("Reshape", [p + "keypoints_flat", const("keypoints_shape", [0, 0, *kpt_shape])],
                                   [rest[0]], name=p + "keypoints")]
    elif task == "segment":
        nodes.append(columns(4 + classes, last, rest[0]))
        if prototypes is not None and rest[1] != prototypes:
            nodes.append(helper.make_node("Identity", [prototypes], [rest[1]], name=p + "prototypes"))
    graph.node.extend(nodes)
    head_dims = [_dim(d) for d in declared[head].type.tensor_type.shape.dim]
    batch, channels, anchors = head_dims if len(head_dims) == 3 else (None, None, None)
    shapes: list[list[int | str | None] | None] = [[batch, anchors, 5 if task == "obb" else 4],
                                                   [batch, anchors, classes]]
    if task == "pose":
        shapes.append([batch, anchors, *kpt_shape])
    elif task == "segment":
        shapes.append([batch, anchors, channels - 4 - classes if isinstance(channels, int) else None])
        shapes.append([_dim(d) for d in declared[prototypes].type.tensor_type.shape.dim] if prototypes else None)
    before = [o.name for o in graph.output][:[o.name for o in graph.output].index(head)]
    kept = [o for o in graph.output if o.name not in (head, prototypes)]
    index = len([name for name in before if name != prototypes])
    made = [helper.make_tensor_value_info(name, elem, shape) for name, shape in zip(names, shapes)]
    del graph.output[:]
    graph.output.extend(kept[:index] + made + kept[index:])
    return model
