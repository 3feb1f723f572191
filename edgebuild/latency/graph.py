"""What an ONNX graph asks of a GPU: per fused layer, the arithmetic and the bytes it moves.

The graph's shapes come from ONNX shape inference at the input size asked for (the batch and the
spatial size of every image input are set before inference). Nodes are then grouped the way
TensorRT fuses them, so that each group is one kernel launch:

- a Conv, ConvTranspose, Gemm or MatMul starts a group, and the elementwise nodes that follow it
  (BatchNormalization, bias, activations, SiLU's ``x * sigmoid(x)``, a residual Add) join it;
- elementwise nodes that follow other elementwise nodes join their producer's group (TensorRT's
  pointwise fusion);
- Concat, Reshape, Flatten, Squeeze, Unsqueeze, Identity and the shape arithmetic (Shape, Gather
  on shapes, Constant) cost nothing: TensorRT writes concatenated tensors in place and folds
  shape arithmetic into the engine;
- everything else (pooling, Resize, Softmax, Transpose, Slice, Split, reductions...) is a group of
  its own that reads its inputs and writes its outputs.

Counting rules (what the unit tests derive by hand): a convolution is ``2 * N * Cout * Hout *
Wout * (Cin / groups) * kH * kW`` FLOPs (a multiply-add is two; bias not counted), a Gemm or
MatMul ``2 * M * N * K`` per batch, an elementwise node one FLOP per output element, a pooling
node one per output element per window element. A group moves, at the precision's element size
(fp32 4 bytes, fp16 2, int8 1): its weights, the activations it reads from outside the group and
the activations it writes that someone outside the group reads (or that are graph outputs).
FP8 is one byte; NVFP4 half a byte plus one FP8 scale per 16 elements (0.5625), an assumption: no
published figure says what an NVFP4 engine moves. Each layer also names its ops (what the DLA rules
are checked against) and the layers whose tensors it reads (where a GPU/DLA boundary moves data).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from edgebuild.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import onnx

__all__ = ["GraphCost", "graph_cost_from_file"]

_T = TypeVar("_T")

ELEMENT_BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "fp8": 1.0, "nvfp4": 0.5625}

ANCHORS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid",
    "HardSwish", "Clip", "Elu", "Selu", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Pow", "Neg", "Abs",
    "BatchNormalization", "Softplus", "Mish", "Cast", "Where", "Max", "Min", "Reciprocal",
    "QuantizeLinear", "DequantizeLinear",
}
FREE = {
    "Concat", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Constant",
    "ConstantOfShape", "Gather", "Range", "Expand", "Size", "Dropout",
}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}


@dataclass(frozen=True)
class LayerCost:
    """One fused layer (one kernel): its FLOPs, its weights and the activation elements it moves."""

    name: str
    kind: str  # the op that started the group: "Conv", "MatMul", "Resize", "Add" (pointwise)...
    flops: float
    weight_elements: int
    activation_elements: int
    tensor_cores: bool  # dense math a tensor core can do (not a depthwise convolution)
    ops: str = ""  # the ONNX op types fused into the layer, sorted, "+"-joined ("" where not recorded)
    #: (index of the layer that wrote it, or -1 for a graph input; elements) per activation read from outside
    inputs: tuple[tuple[int, int], ...] = ()
    output_elements: int = 0  # elements of the graph's outputs it writes

    def bytes_moved(self, precision: str) -> float:
        return (self.weight_elements + self.activation_elements) * ELEMENT_BYTES[precision]


@dataclass(frozen=True)
class GraphCost:
    """A whole graph at one input size: its fused layers and what could not be counted."""

    layers: tuple[LayerCost, ...]
    batch: int
    input_hw: tuple[int, int] | None  # the first 4-D input's height and width, None if it has none
    unknown_shapes: int  # nodes whose output shape inference could not give
    dynamic_inputs: tuple[str, ...] = ()  # inputs still without a fixed shape: the counts leave them out

    @property
    def flops(self) -> float:
        return sum(layer.flops for layer in self.layers)

    def bytes_moved(self, precision: str) -> float:
        return sum(layer.bytes_moved(precision) for layer in self.layers)


def graph_cost_from_file(path: Path, *, batch: int = 1, input_hw: tuple[int, int] | None = None) -> GraphCost:
    """The cost of the ONNX file at ``path`` (weights in external data are not read: only their shapes)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError... for a file that is not ONNX
        raise ModelError(f"{path}: not an ONNX model ({exc})") from None
    return graph_cost(model, batch=batch, input_hw=input_hw)


