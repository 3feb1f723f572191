"""The DLA INT8 engine's precision layout as an ONNX that ONNX Runtime runs on the CPU.

For one TensorRT version's DLA placement (``edgebuild.targets.dla.place_nodes``) of the FP32 graph:

- every activation tensor a DLA layer reads or writes is fake-quantized where it is made (a graph input:
  where a DLA layer reads it): QuantizeLinear/DequantizeLinear, INT8, per tensor, scale = amax / 127, zero
  point 0, as TensorRT's implicit quantization stores it; so each DLA layer reads and writes INT8 values;
- the weights of the DLA's Conv, ConvTranspose, Gemm and MatMul layers are rounded to their INT8 grid per
  output channel (scale = max |w| of the channel / 127), as TensorRT quantizes them; written in place (what
  a constant DequantizeLinear would give), so the graph keeps its weights' names and ONNX Runtime folds nothing;
- each float tensor a GPU fallback layer writes (and no DLA layer touches) is rounded to FP16 (Cast to FLOAT16
  and back): the builder runs the fallback layers in FP16
  (``edgebuild.runtime.engines.backends.tensorrt_dla``), and FP16 compute equals FP32 compute on
  FP16-rounded values up to the rounding inside one layer (the FP16 candidate's own argument);
- what is folded at build time stays as it is.

This is the layout with every DLA tensor in INT8, including tensors TensorRT fuses away (a Conv's output
before its activation) and layers it may still choose to run in FP16: the emulation errs on the side of
more quantization than the engine has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.dla import NodePlace

__all__: list[str] = []

LEVELS = 127
#: where a weighted op's weights have their output channel (a Gemm's by transB)
_WEIGHTED = {"Conv": 0, "ConvTranspose": 1, "MatMul": -1}


@dataclass(frozen=True)
class DlaTensors:
    """The activations of one DLA placement: those the DLA runs, those the GPU fallback writes."""

    dla: tuple[str, ...]  # read or written by a DLA layer: each needs a range
    gpu: tuple[str, ...]  # written by a GPU fallback layer, touched by no DLA layer: FP16
    dla_layers: int
    gpu_layers: int

    def missing(self, ranges: dict[str, float]) -> tuple[str, ...]:
        return tuple(t for t in self.dla if t not in ranges)


def dla_tensors(model: onnx.ModelProto, places: list[NodePlace], activations: list[str]) -> DlaTensors:
    """Which of ``activations`` (``ranges.activation_tensors``) the DLA layers run, and which the GPU's write."""
    from edgebuild.targets.dla import ON_DLA, ON_GPU

    float_activations = set(activations)
    typed_unknown = _untyped(model, float_activations)
    dla: dict[str, None] = {}
    for node, place in zip(model.graph.node, places):
        if place.on == ON_DLA:
            for name in (*node.input, *node.output):
                if name and (name in float_activations or name in typed_unknown):
                    dla[name] = None
    gpu = {o: None for node, place in zip(model.graph.node, places) if place.on == ON_GPU
           for o in node.output if o in float_activations and o not in dla}
    return DlaTensors(tuple(dla), tuple(gpu), sum(p.on == ON_DLA for p in places), sum(p.on == ON_GPU for p in places))


def _untyped(model: onnx.ModelProto, typed: set[str]) -> set[str]:
    """Outputs of non-constant nodes that are no known activation but whose type is unknown: a DLA layer's such
    tensor still needs a range, so the coverage check names it rather than leaving it out silently."""
    import onnx

    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001
        graph = model.graph
    typed_names = {v.name for v in (*graph.value_info, *graph.input, *graph.output) if v.type.tensor_type.elem_type}
    constants = {i.name for i in model.graph.initializer}
    return {o for n in model.graph.node if n.op_type != "Constant" for o in n.output
            if o and o not in typed_names and o not in typed and o not in constants}


