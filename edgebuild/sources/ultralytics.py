"""Ultralytics models as edgebuild models: a checkpoint (``best.pt``) or an Ultralytics ONNX export.

Ultralytics' detection head (``Detect``, in eval mode) outputs ``[N, 4+C, A]``: per anchor the box
centre x, centre y, width and height in input pixels, then C class scores, already sigmoid-ed.
edgebuild's detection task reads ``boxes [N, A, 4]`` (x1, y1, x2, y2 in input pixels) and
``scores [N, A, C]``. This module adapts one to the other, in two forms:

- ``adapter_module``: an ``nn.Module`` around a checkpoint's ``DetectionModel`` (or
  ``ClassificationModel``: its probabilities become the task's logits output), with the head's
  anchor grid computed from the input's size inside the graph (``Detect.dynamic``), so an export
  takes any image size the profile allows instead of baking in the trace's;
- ``append_detection_adapter``: ONNX nodes (Transpose, Slice, the xywh -> xyxy arithmetic) appended
  to an Ultralytics export's graph, so the imported model has the two outputs. No ultralytics import.

What a model says of itself (task, class names, imgsz, stride: ``UltralyticsFacts``) comes from a
checkpoint read *without running its pickle* (``peek_checkpoint``: every class it names is a stub)
or from an export's ``metadata_props``, in ``edgebuild.project.ultralytics_facts`` (project loading
uses them too); it fills what the project leaves out and is checked against what it states.
Loading a checkpoint for real unpickles arbitrary code: only with ``[model] trust_checkpoint = true``.

Ultralytics is AGPL-3.0; edgebuild does not depend on it: ``ultralytics`` (its classes) is imported
only when a trusted checkpoint is loaded, by ``torch.load``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgebuild.errors import ModelError
from edgebuild.project.ultralytics_facts import (
    TASKS,
    VAL_DEFAULTS,
    UltralyticsFacts,
    facts_from_checkpoint,
)

if TYPE_CHECKING:
    import onnx
    import torch

    from edgebuild.project.config import Project

__all__ = ["TASKS", "VAL_DEFAULTS", "facts_from_checkpoint", "raise_for_task"]

TRUST_HINT = ("a .pt checkpoint is a Python pickle: loading it runs whatever code it names, so edgebuild loads "
              "one only when told to. If you made it (yolo train) or trust who did, set [model] "
              "trust_checkpoint = true; otherwise export it to ONNX (yolo export format=onnx dynamic=True) "
              "and name the .onnx with model.source: that route runs no pickle")



# -- the task --------------------------------------------------------------------------------------

def raise_for_task(where: str, facts: UltralyticsFacts) -> None:
    """Segmentation, pose and oriented boxes (and anything unknown) are refused, with what to do."""
    if facts.task in TASKS:
        return
    what = f"an Ultralytics {facts.task} model ({facts.summary()})"
    raise ModelError(f"{where} is {what}: edgebuild does not take the {facts.task} task yet; it builds detection "
                     "(boxes and class scores) and classification models",
                     hint="train or export the detection variant (e.g. yolov8n.pt instead of yolov8n-seg.pt) or "
                          "the classification one, or write a wrapper torch.nn.Module that outputs boxes and "
                          "scores and name it with model.entry_point")



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


def adapter_module(model: torch.nn.Module, task: str, outputs: list[str]) -> torch.nn.Module:
    """``model`` (an Ultralytics DetectionModel or ClassificationModel) with edgebuild's outputs, by name."""
    return _adapter_class()(model, task, outputs)


@lru_cache(maxsize=1)
def _adapter_class() -> type:
    import torch

    class UltralyticsOutputs(torch.nn.Module):
        """detect: ``[N, 4+C, A]`` -> {boxes: [N, A, 4] xyxy, scores: [N, A, C]}; classify: {logits: [N, C]}."""

        def __init__(self, model: torch.nn.Module, task: str, outputs: list[str]) -> None:
            super().__init__()
            self.model, self.task, self.names = model, task, list(outputs)
            # model.model: Ultralytics' nn.Sequential of layers; its last, the Detect/Classify head, has
            # attributes torch's Module type does not know
            head: Any = cast("torch.nn.Sequential", model.model)[-1] if hasattr(model, "model") else None
            if task == "detect" and head is not None:
                # The anchor grid from the input's size inside the graph: by default a Python shape check
                # decides when to recompute it, which an export runs once, baking in the trace's size.
                head.dynamic = True
                if getattr(head, "end2end", False):
                    head.end2end = False  # YOLOv10/YOLO26: the one-to-many head, raw per-anchor outputs

        def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
            y = self.model(images)
            y = y[0] if isinstance(y, (list, tuple)) else y  # eval mode: (decoded, raw maps)
            if self.task != "detect":
                return {self.names[0]: y}
            return dict(zip(self.names, head_to_boxes_scores(y)))

    return UltralyticsOutputs


def head_to_boxes_scores(head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, 4+C, A]`` (cx, cy, w, h, scores) -> boxes ``[N, A, 4]`` (x1, y1, x2, y2), scores ``[N, A, C]``."""
    import torch

    y = head.transpose(1, 2)
    centre, size = y[..., 0:2], y[..., 2:4]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1), y[..., 4:]


# -- the ONNX export: the same adapter as nodes ----------------------------------------------------

PREFIX = "edgebuild_ultralytics_"


def append_detection_adapter(proto: onnx.ModelProto, head: str, boxes: str = "boxes", scores: str = "scores",
                             classes: int | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` whose output ``head`` ([N, 4+C, A]) is replaced by ``boxes`` and ``scores``.

    Appended: Transpose to [N, A, 4+C]; Slice the centre, the size and the scores; x1y1 = centre -
    size / 2, x2y2 = centre + size / 2; Concat. Only opset 10+ operators, no ultralytics import.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    found = [o for o in graph.output if o.name == head]
    if not found:
        raise ValueError(f"no output {head!r} (outputs: {[o.name for o in graph.output]})")
    dims = list(found[0].type.tensor_type.shape.dim)
    elem = found[0].type.tensor_type.elem_type or TensorProto.FLOAT
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)

    def const(name: str, value: Any, dtype: Any = np.int64) -> str:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), PREFIX + name))
        return PREFIX + name

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

    def dim(d: Any) -> Any:
        return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)

    batch, channels, anchors = (dim(d) for d in dims) if len(dims) == 3 else (None, None, None)
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
