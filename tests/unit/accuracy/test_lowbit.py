"""FP8 and NVFP4 candidates: the number formats, the graphs TensorRT builds, and what ONNX Runtime measures."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.calibration import ActivationStatistics
from edgebuild.accuracy.lowbit import host_runner
from edgebuild.accuracy.lowbit.candidates import make_lowbit, not_applicable
from edgebuild.accuracy.lowbit.formats import E4M3_MAX, e2m1, e4m3, nvfp4_weight
from edgebuild.accuracy.quantize import QdqPlacement
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.targets.preflight import check_target, load_graph
from edgebuild.targets.profiles import SelectedGroup, load_catalog

RNG = np.random.default_rng(3)
#: Jetson AGX Thor's targets: TensorRT 10.13 (JetPack 7.0, 7.1), 10.16 (7.2), 11.4 (7.2.2)
THOR_TARGETS = ("agx-thor@7.0", "agx-thor@7.2", "agx-thor@7.2.2")


def _thor(target: str = "agx-thor@7.0") -> SelectedGroup:
    return SelectedGroup("thor", load_catalog().parse_target(target), in_fleet=False)


# -- the formats ------------------------------------------------------------------------------------------

def test_e2m1_rounds_to_nearest_even_and_saturates() -> None:
    values = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, -100], np.float32)
    assert e2m1(values).astype(np.float32).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, -6.0]


def test_e4m3_saturates_instead_of_overflowing_to_nan() -> None:
    assert e4m3(np.array([500.0, -1e9, 0.1])).astype(np.float32).tolist() == [448.0, -448.0, 0.1015625]


def test_nvfp4_weight_is_e2m1_times_e4m3_block_scales_times_the_tensor_scale() -> None:
    weight = RNG.standard_normal((64, 24)).astype(np.float32)
    weight[16:32, 3] = 0.0  # a block of zeros: scale 0, values 0, no NaN
    values, blocks, tensor_scale, dequantized = nvfp4_weight(weight, axis=0)
    assert values.dtype == ml_dtypes.float4_e2m1fn and values.shape == (64, 24)
    assert blocks.dtype == ml_dtypes.float8_e4m3fn and blocks.shape == (4, 24)
    assert np.isclose(tensor_scale, np.abs(weight).max() / (6 * 448))
    # as the DequantizeLinear chain computes it: the block scale first (E4M3 x FP32), then the values
    rebuilt = values.astype(np.float32) * (np.repeat(blocks.astype(np.float32), 16, axis=0) * tensor_scale)
    np.testing.assert_array_equal(rebuilt, dequantized)
    assert np.all(dequantized[16:32, 3] == 0) and np.isfinite(dequantized).all()
    assert np.abs(dequantized - weight).max() <= np.abs(weight).max() / 6 + 1e-6  # within a block's FP4 step
    # blocks along axis 1 (a Gemm's transB weight [N, K])
    _, blocks_t, _, again = nvfp4_weight(weight.T.copy(), axis=1)
    assert blocks_t.shape == (24, 4)
    np.testing.assert_array_equal(again, dequantized.T)


# -- small models ----------------------------------------------------------------------------------------

def _statistics(model_path: Path, tensors: list[str], feed: dict[str, np.ndarray]) -> ActivationStatistics:
    """The absolute maxima of ``tensors`` on ``feed`` (what the gate's calibration records)."""
    model = onnx.load(str(model_path))
    model.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in tensors
                              if t not in feed)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    values.update(feed)
    absmax = np.array([np.abs(values[t]).max() for t in tensors])
    return ActivationStatistics(tensors, absmax, np.zeros((len(tensors), 16), np.int64), absmax, {}, 4)


