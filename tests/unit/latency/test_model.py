"""The latency plan's counting (hand-made ONNX graphs, numbers derived by hand), its fit and its data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.latency.graph import graph_cost
from edgebuild.latency.model import (
    PRECISIONS,
    FitSample,
    LatencyModel,
    PublishedLatency,
    fit_latency_model,
    leave_one_out,
    load_latency_model,
    load_published_latencies,
    performance_modes,
    predict_ms,
)
from edgebuild.targets.profiles import ModulePerformance, load_catalog


def _weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(shape, dtype=np.float32), name)


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _io(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _conv_silu(h: int | str = 8, w: int | str = 8) -> onnx.ModelProto:
    """x(1,3,H,W) -> Conv 3x3 (4 out, pad 1, bias) -> SiLU (x * sigmoid(x)) -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ]
    return _model(nodes, [_io("x", [1, 3, h, w])], [_io("y", None)], [_weight("w", (4, 3, 3, 3)), _weight("b", (4,))])


def test_a_conv_and_its_silu_are_one_layer_with_hand_counted_flops_and_bytes() -> None:
    cost = graph_cost(_conv_silu())
    assert len(cost.layers) == 1
    layer = cost.layers[0]
    # conv: 2 * (4*8*8 outputs) * (3*3*3 per output) = 13824; sigmoid and mul: 256 each
    assert layer.flops == 13824 + 256 + 256
    assert layer.tensor_cores
    # weights 108 + bias 4; reads x (192), writes y (256): c and s stay inside the fused kernel
    assert layer.weight_elements == 112
    assert layer.activation_elements == 192 + 256
    assert layer.bytes_moved("fp16") == (112 + 448) * 2
    assert layer.bytes_moved("int8") == 112 + 448


def test_input_size_and_batch_are_set_before_shape_inference() -> None:
    dynamic = _conv_silu("h", "w")
    at16 = graph_cost(dynamic, input_hw=(16, 16))
    assert at16.flops == 4 * (13824 + 512)  # four times the pixels
    assert graph_cost(dynamic, batch=2, input_hw=(8, 8)).flops == 2 * (13824 + 512)
    assert at16.unknown_shapes == 0


def test_depthwise_conv_is_not_tensor_core_work() -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    cost = graph_cost(_model(nodes, [_io("x", [1, 4, 8, 8])], [_io("y", None)], [_weight("w", (4, 1, 3, 3))]))
    assert cost.layers[0].flops == 2 * 256 * 9
    assert not cost.layers[0].tensor_cores


def test_matmul_gemm_pool_resize_and_free_concat() -> None:
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["m"]),  # (1,2,5,6) x (1,2,6,7): 2 * 70 * 6
        helper.make_node("Gemm", ["g", "gw"], ["gy"]),  # (3,4) x (4,5): 2 * 15 * 4
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),  # 1x4x4x4 out, 4 each
        helper.make_node("Resize", ["p", "", "scales"], ["r"], mode="nearest"),  # 1x4x8x8: 256
        helper.make_node("Concat", ["r", "x"], ["cat"], axis=1),  # free
    ]
    inits = [_weight("gw", (4, 5)), numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")]
    model = _model(nodes, [_io("a", [1, 2, 5, 6]), _io("b", [1, 2, 6, 7]), _io("g", [3, 4]), _io("x", [1, 4, 8, 8])],
                   [_io("m", None), _io("gy", None), _io("cat", None)], inits)
    cost = graph_cost(model)
    by_kind = {layer.kind: layer for layer in cost.layers}
    assert set(by_kind) == {"MatMul", "Gemm", "MaxPool", "Resize"}
    assert by_kind["MatMul"].flops == 840
    assert by_kind["Gemm"].flops == 120
    assert by_kind["MaxPool"].flops == 64 * 4
    assert by_kind["Resize"].flops == 256
    # the pool reads x (256) and writes p (64), read by Resize outside its group
    assert by_kind["MaxPool"].activation_elements == 256 + 64
    # resize writes r into the Concat's buffer (256)
    assert by_kind["Resize"].activation_elements == 64 + 256


def test_residual_add_joins_the_second_conv_and_reads_the_first_output() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["b"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["b", "a"], ["y"]),
    ]
    inits = [_weight("w1", (4, 4, 1, 1)), _weight("w2", (4, 4, 1, 1))]
    cost = graph_cost(_model(nodes, [_io("x", [1, 4, 8, 8])], [_io("y", None)], inits))
    assert [layer.kind for layer in cost.layers] == ["Conv", "Conv"]
    first, second = cost.layers
    assert first.activation_elements == 256 + 256  # reads x, writes a (two readers outside)
    assert second.activation_elements == 256 + 256  # reads a once (conv and add), writes y
    assert second.flops == 2 * 256 * 4 + 256


def _perf(**kw: float) -> ModulePerformance:
    values = dict(power_mode="TEST", gpu_mhz=1000, memory_bandwidth_gbps=100.0, fp32_tflops=2.0, tf32_tflops=8.0,
                  fp16_tflops=16.0, int8_tops=32.0, unconfirmed=[], sources=["test"])
    values.update(kw)
    return ModulePerformance(**values)


