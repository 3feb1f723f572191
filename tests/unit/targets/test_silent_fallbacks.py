"""profiles/tensorrt/silent-fallbacks.toml: every layout a TensorRT version builds in a wider type is refused.

One test per ``[[case]]`` (``test_every_case_has_a_test`` keeps it so), one per FP8/FP4 rule of
known-restrictions.toml, and the ``[requires]`` table (no FP8/FP4 tensor cores on Orin, Xavier, Nano).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.targets.precision_layouts import precision_refusal, precision_table
from edgebuild.targets.preflight import BLOCKING, check_target
from edgebuild.targets.profiles import SelectedGroup, load_catalog

THOR_10 = "agx-thor@7.0"  # TensorRT 10.13.3.9
THOR_11 = "agx-thor@7.2.2"  # TensorRT 11.4.1
ORIN_10_3 = "agx-orin-64gb@6.2"  # TensorRT 10.3


def _group(target: str) -> SelectedGroup:
    return SelectedGroup(target, load_catalog().parse_target(target), in_fleet=False)


def _cases(model: onnx.ModelProto, target: str, precision: str | None = None) -> list[str]:
    """The ids of the silent-fallback cases preflight finds (blocking), in order."""
    found = check_target(model, _group(target), precision).findings
    return [f.problem.split("[")[1].split(":")[0] for f in found if f.severity == BLOCKING and "[" in f.problem
            and f.problem.split("[")[1].split(":")[0] in {c["id"] for c in precision_table()["case"]}]


def _blocking(model: onnx.ModelProto, target: str, precision: str | None = None) -> list[str]:
    return [f.problem for f in check_target(model, _group(target), precision).blocking]


def _fp8(name: str, value: np.ndarray) -> onnx.TensorProto:
    import ml_dtypes

    return numpy_helper.from_array(np.asarray(value, np.float32).astype(ml_dtypes.float8_e4m3fn), name)


def _fp4(name: str, value: np.ndarray) -> onnx.TensorProto:
    import ml_dtypes

    return numpy_helper.from_array(np.asarray(value, np.float32).astype(ml_dtypes.float4_e2m1fn), name)


def _model(nodes: list, inits: list, x_shape: list[int], y_shape: list[int], opset: int = 23,
           extra_types: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits,
                              value_info=extra_types or [])
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("trt", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _activation_fp8(name: str = "x") -> tuple[list, list]:
    """x -> Q(FP8) -> DQ -> x_dq"""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"), _fp8("z", np.array(0.0))]
    nodes = [helper.make_node("QuantizeLinear", [name, "xs", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["x_dq"], name="dq")]
    return nodes, inits


def _conv(out_channels: int = 32, in_channels: int = 32, kernel: int = 3, activation: bool = True,
          weight: bool = True, weight_type: str = "fp8") -> onnx.ModelProto:
    nodes, inits = _activation_fp8() if activation else ([], [])
    w = np.random.default_rng(0).standard_normal((out_channels, in_channels, kernel, kernel)).astype(np.float32)
    if weight:
        make = _fp8 if weight_type == "fp8" else _fp4
        scale = np.full(out_channels, 0.01, np.float32)
        inits += [make("wq", w / 4), numpy_helper.from_array(scale, "ws")]
        nodes.append(helper.make_node("DequantizeLinear", ["wq", "ws"], ["w_dq"], axis=0, name="wdq"))
    else:
        inits.append(numpy_helper.from_array(w, "w_dq"))
    nodes.append(helper.make_node("Conv", ["x_dq" if activation else "x", "w_dq"], ["y"], pads=[1, 1, 1, 1] if
                                  kernel == 3 else [kernel // 2] * 4, name="conv"))
    return _model(nodes, inits, [1, in_channels, 8, 8], [1, out_channels, 8, 8])


def _gemm_fp4(dynamic_activation: bool, block: int = 16, rank: int = 3, axis: int = -1,
              scalar_scale: bool = True) -> onnx.ModelProto:
    """x [1, 4, 32] (or rank 2/4) @ W [32, 16] with FP4 weights in blocks along K, the activation FP4 or float."""
    k, n = 32, 16
    rng = np.random.default_rng(1)
    inits = [_fp4("wq", rng.uniform(-6, 6, (k, n))), _fp8("wbs", np.full((k // block, n), 2.0)),
             numpy_helper.from_array(np.array(0.01, np.float32), "w2")]
    nodes = [helper.make_node("DequantizeLinear", ["wbs", "w2"], ["wb"], name="wsdq"),
             helper.make_node("DequantizeLinear", ["wq", "wb"], ["w_dq"], axis=0, block_size=block, name="wdq")]
    shape = {2: [4, k], 3: [1, 4, k], 4: [1, 2, 4, k]}[rank]
    types = []
    if dynamic_activation:
        scale = np.array(0.001, np.float32) if scalar_scale else np.full(2, 0.001, np.float32)
        inits.append(numpy_helper.from_array(scale, "x2"))
        nodes += [helper.make_node("TRT_FP4DynamicQuantize", ["x", "x2"], ["xq", "xs"], domain="trt", axis=axis,
                                   block_size=block, scale_type=TensorProto.FLOAT8E4M3FN, name="dynq"),
                  helper.make_node("DequantizeLinear", ["xs", "x2"], ["xb"], name="xsdq"),
                  helper.make_node("DequantizeLinear", ["xq", "xb"], ["x_dq"], axis=-1, block_size=block,
                                   name="xdq")]
        types = [helper.make_tensor_value_info("xq", TensorProto.FLOAT4E2M1, None),
                 helper.make_tensor_value_info("xs", TensorProto.FLOAT8E4M3FN, None)]
    nodes.append(helper.make_node("MatMul", ["x_dq" if dynamic_activation else "x", "w_dq"], ["y"], name="gemm"))
    return _model(nodes, inits, shape, [*shape[:-1], n], extra_types=types)


def _fp32() -> onnx.ModelProto:
    return _conv(activation=False, weight=False)


# -- one test per [[case]] -----------------------------------------------------------------------------

TESTED = {"flag-without-qdq", "strongly-typed-without-types", "fp8-one-sided-qdq", "fp4-convolution",
          "fp4-weight-only-gemm", "fp8-conv-shape"}


def test_every_case_has_a_test_and_a_source() -> None:
    cases = precision_table()["case"]
    assert {c["id"] for c in cases} == TESTED
    for case in cases:
        assert case["source"] and case["problem"] and case["fix"] and case["builds"], case["id"]


def test_flag_without_qdq_on_10_x_is_refused_for_fp8_and_nvfp4() -> None:
    """NVIDIA/TensorRT#4590: 10.13 builds FP32 when FP8/FP4 is asked for an ONNX without their Q/DQ."""
    for precision in ("fp8", "nvfp4"):
        assert _cases(_fp32(), THOR_10, precision) == ["flag-without-qdq"]
    assert _cases(_conv(), THOR_10, "fp8") == []  # an FP8 Q/DQ graph is fine as fp8
    assert _cases(_fp32(), THOR_10, "fp32") == [] and _cases(_fp32(), THOR_10) == []