def _conv_mlp(tmp_path: Path) -> tuple[Path, QdqPlacement, ActivationStatistics, dict[str, np.ndarray]]:
    """x [N, 16, 4, 4] -> Conv 16->32 -> Relu -> Conv 32->32 -> Relu -> tokens [N, 16, 32] -> MatMul [32, 48] -> y."""
    w1 = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.2
    w2 = RNG.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1
    w3 = RNG.standard_normal((32, 48)).astype(np.float32) * 0.3
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w3, "w3"),
             numpy_helper.from_array(np.array([0, 32, 16], np.int64), "to_tokens"),
             ]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Reshape", ["r2", "to_tokens"], ["flat"], name="flatten"),
             helper.make_node("Transpose", ["flat"], ["tokens"], perm=[0, 2, 1], name="tokens"),
             helper.make_node("MatMul", ["tokens", "w3"], ["y"], name="mlp")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16, 48])], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    path = tmp_path / "prepared.onnx"
    onnx.save(model, str(path))
    feed = {"x": RNG.standard_normal((4, 16, 4, 4)).astype(np.float32)}
    placement = QdqPlacement(("conv1", "conv2", "mlp"), ("Conv", "Gemm", "MatMul"), ())
    return path, placement, _statistics(path, ["x", "r1", "tokens"], feed), feed


