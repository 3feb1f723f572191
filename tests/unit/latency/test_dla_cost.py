"""The DLA split of a graph: which layers fall back to the GPU under each TensorRT's DLA rules, their share of the
FLOPs and bytes, the GPU<->DLA transitions, and the finding that the DLA would not help."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebuild.latency.dla_cost import dla_cost_findings, dla_split
from edgebuild.targets.dla import AT_BUILD, ON_DLA, ON_GPU, place_nodes
from edgebuild.targets.preflight import DLA_FALLBACK, WARNING, check_target
from edgebuild.targets.profiles import SelectedGroup, load_catalog


def _model(nodes: list, inputs: list, outputs: list, initializers: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _float(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _weights(name: str, shape: tuple) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, 0.1, np.float32), name)


def mostly_dla() -> onnx.ModelProto:
    """conv1 -> relu (DLA) -> div (GPU) -> conv2 (DLA) -> global average pool (GPU), on a 1x3x16x16 input,
    and a reshape whose target shape is arithmetic on the input's shape (folded at build time)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Div", ["r", "two"], ["d"], name="div"),
             helper.make_node("Conv", ["d", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="gap"),
             helper.make_node("Shape", ["p"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="batch_of", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="as_list"),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="target_shape", axis=0),
             helper.make_node("Reshape", ["p", "target"], ["y"], name="flatten")]
    inits = [_weights("w1", (8, 3, 3, 3)), _weights("w2", (8, 8, 3, 3)),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    return _model(nodes, [_float("x", [1, 3, 16, 16])], [_float("y", [1, 8])], inits)


def mostly_gpu() -> onnx.ModelProto:
    """exp, sqrt (GPU) -> a 1x1 conv to one channel (DLA) -> log (GPU): most of its little work falls back."""
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"),
             helper.make_node("Sqrt", ["e"], ["q"], name="sqrt"),
             helper.make_node("Conv", ["q", "w"], ["c"], name="conv"),
             helper.make_node("Log", ["c"], ["y"], name="log")]
    return _model(nodes, [_float("x", [1, 3, 16, 16])], [_float("y", [1, 1, 16, 16])], [_weights("w", (1, 3, 1, 1))])


def test_each_node_is_placed_by_the_dla_rules_and_shape_arithmetic_is_folded() -> None:
    on = {p.name: p.on for p in place_nodes(mostly_dla(), "10.3.0.30")}
    assert on == {"conv1": ON_DLA, "relu": ON_DLA, "div": ON_GPU, "conv2": ON_DLA, "gap": ON_GPU,
                  "shape": AT_BUILD, "batch_of": AT_BUILD, "as_list": AT_BUILD, "target_shape": AT_BUILD,
                  "flatten": ON_DLA}
    why = {p.name: p.why for p in place_nodes(mostly_dla(), "10.3.0.30")}
    assert "kDIV is not in that list" in why["div"]


def test_an_operator_the_dla_runs_from_a_later_tensorrt_falls_back_on_an_earlier_one() -> None:
    split = helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2)
    model = helper.make_model(helper.make_graph([split], "g", [_float("x", [1, 4, 8, 8])],
                                                [_float("a", [1, 2, 8, 8]), _float("b", [1, 2, 8, 8])]),
                              opset_imports=[helper.make_opsetid("", 18)])
    assert [p.on for p in place_nodes(model, "8.5.2.2")] == [ON_GPU]
    assert "from TensorRT 8.6 on" in place_nodes(model, "8.5.2.2")[0].why
    assert [p.on for p in place_nodes(model, "8.6.2.3")] == [ON_DLA]


def test_the_split_counts_the_fallbacks_their_share_and_the_transitions() -> None:
    split = dla_split(mostly_dla(), "10.3.0.30")
    assert [f.name for f in split.fallbacks] == ["div", "gap"] and split.dla_layers == 4
    # by hand: conv1 2*8*16*16*3*9 = 110592, relu 2048, div 2048, conv2 2*8*16*16*8*9 = 294912, gap 2048
    # (one per input element), flatten none (a reshape): the fallbacks hold 4096 of 411648 FLOPs
    assert abs(split.flops_share - 4096 / 411648) < 1e-12
    assert 0 < split.bytes_share < 1
    # relu -> div (r), div -> conv2 (d), conv2 -> gap (c2), gap -> flatten (p): four crossings
    assert split.transitions == 4 and split.boundary_elements == 3 * 2048 + 8
    assert split.helps


def _group(target: str, accelerator: str = "dla0") -> SelectedGroup:
    return SelectedGroup("dock", load_catalog().parse_target(target), accelerator)


def test_preflight_names_each_fallback_and_prices_the_split() -> None:
    model = mostly_dla()
    fallbacks = [f for f in check_target(model, _group("agx-orin-64gb@6.2")).findings if f.severity == DLA_FALLBACK]
    assert [(f.node, f.op_type) for f in fallbacks] == [("div", "Div"), ("gap", "GlobalAveragePool")]
    assert not [f for f in check_target(model, _group("agx-orin-64gb@6.2", "gpu")).findings
                if f.severity == DLA_FALLBACK]
    [summary] = dla_cost_findings(model, _group("agx-orin-64gb@6.2"))
    assert summary.severity == DLA_FALLBACK and summary.op_type == "DLA split"
    for words in ("dla0: 2 of 6 layers fall back to the GPU under TensorRT 10.3.0.30's DLA rules", "1.0% of the FLOPs",
                  "4 GPU<->DLA transition(s)", "gap (GlobalAveragePool, 0.5% of FLOPs)"):
        assert words in summary.problem, summary.problem
    assert dla_cost_findings(model, _group("agx-orin-64gb@6.2", "gpu")) == []


def test_a_model_whose_compute_mostly_falls_back_is_told_the_dla_would_not_help() -> None:
    findings = dla_cost_findings(mostly_gpu(), _group("orin-nx-16gb@6.2", "dla"))
    assert [f.severity for f in findings] == [DLA_FALLBACK, WARNING]
    warning = findings[1]
    assert "the DLA would not help" in warning.problem and "falls back to the GPU" in warning.problem
    assert 'accelerator = "gpu"' in warning.fix