def emulation_model(model: onnx.ModelProto, places: list[NodePlace], tensors: DlaTensors,
                    ranges: dict[str, float]) -> onnx.ModelProto:
    """The emulation of ``model`` (a copy; the FP32 model is not changed). Every DLA tensor needs its range."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgebuild.targets.dla import ON_DLA

    missing = tensors.missing(ranges)
    assert not missing, f"the coverage check refuses a layout without ranges: {missing[:3]}"
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    weights = {i.name: i for i in graph.initializer}
    zero = "dla_int8_zero_point"
    graph.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int8), zero))
    graph_inputs = {i.name for i in graph.input}
    made_here: dict[str, list[onnx.NodeProto]] = {}
    renamed: dict[str, str] = {}  # a graph input -> its fake-quantized copy (what the DLA layers read)
    nodes = list(graph.node)
    for index, name in enumerate((*tensors.dla, *tensors.gpu)):
        if index < len(tensors.dla):
            scale = f"{name}::dla_scale"
            graph.initializer.append(numpy_helper.from_array(np.array(ranges[name] / LEVELS, dtype=np.float32), scale))
            source = name if name in graph_inputs else f"{name}::fp32"
            target = f"{name}::dla_int8" if name in graph_inputs else name
            pair = [helper.make_node("QuantizeLinear", [source, scale, zero], [f"{name}::q"], name=f"dla_q_{index}"),
                    helper.make_node("DequantizeLinear", [f"{name}::q", scale, zero], [target], name=f"dla_dq_{index}")]
            if name in graph_inputs:
                renamed[name] = target
        else:
            source, target = f"{name}::fp32", name
            half = f"{name}::fp16"
            pair = [helper.make_node("Cast", [source], [half], to=TensorProto.FLOAT16, name=f"gpu_h_{index}"),
                    helper.make_node("Cast", [half], [target], to=TensorProto.FLOAT, name=f"gpu_f_{index}")]
        made_here[name] = pair
    ordered: list[onnx.NodeProto] = [n for name in renamed for n in made_here[name]]
    for position, (node, place) in enumerate(zip(nodes, places)):
        if place.on == ON_DLA:
            for k, name in enumerate(node.input):
                if name in renamed:
                    node.input[k] = renamed[name]
            _quantize_weights(node, position, weights, graph)
        after = []
        for k, name in enumerate(node.output):
            if name in made_here and name not in graph_inputs:
                node.output[k] = f"{name}::fp32"
                after += made_here[name]
        ordered += [node, *after]
    graph.ClearField("node")
    graph.node.extend(ordered)
    return out


def _quantize_weights(node: onnx.NodeProto, position: int, weights: dict, graph: onnx.GraphProto) -> None:
    """A DLA layer's weights on their per-output-channel INT8 grid, as a new initializer the node reads."""
    from onnx import helper, numpy_helper

    axis = _WEIGHTED.get(node.op_type)
    if node.op_type == "Gemm":
        trans_b = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "transB"), 0)
        axis = 0 if trans_b else 1
    if axis is None or len(node.input) < 2 or node.input[1] not in weights:
        return
    w = numpy_helper.to_array(weights[node.input[1]])
    if w.dtype != np.float32 or w.ndim < 2:
        return
    name = f"{node.input[1]}::dla_int8::{position}"
    graph.initializer.append(numpy_helper.from_array(quantize_per_channel(w, axis), name))
    node.input[1] = name


def quantize_per_channel(w: np.ndarray, axis: int) -> np.ndarray:
    """``w`` rounded to symmetric INT8 per channel of ``axis`` (scale = max |w| / 127; an all-zero channel stays 0)."""
    axis = axis % w.ndim
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    scale = np.abs(w).max(axis=reduce, keepdims=True) / LEVELS
    safe = np.where(scale > 0, scale, 1.0)
    return (np.clip(np.round(w / safe), -LEVELS, LEVELS) * safe * (scale > 0)).astype(np.float32)