def test_tensorrt_11_refuses_every_precision_the_graph_does_not_carry() -> None:
    """Strongly typed only: FP16 without FP16 tensors, INT8 without Q/DQ, FP8/FP4 without their types build FP32."""
    for precision in ("fp16", "int8", "fp8", "nvfp4"):
        assert _cases(_fp32(), THOR_11, precision) == ["strongly-typed-without-types"], precision
    assert _cases(_conv(), THOR_11, "fp8") == [] and _cases(_conv(), THOR_11, "int8") == []
    assert _cases(_fp32(), THOR_10, "fp16") == []  # 10.x has the FP16 flag


def test_fp8_on_one_input_of_a_weighted_layer_is_refused() -> None:
    assert _cases(_conv(weight=False), THOR_10) == ["fp8-one-sided-qdq"]  # activation FP8, weight float
    assert _cases(_conv(activation=False), THOR_10, "fp8") == ["fp8-one-sided-qdq"]  # weight FP8 only
    assert _cases(_conv(), THOR_10) == []


def test_fp4_weights_on_a_convolution_are_refused() -> None:
    """NVIDIA/TensorRT#4833: W4A16 on a Conv builds FP32 without a warning."""
    found = _cases(_conv(weight_type="fp4", activation=False), THOR_10)
    assert found == ["fp4-convolution"]