def test_prediction_is_the_roofline_sum_plus_the_overhead_per_layer() -> None:
    cost = graph_cost(_conv_silu())
    model = LatencyModel({"fp32": 0.5, "fp16": 0.5, "int8": 0.5}, 0.5, 10.0)
    layer = cost.layers[0]
    compute = layer.flops / (0.5 * 16e12)
    memory = layer.bytes_moved("fp16") / (0.5 * 100e9)
    assert predict_ms(cost, _perf(), "fp16", model) == pytest.approx((max(compute, memory) + 10e-6) * 1e3)


def _samples() -> list[FitSample]:
    """Figures made by a known model on graphs of different shapes, modules and precisions."""
    truth = LatencyModel({"fp32": 0.4, "fp16": 0.6, "int8": 0.35}, 0.45, 15.0)
    samples = []
    for i, size in enumerate((64, 128, 256, 512)):
        cost = graph_cost(_conv_silu(size, size))
        for j, perf in enumerate((_perf(), _perf(gpu_mhz=500, fp32_tflops=1.0, tf32_tflops=4.0, fp16_tflops=8.0,
                                                  int8_tops=16.0, memory_bandwidth_gbps=50.0))):
            for precision in PRECISIONS:
                ms = predict_ms(cost, perf, precision, truth)
                row = PublishedLatency(f"m{i}", (size, size), 1, f"mod{j}", "TEST", "", "", precision, ms,
                                       "gpu_compute", "test", "https://example.org")
                samples.append(FitSample(row, cost, perf, f"m{i}"))
    return samples


def test_fit_reproduces_figures_made_by_a_known_model_and_is_deterministic() -> None:
    samples = _samples()
    first, second = fit_latency_model(samples), fit_latency_model(samples)
    assert first == second
    for s in samples:
        assert predict_ms(s.cost, s.performance, s.row.precision, first) == pytest.approx(s.row.latency_ms, rel=0.02)
    held_out = leave_one_out(samples)
    assert len(held_out) == len(samples)
    assert all(abs(p - s.row.latency_ms) / s.row.latency_ms < 0.05 for s, p in held_out)


def test_published_rows_have_sources_and_every_module_mode_has_peaks() -> None:
    rows = load_published_latencies()
    assert len(rows) >= 48
    assert {r.precision for r in rows} == set(PRECISIONS)
    assert len({r.module for r in rows}) >= 3
    catalog = load_catalog()
    for row in rows:
        assert row.source_url.startswith("https://"), row
        module = catalog.modules[row.module]
        assert any(p.power_mode == row.power_mode for p in module.performance), row
    model = load_latency_model()
    assert set(model.modules) == {r.module for r in rows}
    assert 0 < model.band_low <= 1 <= model.band_high


def test_orin_nx_modes_follow_the_jetpack_release() -> None:
    nx = load_catalog().modules["orin-nx-16gb"]
    assert [p.power_mode for p in performance_modes(nx, "6.0")] == ["MAXN"]
    assert [p.power_mode for p in performance_modes(nx, "6.2")] == ["MAXN_SUPER"]


def test_module_peaks_follow_from_cores_and_clock() -> None:
    """A typo in a [[performance]] peak shows here: each is the powered cores x clock x the architecture's rate."""
    per_clock = {  # (CUDA-core FLOP, tensor-core TF32, FP16, INT8, FP8, FP4) per core or tensor core per clock
        "Ampere": (2, 256, 512, 1024, None, None), "Volta": (2, None, 128, 256, None, None),
        "Maxwell": (2, None, None, None, None, None), "Blackwell": (2, 1024, 2048, 4096, 4096, 8192),
    }
    for module in load_catalog().modules.values():
        for perf in module.performance:
            ghz = perf.gpu_mhz / 1000
            cores, tensor_cores = perf.cuda_cores or module.cuda_cores, perf.tensor_cores or module.tensor_cores
            fp32, tf32, fp16, int8, fp8, fp4 = per_clock[module.gpu_arch]
            assert perf.fp32_tflops == pytest.approx(cores * fp32 * ghz / 1000, abs=1e-3), module.id
            if tf32 is not None:
                assert perf.tf32_tflops == pytest.approx(tensor_cores * tf32 * ghz / 1000, abs=1e-3)
            expected_fp16 = tensor_cores * fp16 * ghz / 1000 if fp16 else 2 * perf.fp32_tflops
            assert perf.fp16_tflops == pytest.approx(expected_fp16, abs=1e-3), module.id
            for peak, rate in ((perf.int8_tops, int8), (perf.fp8_tflops, fp8), (perf.fp4_tflops, fp4)):
                assert peak is None if rate is None else peak == pytest.approx(tensor_cores * rate * ghz / 1000,
                                                                              abs=1e-3), module.id
            if perf.dla_int8_tops is not None:  # 16384 INT8 OP per DLA core per clock (Orin), within 3%
                assert module.dla_cores > 0 and perf.dla_mhz
                assert perf.dla_int8_tops == pytest.approx(module.dla_cores * 16384 * perf.dla_mhz / 1e6, rel=0.03)
            assert perf.sources, module.id