def cached_graph_cost(path: Path, *, batch: int = 1, input_hw: tuple[int, int] | None = None) -> GraphCost:
    """``graph_cost_from_file``, but while a file cache is in use (``edgebuild.statcache.use``: a compile),
    an ONNX file whose stat is unchanged is not read again, nor onnx imported; the entry is kept under
    this module's own hash and onnx's version (its shape inference), so a change to either counts again."""
    from edgebuild.content import digest, file_sha256, tool_versions
    from edgebuild.statcache import cached

    kind = f"graph-cost:{digest([file_sha256(Path(__file__)), tool_versions('onnx'), batch, input_hw])[:24]}"
    return cached(path, kind, lambda p: graph_cost_from_file(p, batch=batch, input_hw=input_hw),
                  _graph_cost_of, asdict)


def fixed_graph_cost(path: Path, *, batch: int = 1, input_hw: tuple[int, int] | None = None,
                     hint: str | None = None) -> GraphCost:
    """``cached_graph_cost``, or a ConfigError (with ``hint``) when an input has no fixed shape to count at."""
    cost = cached_graph_cost(path, batch=batch, input_hw=input_hw)
    if cost.dynamic_inputs:
        raise ConfigError(f"{path}: input {', '.join(cost.dynamic_inputs)} has no fixed shape", hint=hint)
    return cost


def _graph_cost_of(value: Any) -> GraphCost:
    """A GraphCost from the file cache's JSON (``dataclasses.asdict`` of it)."""
    hw = value["input_hw"]
    layers = tuple(LayerCost(**{**layer, "inputs": tuple((int(i), int(n)) for i, n in layer.get("inputs", ()))})
                   for layer in value["layers"])
    return GraphCost(layers, int(value["batch"]),
                     (int(hw[0]), int(hw[1])) if hw is not None else None, int(value["unknown_shapes"]),
                     tuple(str(name) for name in value["dynamic_inputs"]))


