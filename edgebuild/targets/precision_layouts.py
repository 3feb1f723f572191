"""Reduced precisions past INT8: who can run them, and the layouts TensorRT would build in a wider type.

Reads ``profiles/tensorrt/silent-fallbacks.toml``: ``[requires.<precision>]`` says what GPU (compute
capability) and TensorRT release FP8 and NVFP4 need, and each ``[[case]]`` a layout of a candidate
ONNX that a TensorRT release builds without an error in a wider type than the candidate claims (an
"FP8" engine that runs FP32). Preflight (``edgebuild.targets.preflight.check_target``) turns the cases
a graph meets into blocking findings; the project loader refuses a precision for a group whose module
cannot run it (``precision_refusal``). No rule lives in code, only the conditions the rows name.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from edgebuild.errors import ProfileDataError
from edgebuild.jsontypes import JsonObject
from edgebuild.targets.rules_files import read_rules, tensorrt_dir, version_matches, version_tuple

if TYPE_CHECKING:
    import onnx

__all__: list[str] = []

TABLE_FILE = "silent-fallbacks.toml"
#: the ONNX element type each quantized precision's Q/DQ carries (the parser tables' names)
QUANTIZED_TYPE = {"int8": "INT8", "fp8": "FP8", "nvfp4": "FP4"}


@lru_cache(maxsize=1)
def precision_table() -> JsonObject:
    return read_rules(tensorrt_dir() / TABLE_FILE)


def precision_refusal(precision: str, compute_capability: str, tensorrt: str, module_name: str = "") -> str | None:
    """Why a module of ``compute_capability`` with TensorRT ``tensorrt`` cannot build ``precision``, or None.

    Only the precisions ``[requires]`` lists are checked (FP8, NVFP4); FP32, FP16 and INT8 run on every
    Jetson target edgebuild knows.
    """
    need = precision_table().get("requires", {}).get(precision)
    if need is None:
        return None
    who = module_name or f"compute capability {compute_capability}"
    if version_tuple(compute_capability) < version_tuple(need["min_compute_capability"]):
        return (f"{who} (compute capability {compute_capability}) has no {need['name']} tensor cores: they come with "
                f"compute capability {need['min_compute_capability']} and later (Ada, Hopper, Blackwell; Jetson AGX "
                "Thor), not with Orin (Ampere, 8.7), Xavier (Volta, 7.2) or Nano (Maxwell, 5.3)")
    if version_tuple(tensorrt) < version_tuple(need["min_tensorrt"]):
        return f"TensorRT {tensorrt} has no {need['name']}: it came with TensorRT {need['min_tensorrt']}"
    return None


def requirement_source(precision: str) -> str:
    return str(precision_table().get("requires", {}).get(precision, {}).get("source", TABLE_FILE))


class _Graph:
    """What the conditions read of a model: producers, element types, initializer shapes."""

    def __init__(self, model: onnx.ModelProto, types: dict[str, str]) -> None:
        self.model, self.types = model, types
        self.producer = {out: node for node in model.graph.node for out in node.output}
        self.dims = {i.name: tuple(i.dims) for i in model.graph.initializer}

    def dequantized_type(self, tensor: str) -> str | None:
        """The element type a DequantizeLinear producing ``tensor`` reads (FP8, FP4, INT8), else None."""
        node = self.producer.get(tensor)
        if node is None or node.op_type != "DequantizeLinear":
            return None
        found = self.types.get(node.input[0])
        quantize = self.producer.get(node.input[0])
        if found is None and quantize is not None and quantize.op_type == "QuantizeLinear" and len(quantize.input) > 2:
            found = self.types.get(quantize.input[2])  # not inferred: the zero point's type is the quantized type
        return found or "UNKNOWN"

    def weight_dims(self, tensor: str) -> tuple[int, ...] | None:
        """The shape of the constant behind a DequantizeLinear producing ``tensor``."""
        node = self.producer.get(tensor)
        return self.dims.get(node.input[0]) if node is not None and node.op_type == "DequantizeLinear" else None


def graph_precision(model: onnx.ModelProto, types: dict[str, str]) -> str:
    """The lowest precision a graph carries: nvfp4 (FP4), fp8, int8 (Q/DQ), fp16 (FP16/BF16 tensors) or fp32."""
    found = set(types.values())
    if "FP4" in found:
        return "nvfp4"
    if "FP8" in found:
        return "fp8"
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        return "int8"
    return "fp16" if found & {"FP16", "BF16"} else "fp32"


def _lacks(graph: _Graph, case: JsonObject, precision: str) -> list[Any]:
    present = set(graph.types.values())
    if precision == "fp16":
        has = bool(present & {"FP16", "BF16"})
    elif precision == "int8":
        has = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.model.graph.node)
    else:
        has = QUANTIZED_TYPE[precision] in present
    return [] if has else [None]  # model-wide: one finding


def _one_sided(graph: _Graph, case: JsonObject, precision: str) -> list[Any]:
    wanted = case["quantized_type"]
    hits = []
    for node in graph.model.graph.node:
        if node.op_type in case["ops"] and len(node.input) >= 2:
            data, weight = (graph.dequantized_type(node.input[i]) == wanted for i in (0, 1))
            if data != weight:
                hits.append(node)
    return hits


def _fp4_on(graph: _Graph, case: JsonObject, precision: str) -> list[Any]:
    return [n for n in graph.model.graph.node
            if n.op_type in case["ops"] and any(graph.dequantized_type(i) == "FP4" for i in n.input[:2])]


def _fp4_weight_only(graph: _Graph, case: JsonObject, precision: str) -> list[Any]:
    return [n for n in graph.model.graph.node if n.op_type in case["ops"] and len(n.input) >= 2
            and graph.dequantized_type(n.input[1]) == "FP4" and graph.dequantized_type(n.input[0]) != "FP4"]


def _fp8_conv_shape(graph: _Graph, case: JsonObject, precision: str) -> list[Any]:
    hits = []
    for node in graph.model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or graph.dequantized_type(node.input[0]) != "FP8":
            continue
        dims = graph.weight_dims(node.input[1])
        if dims is None or len(dims) < 3:
            continue
        out_channels, in_channels, area = dims[0], dims[1], 1
        for d in dims[2:]:
            area *= d
        align = case["channel_alignment"]
        if min(out_channels, in_channels) < case["min_channels"] or out_channels % align != in_channels % align \
                or area > case["max_kernel_area"]:
            hits.append(node)
    return hits


_CONDITIONS: dict[str, Callable[[_Graph, JsonObject, str], list[Any]]] = {
    "graph_lacks_precision": _lacks, "one_sided_qdq": _one_sided, "fp4_on": _fp4_on,
    "fp4_weight_only": _fp4_weight_only, "fp8_conv_shape": _fp8_conv_shape}


def silent_fallbacks(model: onnx.ModelProto, types: dict[str, str], tensorrt: str,
                     precision: str | None = None) -> list[tuple[str, str, JsonObject]]:
    """(node name, op, case) for every ``[[case]]`` the graph meets as a ``precision`` candidate (default: the
    precision it carries) on TensorRT ``tensorrt``; a model-wide case names the node "(model)"."""
    graph = _Graph(model, types)
    precision = precision or graph_precision(model, types)
    found = []
    for case in precision_table().get("case", []):
        if precision not in case["precisions"] or not version_matches(tensorrt, case["tensorrt"]):
            continue
        condition = _CONDITIONS.get(case["when"])
        if condition is None:
            raise ProfileDataError(f"{TABLE_FILE}: case {case.get('id')!r} has a condition edgebuild does not know: "
                                   f"{case['when']!r} (known: {', '.join(_CONDITIONS)})")
        for hit in condition(graph, case, precision):
            if hit is None:
                found.append(("(model)", "precision", case))
            else:
                found.append((hit.name or hit.op_type, hit.op_type, case))
    return found
