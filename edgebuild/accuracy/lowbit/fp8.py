"""The FP8 candidate: E4M3 Q/DQ where TensorRT runs FP8 convolutions and GEMMs, as its FP8 recipe places them.

Placement is the INT8 candidate's (``edgebuild.accuracy.quantize.qdq_placement``: Conv, ConvTranspose,
Gemm, MatMul and the residual Adds TensorRT fuses, nothing of the decode or the selection tail), less
the convolutions TensorRT has no FP8 kernel for (fewer than 16 channels, channel counts that do not pad
alike to 16, a kernel area over 32: profiles/tensorrt/silent-fallbacks.toml, case "fp8-conv-shape",
as ModelOpt's FP8 recipe excludes them); those stay in float on both inputs, never one of them.

- activations: per tensor, ``scale = amax / 448`` from the calibration statistics (the same pass the
  INT8 candidate's ranges come from; amax, not a clipped range: E4M3's exponent covers the tail),
  QuantizeLinear -> DequantizeLinear with a float8e4m3fn zero point, one pair per consumer;
- weights: per output channel, ``scale = amax / 448``, stored as float8e4m3fn initializers with a
  DequantizeLinear (TensorRT takes pre-quantized weights behind an IDequantizeLayer), biases in float;
- the graph imports opset 19 at least (QuantizeLinear/DequantizeLinear take FP8 from opset 19).

ONNX Runtime runs this graph on the CPU as it is: the candidate that is measured is the one that ships.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.accuracy.lowbit.formats import E4M3_MAX, fp8_weight, scale_of

if TYPE_CHECKING:
    import onnx

    from edgebuild.accuracy.calibration import ActivationStatistics
    from edgebuild.accuracy.quantize import Candidate, QdqPlacement

__all__: list[str] = []

#: the opset from which QuantizeLinear/DequantizeLinear take float8 types
FP8_OPSET = 19
ZERO_POINT = "edgebuild_fp8_zero"


def _attribute(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def weight_axis(node: Any, rank: int) -> int | None:
    """The output-channel axis of a weighted node's weight (per-channel scales), None for per tensor."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1 if _attribute(node, "group", 1) == 1 else None
    if node.op_type == "Gemm":
        return 0 if _attribute(node, "transB", 0) else 1
    return 1 if node.op_type == "MatMul" and rank == 2 else None


def without_fp8_kernel(dims: tuple[int, ...]) -> bool:
    """Whether a Conv weight of ``dims`` ([O, I/g, k...]) has no FP8 convolution kernel in TensorRT."""
    from edgebuild.targets.precision_layouts import precision_table

    case = next(c for c in precision_table()["case"] if c["when"] == "fp8_conv_shape")
    out_channels, in_channels = dims[0], dims[1]
    area = int(np.prod(dims[2:])) if len(dims) > 2 else 1
    align = case["channel_alignment"]
    return min(out_channels, in_channels) < case["min_channels"] or out_channels % align != in_channels % align \
        or area > case["max_kernel_area"]


def fp8_nodes(model: onnx.ModelProto, names: Iterable[str], amax: dict[str, float]) -> tuple[list[str], list[str]]:
    """(the nodes of ``names`` that get FP8 Q/DQ on both inputs, the Convs left in float for want of a kernel).

    A node whose activation has no calibrated amax is left in float too (never one input quantized)."""
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    wanted, chosen, no_kernel = set(names), [], []
    for node in model.graph.node:
        if node.name not in wanted:
            continue
        if node.op_type == "Conv" and node.input[1] in weights and without_fp8_kernel(weights[node.input[1]]):
            no_kernel.append(node.name)
            continue
        if all(name in weights or name in amax for name in node.input[:2]):
            chosen.append(node.name)
    return chosen, no_kernel