def _inferred(model: onnx.ModelProto
              ) -> tuple[onnx.ModelProto, dict[str, tuple[int, ...] | None], dict[str, int], set[str]]:
    """(the model with inferred shapes, its tensors' shapes, weight name -> elements, the names of weights and
    Constant outputs): what graph_cost and node_costs count with."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # onnx's InferenceError and friends: a graph the checker refuses
        raise ModelError(f"ONNX shape inference failed: {exc}") from None
    weights = {init.name: math.prod(init.dims) for init in inferred.graph.initializer}
    constants = set(weights) | {o for n in inferred.graph.node if n.op_type == "Constant" for o in n.output}
    return inferred, _shapes(inferred), weights, constants


def graph_cost(model: onnx.ModelProto, *, batch: int = 1, input_hw: tuple[int, int] | None = None) -> GraphCost:
    """The cost of ``model`` with its inputs set to ``batch`` (and ``input_hw`` for 4-D image inputs)."""
    model = _with_input_shape(model, batch, input_hw)
    inferred, shapes, weights, constants = _inferred(model)
    layers, unknown = _fuse(inferred.graph, shapes, weights, constants)
    inputs = [v for v in model.graph.input if v.name not in weights]
    dynamic = tuple(v.name for v in inputs if shapes.get(v.name) is None)
    fixed = [shape for shape in (shapes.get(v.name) for v in inputs) if shape is not None]
    image = next((shape for shape in fixed if len(shape) == 4), None)
    return GraphCost(tuple(layers), batch, (image[2], image[3]) if image else None, unknown, dynamic)


@dataclass(frozen=True)
class NodeCost:
    """One ONNX node on its own, unfused: its FLOPs, its weights and the activation elements it reads and writes."""

    flops: float
    weight_elements: int
    activation_elements: int
    known: bool  # every shape it needs was inferred

    @property
    def elements(self) -> int:
        return self.weight_elements + self.activation_elements


def node_costs(model: onnx.ModelProto, *, batch: int = 1, input_hw: tuple[int, int] | None = None
               ) -> tuple[list[NodeCost], dict[str, int]]:
    """The cost of each node of ``model`` (in graph order) with its inputs set to ``batch`` and ``input_hw``, and
    the elements of every tensor whose shape is known there.

    The same counting rules as ``graph_cost``, per node and without fusion: what a device split
    (``edgebuild.latency.dla_cost``) needs, where each node may land on another accelerator.
    """
    inferred, shapes, weights, constants = _inferred(_with_input_shape(model, batch, input_hw))
    costs = []
    for node in inferred.graph.node:
        activations = [n for n in node.input if n and n not in constants]
        if node.op_type not in ANCHORS and node.output and shapes.get(node.output[0]) is None:
            known_inputs = [shape for shape in (shapes.get(n) for n in activations) if shape is not None]
            shapes[node.output[0]] = max(known_inputs, key=math.prod) if known_inputs else None
        counted = _node_flops(node, shapes) if node.op_type not in FREE else (0.0, False)
        moved = sum(_size(shapes, n) or 0 for n in [*activations, *(o for o in node.output if o)])
        costs.append(NodeCost(counted[0] if counted else 0.0, sum(weights.get(n, 0) for n in node.input),
                              moved, counted is not None))
    return costs, {name: math.prod(shape) for name, shape in shapes.items() if shape is not None}


def _with_input_shape(model: onnx.ModelProto, batch: int, input_hw: tuple[int, int] | None) -> onnx.ModelProto:
    import onnx

    # a copy without the weights' values (only their shapes count; small tensors keep theirs, for
    # the shapes computed from them): copying a large model whole takes seconds
    light = onnx.ModelProto()
    light.CopyFrom(_without_initializers(model))
    for init in model.graph.initializer:
        if math.prod(init.dims) <= _SMALL:
            light.graph.initializer.append(init)
        else:
            light.graph.initializer.append(onnx.TensorProto(name=init.name, data_type=init.data_type, dims=init.dims))
    model = light
    initializers = {init.name for init in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        # the first dimension is the batch: set where it is dynamic or another batch is asked for
        if len(dims) >= 1 and (not dims[0].HasField("dim_value") or dims[0].dim_value < 1 or batch != 1):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = batch
        if len(dims) == 4 and input_hw is not None:
            for dim, size in zip(dims[2:], input_hw):
                dim.ClearField("dim_param")
                dim.dim_value = size
    return model


_SMALL = 4096  # elements: an initializer this small may be a shape, and keeps its values


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx

    graph = onnx.GraphProto()
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    graph.value_info.extend(model.graph.value_info)
    copy = onnx.ModelProto()
    copy.ir_version = model.ir_version
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)
    copy.graph.CopyFrom(graph)
    return copy


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...] | None]:
    shapes: dict[str, tuple[int, ...] | None] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            shapes.setdefault(value.name, None)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]  # -1: no fixed size
        if shapes.get(value.name) is None:  # a graph output's declared shape never hides an inferred one
            shapes[value.name] = None if any(d < 0 for d in dims) else tuple(dims)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _size(shapes: dict[str, tuple[int, ...] | None], name: str) -> int | None:
    shape = shapes.get(name)
    return None if shape is None else math.prod(shape)


def _attr(node: onnx.NodeProto, name: str, default: _T) -> _T:
    """``name``'s value on ``node``, else ``default``: ONNX gives an attribute the type its operator
    defines (an int for ``group``, a list of ints for ``kernel_shape``), which is the default's."""
    import onnx

    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def _node_flops(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...] | None]) -> tuple[float, bool] | None:
    """(FLOPs, tensor-core work) of one node, None where a shape it needs is unknown."""
    out = shapes.get(node.output[0]) if node.output else None
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        w = shapes.get(node.input[1])
        x = shapes.get(node.input[0])
        if out is None or w is None or x is None:
            return None
        group = int(_attr(node, "group", 1))
        kernel = math.prod(w[2:])
        if op == "Conv":  # W: (Cout, Cin/group, k...)
            per_out = w[1] * kernel
            return 2.0 * math.prod(out) * per_out, w[1] > 1
        # ConvTranspose, W: (Cin, Cout/group, k...): every input element meets Cout/group * k weights
        return 2.0 * math.prod(x) * w[1] * kernel, x[1] // group > 1
    if op in ("Gemm", "MatMul"):
        a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
        if out is None or a is None or b is None:
            return None
        k = a[-1] if not (op == "Gemm" and _attr(node, "transA", 0)) else a[0]
        return 2.0 * math.prod(out) * k, True
    if out is None:
        return None
    if op in POOLS:
        if op.startswith("Global"):
            x = shapes.get(node.input[0])
            return (None if x is None else (float(math.prod(x)), False))
        return float(math.prod(out) * math.prod(_attr(node, "kernel_shape", [1]))), False
    return float(math.prod(out)), False


