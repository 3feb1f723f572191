"""DETR-style heads (Ultralytics' RT-DETR) as edgebuild detections: NMS-free, top-k queries.

The convention (docs/transformer-detectors.md). A DETR decoder answers Q queries, each a box and a score per
class; no two queries are meant to find the same object, so there is no NMS. Its raw outputs are read as:

- boxes ``[N, Q, 4]``: centre x, centre y, width, height normalised to 0..1 of the network input
  (``"cxcywh-normalized"``: RT-DETR, DETR, RF-DETR, transformers' RT-DETR and D-FINE) or x1, y1, x2, y2 in
  network-input pixels (``"xyxy"``);
- scores ``[N, Q, C]``: per class, probabilities (sigmoid-ed) or logits (a sigmoid is applied).

The detections are the top K over all (query, class) pairs, best first (the RT-DETR reference's
post-processor, and Ultralytics' since 8.4: a query may give two classes), boxes turned into x1, y1, x2,
y2 in network-input pixels; they ship as the four outputs NMS inside the model has (``NMS_OUTPUTS``:
count, boxes, scores, classes, the rows at or under the score threshold zeroed), with no NMS node. So the
decoder, the server, the gate, Triton and DeepStream read them as they read an NMS-free YOLO's.

Ultralytics' RT-DETR in two layouts, by version (both read here):

- ``"top-k"``: ``[N, K, 6]`` (cx, cy, w, h normalised, score, class): the decoder takes the top K itself
  (Ultralytics 8.4 from ultralytics/ultralytics PR #24403; ``RTDETRDecoder.postprocess``);
- ``"queries"``: ``[N, Q, 4 + C]`` (cx, cy, w, h normalised, the C sigmoid-ed scores): earlier versions,
  whose validator took each query's best class; the top K over (query, class) is taken here.

Both forms: ``torch`` functions for the checkpoint's adapter, and ONNX nodes appended to an export
(``append_detr_rows``; Slice, Mul, Sub, Add, Concat, Shape, Gather, Cast, Reshape, TopK, Div, Mod,
GatherElements, then ``append_top_k_adapter``'s). No ultralytics import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx
    import torch

__all__ = []

#: the layouts of an Ultralytics RT-DETR's output
TOP_K, QUERIES = "top-k", "queries"
_PREFIX = "edgebuild_detr_"


def queries_top_k(boxes: torch.Tensor, scores: torch.Tensor, k: int) -> torch.Tensor:
    """boxes [N, Q, 4], per-class scores [N, Q, C] -> [N, K, 6] (the box as given, score, class), the best K
    (query, class) pairs first; K = min(k, Q * C) is a constant of the graph (TensorRT 8.5's TopK needs one)."""
    import torch

    classes = scores.shape[-1]
    k = min(int(k), int(boxes.shape[1]) * int(classes))
    best, index = scores.flatten(1).topk(k, dim=1)
    query = torch.div(index, classes, rounding_mode="floor")
    picked = boxes.gather(1, query.unsqueeze(-1).expand(-1, -1, 4))
    return torch.cat([picked, best.unsqueeze(-1), (index - query * classes).unsqueeze(-1).to(boxes.dtype)], dim=-1)


def to_pixel_xyxy(found: torch.Tensor, height: torch.Tensor | int, width: torch.Tensor | int) -> torch.Tensor:
    """[N, K, 6] whose boxes are cx, cy, w, h normalised -> the same rows with x1, y1, x2, y2 in input pixels."""
    import torch

    centre, size = found[..., 0:2], found[..., 2:4]
    scale = torch.stack([torch.as_tensor(width), torch.as_tensor(height)]).to(found.dtype)
    return torch.cat([(centre - size / 2) * scale, (centre + size / 2) * scale, found[..., 4:]], dim=-1)


def rtdetr_detections(y: torch.Tensor, images: torch.Tensor, top_k: int, layout: str) -> torch.Tensor:
    """An Ultralytics RT-DETR's eval output in ``layout`` -> [N, K, 6] x1, y1, x2, y2 in input pixels, score,
    class, best first (``top_k_to_detections`` makes the shipped outputs of it)."""
    if layout == QUERIES:
        y = queries_top_k(y[..., :4], y[..., 4:], top_k)
    return to_pixel_xyxy(y, images.shape[2], images.shape[3])


def decoder_layout(head: object) -> str:
    """The layout an Ultralytics ``RTDETRDecoder`` answers in eval mode: its own top-k from 8.4 on."""
    return TOP_K if callable(getattr(head, "postprocess", None)) else QUERIES


# -- the ONNX export: the same as nodes ------------------------------------------------------------

def export_layout(proto: onnx.ModelProto, head: str, classes: int) -> str | None:
    """The layout of an Ultralytics RT-DETR export's output ``head``, or None where it is neither.

    [N, K, 6] is the top-k layout and [N, Q, 4 + C] the queries one; with two classes both are 6 wide,
    and a dynamic export names no width: then the graph says, by its TopK nodes (the encoder's choice of
    queries is one; a decoder that takes its own top-k adds another)."""
    from edgebuild.sources.onnx_checks import graph_output_dims

    dims = graph_output_dims(proto).get(head)
    if dims is None or len(dims) != 3:
        return None
    width = dims[2]
    if width is not None and width not in (6, 4 + classes):
        return None
    if width is not None and 6 != 4 + classes:
        return TOP_K if width == 6 else QUERIES
    return TOP_K if sum(n.op_type == "TopK" for n in proto.graph.node) >= 2 else QUERIES


def detr_head_output(proto: onnx.ModelProto) -> str | None:
    """The one rank-3 output of an RT-DETR export, or None."""
    from edgebuild.sources.onnx_checks import graph_output_dims

    found = [name for name, dims in graph_output_dims(proto).items() if len(dims) == 3]
    return found[0] if len(found) == 1 else None


def append_detr_rows(proto: onnx.ModelProto, head: str, layout: str, classes: int,
                     top_k: int) -> tuple[onnx.ModelProto, str]:
    """A copy of ``proto`` whose RT-DETR output ``head`` (in ``layout``) is replaced by its detections' rows [N, K, 6]
    (x1, y1, x2, y2 in input pixels, score, class; best first), as ``rtdetr_detections`` computes them, and that
    output's name: ``append_top_k_adapter`` makes ``NMS_OUTPUTS`` of it. The image size is read from the graph's
    first input, so a dynamic export stays dynamic. No NonMaxSuppression."""
    from onnx import TensorProto, helper

    model = _copy(proto)
    graph = model.graph
    out = _Nodes(graph)
    n = out.name
    rows = out.queries_top_k(head, classes, top_k) if layout == QUERIES else head
    centre, size, rest = out.columns(rows, 0, 2, "centre"), out.columns(rows, 2, 4, "size"), \
        out.columns(rows, 4, 6, "rest")
    out.add("Shape", [graph.input[0].name], "image_shape")
    out.add("Gather", [n("image_shape"), out.const("wh_index", [3, 2])], "wh_int", axis=0)
    out.add("Cast", [n("wh_int")], "wh", to=TensorProto.FLOAT)
    out.add("Mul", [size, out.const("half", 0.5, "float32")], "half_size")
    out.add("Sub", [centre, n("half_size")], "x1y1_norm")
    out.add("Add", [centre, n("half_size")], "x2y2_norm")
    out.add("Mul", [n("x1y1_norm"), n("wh")], "x1y1")
    out.add("Mul", [n("x2y2_norm"), n("wh")], "x2y2")
    out.add("Concat", [n("x1y1"), n("x2y2"), rest], "xyxy_rows", axis=2)
    graph.node.extend(out.nodes)
    index = [o.name for o in graph.output].index(head)
    batch = _dim(graph.output[index], 0)
    k = top_k if layout == QUERIES else _dim(graph.output[index], 1)
    del graph.output[index]
    graph.output.insert(index, helper.make_tensor_value_info(n("xyxy_rows"), TensorProto.FLOAT, [batch, k, 6]))
    return model, n("xyxy_rows")


class _Nodes:
    """Nodes to append to ``graph``, each named ``edgebuild_detr_<name>`` after its output, with their constants."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.nodes: list[onnx.NodeProto] = []
        self.made: set[str] = set()

    @staticmethod
    def name(name: str) -> str:
        return _PREFIX + name

    def const(self, name: str, value: object, dtype: str = "int64") -> str:
        import numpy as np
        from onnx import numpy_helper

        if name not in self.made:
            self.made.add(name)
            self.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), self.name(name)))
        return self.name(name)

    def add(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [self.name(output)], name=self.name(output), **attributes))
        return self.name(output)

    def columns(self, source: str, start: int, end: int, output: str) -> str:
        """``source[..., start:end]``."""
        return self.add("Slice", [source, self.const(f"{output}_start", [start]), self.const(f"{output}_end", [end]),
                                  self.const("axis_2", [2])], output)

    def queries_top_k(self, head: str, classes: int, top_k: int) -> str:
        """``queries_top_k`` of [N, Q, 4 + C]: Reshape the scores to [N, Q * C], TopK (K an initializer), the
        query (Div) and class (Mod) of each, GatherElements of the boxes; the [N, K, 6] rows' name."""
        from onnx import TensorProto, helper

        n, last = self.name, self.const("axis_2", [2])
        boxes, scores = self.columns(head, 0, 4, "query_boxes"), self.columns(head, 4, 4 + classes, "query_scores")
        self.add("Reshape", [scores, self.const("flat", [0, -1])], "flat_scores")
        self.nodes.append(helper.make_node("TopK", [n("flat_scores"), self.const("k", [top_k])],
                                           [n("best"), n("best_index")], axis=1, largest=1, sorted=1, name=n("top_k")))
        self.add("Div", [n("best_index"), self.const("classes", classes)], "query")
        self.add("Mod", [n("best_index"), self.const("classes_mod", classes)], "class_index")
        self.add("Unsqueeze", [n("query"), last], "query_3d")
        self.add("Expand", [n("query_3d"), self.const("box_shape", [1, 1, 4])], "query_4")
        self.add("GatherElements", [boxes, n("query_4")], "picked", axis=1)
        self.add("Unsqueeze", [n("best"), last], "best_3d")
        self.add("Cast", [n("class_index")], "class_float", to=TensorProto.FLOAT)
        self.add("Unsqueeze", [n("class_float"), last], "class_3d")
        return self.add("Concat", [n("picked"), n("best_3d"), n("class_3d")], "top_k_rows", axis=2)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    return model


def _dim(value: onnx.ValueInfoProto, axis: int) -> int | str | None:
    dims = list(value.type.tensor_type.shape.dim)
    if len(dims) <= axis:
        return None
    d = dims[axis]
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