def test_the_fp8_candidate_quantizes_both_inputs_and_onnx_runtime_runs_it_as_written(tmp_path: Path) -> None:
    prepared, placement, statistics, feed = _conv_mlp(tmp_path)
    candidate = make_lowbit("fp8", prepared, tmp_path / "fp8.onnx", placement, statistics)
    model = onnx.load(str(candidate.onnx_path))
    assert candidate.precision == "fp8" and candidate.emulated is None
    assert next(o.version for o in model.opset_import if o.domain == "") == 19
    fp8 = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT8E4M3FN}
    produced = {o: n for n in model.graph.node for o in n.output}
    for node in (n for n in model.graph.node if n.op_type in ("Conv", "MatMul")):
        for name in node.input[:2]:  # both inputs through an FP8 DequantizeLinear
            dequantize = produced[name]
            source = dequantize.input[0]
            assert dequantize.op_type == "DequantizeLinear"
            assert source in fp8 or produced[source].op_type == "QuantizeLinear"
    assert not {"w1", "w2", "w3"} & {i.name for i in model.graph.initializer}  # weights stored in FP8 only
    scale = next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name.startswith("r1_fp8_conv2_0_s"))
    assert np.isclose(scale, statistics.absmax[1] / E4M3_MAX)  # per tensor, amax / 448
    # the gate's runner keeps the Relus ONNX Runtime's extended optimizations drop before a float8 QuantizeLinear
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    exact = ort.InferenceSession(str(candidate.onnx_path), plain, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    runner = host_runner(candidate.onnx_path)
    assert runner.basic_optimizations and not host_runner(prepared).basic_optimizations
    ours = runner.run(feed)["y"]
    np.testing.assert_allclose(ours, exact, rtol=1e-5, atol=1e-5)
    extended = OnnxRuntimeRunner(candidate.onnx_path).run(feed)["y"]  # the Relus dropped (ONNX Runtime 1.32)
    if not np.allclose(extended, exact, rtol=1e-4, atol=1e-4):
        assert np.abs(extended - exact).max() > np.abs(ours - exact).max()
    fp32 = OnnxRuntimeRunner(prepared).run(feed)["y"]
    assert 0 < np.abs(ours - fp32).max() < 0.1 * np.abs(fp32).max()
    for target in THOR_TARGETS:  # the parser of each Thor JetPack's TensorRT takes it, with no wider layout
        assert not check_target(load_graph(candidate.onnx_path), _thor(target), "fp8").blocking, target


def _nvfp4_reference(x: np.ndarray, scale: float) -> np.ndarray:
    """TRT_FP4DynamicQuantize + two DequantizeLinear, in numpy: blocks of 16 along the last axis."""
    blocks = x.reshape(*x.shape[:-1], -1, 16)
    block_scale = e4m3(np.abs(blocks).max(axis=-1, keepdims=True) / 6 / scale).astype(np.float32) * scale
    safe = np.where(block_scale == 0, 1.0, block_scale)
    return (e2m1(blocks / safe).astype(np.float32) * block_scale).reshape(x.shape)


def test_the_nvfp4_candidate_is_tensorrt_s_form_and_its_emulation_computes_the_same(tmp_path: Path) -> None:
    prepared, placement, statistics, feed = _conv_mlp(tmp_path)
    candidate = make_lowbit("nvfp4", prepared, tmp_path / "model.onnx", placement, statistics)
    assert candidate.emulated == tmp_path / "emulated.onnx" and candidate.emulated.is_file()
    device = onnx.load(str(candidate.onnx_path))
    assert next(o.version for o in device.opset_import if o.domain == "") == 23
    assert any(o.domain == "trt" for o in device.opset_import)
    dynamic = [n for n in device.graph.node if n.op_type == "TRT_FP4DynamicQuantize"]
    assert len(dynamic) == 1 and dynamic[0].domain == "trt"
    assert {a.name: helper.get_attribute_value(a) for a in dynamic[0].attribute} == {
        "axis": -1, "block_size": 16, "scale_type": TensorProto.FLOAT8E4M3FN}
    assert any(i.data_type == TensorProto.FLOAT4E2M1 and tuple(i.dims) == (32, 48) for i in device.graph.initializer)
    for target in THOR_TARGETS:
        assert not check_target(load_graph(candidate.onnx_path), _thor(target), "nvfp4").blocking, target
    assert check_target(load_graph(candidate.onnx_path), _thor("agx-orin-64gb@6.2"), "nvfp4").blocking
    with pytest.raises(Exception, match="TRT_FP4DynamicQuantize"):  # not an op ONNX Runtime has: hence the emulation
        ort.InferenceSession(str(candidate.onnx_path), providers=["CPUExecutionProvider"])

    # the emulation: the MatMul on the dequantized NVFP4 weight and the block-quantized activation
    emulated = OnnxRuntimeRunner(candidate.emulated).run(feed)["y"]
    tokens = _tokens_after_fp8_convs(tmp_path, candidate.emulated, feed)
    scale = float(statistics.absmax[2] / (6 * 448))
    weight = nvfp4_weight(numpy_helper.to_array(next(i for i in onnx.load(str(prepared)).graph.initializer
                                                     if i.name == "w3")), axis=0)[3]
    np.testing.assert_allclose(emulated, _nvfp4_reference(tokens, scale) @ weight, rtol=1e-4, atol=1e-5)
    assert "on 1 GEMM(s)" in candidate.note and "FP8 Q/DQ on 2 other node(s)" in candidate.note


def _tokens_after_fp8_convs(tmp_path: Path, emulated: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    """The MatMul's activation in the emulated graph (after the FP8 convolutions), fetched from ONNX Runtime."""
    model = onnx.load(str(emulated))
    model.graph.output.append(helper.make_tensor_value_info("tokens", TensorProto.FLOAT, None))
    path = tmp_path / "with-tokens.onnx"
    onnx.save(model, str(path))
    return OnnxRuntimeRunner(path).run(feed)["tokens"]


def test_a_convolutional_model_has_no_nvfp4_candidate_and_the_gate_says_why(tmp_path: Path) -> None:
    prepared, placement, _, _ = _conv_mlp(tmp_path)
    convs_only = QdqPlacement(("conv1", "conv2"), ("Conv",), ())
    assert "NVFP4 not applicable: TensorRT runs FP4 only in GEMMs" in not_applicable("nvfp4", prepared, convs_only)
    assert not_applicable("fp8", prepared, convs_only) == ""
    assert not_applicable("nvfp4", prepared, placement) == ""
    assert "FP8 not applicable" in not_applicable("fp8", prepared, QdqPlacement((), ("Conv",), ()))