def test_fp4_weights_without_dynamic_fp4_activation_are_refused() -> None:
    assert _cases(_gemm_fp4(dynamic_activation=False), THOR_10) == ["fp4-weight-only-gemm"]
    assert _cases(_gemm_fp4(dynamic_activation=True), THOR_10) == []
    assert _blocking(_gemm_fp4(dynamic_activation=True), THOR_10) == []  # the NVFP4 form TensorRT 10.13 takes


@pytest.mark.parametrize(("shape", "refused"), [
    ((32, 32, 3), False), ((64, 48, 3), False),  # >= 16 channels, both multiples of 16, 9 taps
    ((8, 32, 3), True),  # a head's 8 outputs
    ((40, 80, 3), True),  # 40 % 16 = 8, 80 % 16 = 0: they pad differently
    ((32, 32, 7), True),  # 49 taps > 32
])
def test_fp8_convolutions_without_a_kernel_are_refused(shape: tuple[int, int, int], refused: bool) -> None:
    out_channels, in_channels, kernel = shape
    found = _cases(_conv(out_channels, in_channels, kernel), THOR_10)
    assert found == (["fp8-conv-shape"] if refused else [])


# -- [requires]: who has FP8 / FP4 units ----------------------------------------------------------------

@pytest.mark.parametrize(("target", "fp8", "nvfp4"), [
    (THOR_10, True, True), (THOR_11, True, True),
    (ORIN_10_3, False, False), ("orin-nano-8gb@6.2", False, False), ("agx-xavier@5.1.2", False, False),
    ("nano@4.6.4", False, False),
])
def test_fp8_and_nvfp4_need_the_tensor_cores(target: str, fp8: bool, nvfp4: bool) -> None:
    parsed = load_catalog().parse_target(target)
    assert (parsed.precision_refusal("fp8") is None) is fp8
    assert (parsed.precision_refusal("nvfp4") is None) is nvfp4
    assert parsed.precision_refusal("int8") is None and parsed.precision_refusal("fp16") is None
    if not fp8:
        assert "no FP8 (E4M3) tensor cores" in (parsed.precision_refusal("fp8") or "")
        blocking = _blocking(_conv(), target)  # an FP8 graph for that target: refused with the same reason
        assert any("fp8 candidate:" in p and "tensor cores" in p for p in blocking)


def test_nvfp4_needs_tensorrt_10_8() -> None:
    assert "TensorRT 10.8" in (precision_refusal("nvfp4", "11.0", "10.3.0.30") or "")
    assert precision_refusal("nvfp4", "11.0", "10.13.3.9") is None
    assert precision_refusal("fp8", "8.9", "10.3.0.30") is None  # Ada/Hopper class: FP8 yes
    assert "compute capability 10.0" in (precision_refusal("nvfp4", "8.9", "10.13") or "")


# -- the FP8/FP4 rules of known-restrictions.toml -------------------------------------------------------

def _rule_problems(model: onnx.ModelProto, target: str) -> list[str]:
    return [f.problem for f in check_target(model, _group(target), "nvfp4").blocking]


def test_fp4_before_tensorrt_10_8_is_refused() -> None:
    problems = _rule_problems(_gemm_fp4(dynamic_activation=True), ORIN_10_3)
    assert any("TensorRT has the FP4 type from 10.8 on" in p for p in problems)
    # and TRT_FP4DynamicQuantize is no parser op there: a custom domain that needs a plugin
    assert any("from domain 'trt'" in p for p in problems)


def test_fp4_block_size_other_than_16_is_refused() -> None:
    problems = _blocking(_gemm_fp4(dynamic_activation=True, block=8), THOR_10)
    assert any("block size other than 16" in p for p in problems)
    assert any("TRT_FP4DynamicQuantize with block_size other than 16" in p for p in problems)


def test_dynamic_fp4_of_a_4d_tensor_or_another_axis_is_refused() -> None:
    assert any("not 2-D or 3-D" in p for p in _blocking(_gemm_fp4(dynamic_activation=True, rank=4), THOR_10))
    assert any("neither the last nor the second-to-last" in p
               for p in _blocking(_gemm_fp4(dynamic_activation=True, axis=0), THOR_10))
    assert not _blocking(_gemm_fp4(dynamic_activation=True, rank=2), THOR_10)


def test_dynamic_fp4_scale_must_be_a_scalar_initializer() -> None:
    problems = _blocking(_gemm_fp4(dynamic_activation=True, scalar_scale=False), THOR_10)
    assert any("not a scalar initializer" in p for p in problems)