def _fuse(graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...] | None], weights: dict[str, int],
          constants: set[str]) -> tuple[list[LayerCost], int]:
    producer_group: dict[str, int] = {}  # tensor name -> group index
    groups: list[dict] = []
    unknown = 0
    for index, node in enumerate(graph.node):
        op = node.op_type
        activations = [n for n in node.input if n and n not in constants]
        if op in FREE or (op == "Gather" and all(n in constants for n in activations)):
            if not activations:  # an Identity (or a Reshape...) of a constant is a constant
                constants.update(node.output)
            for out in node.output:
                _alias(producer_group, out, [producer_group.get(n) for n in activations])
            continue
        if op not in ANCHORS and node.output and shapes.get(node.output[0]) is None:
            # shape inference could not follow (a Slice with computed bounds): the largest input
            # stands in for the output, an upper bound for a Slice, exact for an elementwise node
            unknown += 1
            known = [shape for shape in (shapes.get(n) for n in activations) if shape is not None]
            shapes[node.output[0]] = max(known, key=math.prod) if known else None
        counted = _node_flops(node, shapes)
        if counted is None:
            unknown += 1
            counted = (0.0, False)
        flops, tensor = counted
        target = None
        if op in ELEMENTWISE:
            owners = {producer_group[n] for n in activations if n in producer_group}
            fusable = [g for g in owners if groups[g]["open"]]
            if fusable:
                target = max(fusable)  # the latest open group: the producer TensorRT fuses into
        if target is None:
            groups.append({"name": node.name or f"{op}_{index}", "kind": op, "flops": 0.0, "tensor": False,
                           "weights": 0, "reads": set(), "writes": set(), "nodes": set(),
                           "open": op in ANCHORS or op in ELEMENTWISE})
            target = len(groups) - 1
        group = groups[target]
        group["flops"] += flops
        group["tensor"] = group["tensor"] or tensor
        group["nodes"].add(index)
        for name in node.input:
            if not name:
                continue
            if name in weights:
                group["weights"] += weights[name]
            elif name not in constants and producer_group.get(name) != target:
                group["reads"].add(name)
        for out in node.output:
            producer_group[out] = target
            group["writes"].add(out)
    outputs = {o.name for o in graph.output}
    graph_inputs = {i.name for i in graph.input}
    readers: dict[str, set[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            readers.setdefault(name, set()).add(index)
    layers = []
    for group in groups:
        moved = sum(_size(shapes, name) or 0 for name in group["reads"])
        produced = sum(_size(shapes, name) or 0 for name in group["writes"] if name in outputs)
        for name in group["writes"]:
            # written to memory when a graph output or read by a node outside the group (a free
            # node too: a Concat's inputs are written into its buffer)
            if name in outputs or readers.get(name, set()) - group["nodes"]:
                moved += _size(shapes, name) or 0
        ops = "+".join(sorted({graph.node[i].op_type for i in group["nodes"]}))
        inputs = tuple((producer_group.get(name, -1), _size(shapes, name) or 0) for name in sorted(group["reads"])
                       if name in producer_group or name in graph_inputs)
        layers.append(LayerCost(group["name"], group["kind"], group["flops"], group["weights"], moved, group["tensor"],
                                ops, inputs, produced))
    return layers, unknown


def _alias(producer_group: dict[str, int], out: str, owners: list[int | None]) -> None:
    # a free node's output stands for its input: a reader of it reads the input's producer's tensor
    known = [o for o in owners if o is not None]
    if known:
        producer_group[out] = known[0]