def insert_fp8(model: onnx.ModelProto, nodes: Iterable[str], amax: dict[str, float]) -> None:
    """FP8 Q/DQ on the first two inputs of ``nodes`` (in place): weights per channel, activations per tensor."""
    from onnx import TensorProto, helper, numpy_helper

    wanted = set(nodes)
    initializers = {i.name: i for i in model.graph.initializer}
    added: list[Any] = [helper.make_tensor(ZERO_POINT, TensorProto.FLOAT8E4M3FN, [], [0])]
    order: list[Any] = []
    replaced: set[str] = set()
    for node in model.graph.node:
        if node.name in wanted:
            for index, name in enumerate(node.input[:2]):
                stem = f"{name}_fp8_{node.name}_{index}"
                if name in initializers:
                    value = numpy_helper.to_array(initializers[name])
                    replaced.add(name)
                    axis = weight_axis(node, value.ndim) if index == 1 else None
                    values, scale = fp8_weight(value, axis)
                    added += [numpy_helper.from_array(values, f"{stem}_q"), numpy_helper.from_array(scale, f"{stem}_s")]
                    dequantize = helper.make_node("DequantizeLinear", [f"{stem}_q", f"{stem}_s"], [f"{stem}_dq"],
                                                  name=f"{stem}_DequantizeLinear")
                    if scale.ndim:  # per channel
                        dequantize.attribute.append(helper.make_attribute("axis", axis))
                    order.append(dequantize)
                else:
                    added.append(numpy_helper.from_array(scale_of(np.float32(amax[name]), E4M3_MAX), f"{stem}_s"))
                    order += [helper.make_node("QuantizeLinear", [name, f"{stem}_s", ZERO_POINT], [f"{stem}_q"],
                                               name=f"{stem}_QuantizeLinear"),
                              helper.make_node("DequantizeLinear", [f"{stem}_q", f"{stem}_s", ZERO_POINT],
                                               [f"{stem}_dq"], name=f"{stem}_DequantizeLinear")]
                node.input[index] = f"{stem}_dq"
        order.append(node)
    model.graph.ClearField("node")
    model.graph.node.extend(order)
    model.graph.initializer.extend(added)
    drop_unread(model, replaced)


def _read(graph: Any) -> set[str]:
    """Every tensor name the nodes of ``graph`` and of its subgraphs (If, Loop, Scan bodies) read."""
    import onnx

    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= _read(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    names |= _read(sub)
    return names


def drop_unread(model: onnx.ModelProto, names: set[str]) -> None:
    """Remove the initializers of ``names`` that no node reads any more (each reader has its quantized copy)."""
    read = _read(model.graph)
    for init in [i for i in model.graph.initializer if i.name in names and i.name not in read]:
        model.graph.initializer.remove(init)


def at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` importing the default domain at ``opset`` or later (ONNX's version converter)."""
    from onnx import version_converter

    from edgebuild.errors import ExportError

    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if current >= opset:
        return model
    try:
        return version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter raises plain exceptions for graphs it cannot adapt
        raise ExportError(f"the model's opset {current} could not be converted to {opset}, which FP8/FP4 "
                          f"quantization nodes need: {type(exc).__name__}: {exc}",
                          hint="export at a later opset (export.opset), or drop fp8/nvfp4 from "
                               "quantize.precisions") from None


def amax_of(statistics: ActivationStatistics) -> dict[str, float]:
    return {name: float(value) for name, value in zip(statistics.tensors, statistics.absmax)}


def fp8_candidate(prepared: Path, out: Path, placement: QdqPlacement, statistics: ActivationStatistics) -> Candidate:
    """The FP8 candidate of the pre-processed model, written to ``out``."""
    import onnx

    from edgebuild.accuracy.quantize import Candidate
    from edgebuild.sources.export.checks import save_onnx

    model = at_opset(onnx.load(str(prepared)), FP8_OPSET)  # before FP8 types exist: the converter knows none
    amax = amax_of(statistics)
    chosen, no_kernel = fp8_nodes(model, placement.nodes, amax)
    insert_fp8(model, chosen, amax)
    save_onnx(model, out, external_data=prepared.with_name(f"{prepared.name}.data").exists())
    kept = f"; {len(no_kernel)} Conv kept in float (no FP8 kernel for their shape)" if no_kernel else ""
    return Candidate("fp8", out, note=f"Q/DQ FP8 E4M3 on {len(chosen)} node(s): per-tensor activations (amax/448 "
                                      f"from {statistics.images} calibration images), per-channel weights{kept}")
