"""Activation statistics, every range method from one histogram, and bias correction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.calibration import (
    LEVELS,
    ActivationStatistics,
    collect_statistics,
    correct_biases,
    fake_quantize,
    thresholds,
    write_ranges_cache,
)


def _stats_of(values: np.ndarray, bins: int = 2048, chunks: int = 4) -> ActivationStatistics:
    """Statistics of ``values`` fed in ``chunks`` batches through an Identity model (the real collector)."""
    return _collect(values.reshape(chunks, -1), bins)


def _collect(batches: np.ndarray, bins: int, tmp: Path | None = None) -> ActivationStatistics:
    import tempfile

    folder = Path(tmp or tempfile.mkdtemp())
    size = batches.shape[1]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])])
    path = folder / "identity.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    feeds = ({"x": b[None].astype(np.float32)} for b in batches)
    return collect_statistics(path, ["x", "y"], [], feeds, bins=bins)


def _outliers() -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.normal(0.0, 1.0, 400_000)
    values[rng.choice(values.size, 20, replace=False)] = rng.uniform(30, 60, 20) * rng.choice([-1, 1], 20)
    return values


def test_every_method_finds_its_own_range_on_a_tensor_with_outliers() -> None:
    values = _outliers()
    stats = _stats_of(values)
    found = {m: float(thresholds(stats, m)[0]) for m in
             ("minmax", "percentile-99.99", "percentile-99.999", "entropy", "mse")}
    print(found)
    assert found["minmax"] == pytest.approx(np.abs(values).max(), rel=1e-6)
    assert len({round(v, 4) for v in found.values()}) == len(found), "each method yields its own ranges"
    assert found["percentile-99.99"] < found["percentile-99.999"] < found["minmax"]
    assert 2.0 < found["entropy"] < 0.5 * found["minmax"]  # KL clips the 20 outliers
    assert found["mse"] < found["minmax"]  # squared error weighs them: clipped less, but clipped


def test_the_percentile_agrees_with_numpy_and_with_onnxruntimes_percentile_calibrator() -> None:
    from onnxruntime.quantization.calibrate import HistogramCollector

    values = _outliers()
    stats = _stats_of(values)
    ours = float(thresholds(stats, "percentile-99.99")[0])
    width = stats.upper[0] / stats.bins
    assert abs(ours - np.percentile(np.abs(values), 99.99)) <= 2 * width
    collector = HistogramCollector("percentile", True, 2048, 128, 99.99, "same")
    for chunk in values.astype(np.float32).reshape(4, -1):
        collector.collect({"x": [chunk]})
    theirs = float(collector.compute_collection_result()["x"][1])
    assert abs(ours - theirs) <= 2 * max(width, theirs / 2048)


def test_the_histogram_keeps_every_value_when_a_later_batch_has_a_larger_maximum() -> None:
    rng = np.random.default_rng(1)
    batches = np.stack([rng.normal(0, scale, 10_000) for scale in (0.1, 1.0, 10.0)])
    stats = _collect(batches, bins=1024)
    assert stats.histograms[0].sum() == batches.size
    assert stats.upper[0] >= np.abs(batches).max()
    assert float(stats.absmax[0]) == pytest.approx(np.abs(batches).max(), rel=1e-6)


def test_the_mse_threshold_has_the_least_quantization_error_of_the_candidates() -> None:
    values = _outliers().astype(np.float32)
    stats = _stats_of(values)

    def error(threshold: float) -> float:
        return float(np.mean((fake_quantize(values, threshold) - values) ** 2))

    chosen = float(thresholds(stats, "mse")[0])
    for other in ("minmax", "percentile-99.999", "entropy"):
        assert error(chosen) <= error(float(thresholds(stats, other)[0])) * 1.02, other


def test_entropy_ignores_the_spike_of_exact_zeros_a_relu_leaves() -> None:
    rng = np.random.default_rng(2)
    relu = np.maximum(rng.normal(0, 1, 200_000), 0)  # half exact zeros
    stats = _stats_of(relu)
    found = float(thresholds(stats, "entropy")[0])
    assert found > 2.5, f"entropy clipped a ReLU output at {found}: the zeros decided it"


def _conv_model(path: Path, weight: np.ndarray, bias: np.ndarray) -> None:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _quantize(source: Path, out: Path, ranges: Path) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(str(source), str(out), None, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, op_types_to_quantize=["Conv"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                                   "OpTypesToExcludeOutputQuantization": ["Conv"]},
                    calibration_cache_path=str(ranges))


def test_ranges_reach_onnxruntimes_quantizer_as_scale_threshold_over_127(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    _conv_model(tmp_path / "fp32.onnx", rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), np.zeros(8, np.float32))
    inputs = rng.normal(0.5, 1.0, (6, 4, 16, 16)).astype(np.float32)
    stats = collect_statistics(tmp_path / "fp32.onnx", ["x", "y"], ["x"], ({"x": b[None]} for b in inputs), bins=2048)
    found = thresholds(stats, "percentile-99.99")
    write_ranges_cache(tmp_path / "ranges.json", stats, found)
    _quantize(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "ranges.json")
    model = onnx.load(str(tmp_path / "int8.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    assert float(inits[q.input[1]]) == pytest.approx(found[stats.tensors.index("x")] / LEVELS, rel=1e-6)
    assert inits[q.input[2]].dtype == np.int8 and int(inits[q.input[2]]) == 0


def test_bias_correction_brings_the_int8_output_mean_back_to_fp32s(tmp_path: Path) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(4)
    weight = rng.normal(0, 0.05, (8, 4, 3, 3)).astype(np.float32)
    weight[:, :, 0, 0] = 1.0  # a large tap per channel: per-channel scales coarse for the small ones
    weight[:, :, 1, 1] += 0.006  # a systematic offset below half a step of those scales
    _conv_model(tmp_path / "fp32.onnx", weight, rng.normal(0, 0.1, 8).astype(np.float32))
    inputs = (rng.normal(2.0, 0.5, (12, 4, 16, 16))).astype(np.float32)  # a nonzero mean makes the shift show
    stats = collect_statistics(tmp_path / "fp32.onnx", ["x", "y"], ["x"], ({"x": b[None]} for b in inputs), bins=2048)
    write_ranges_cache(tmp_path / "ranges.json", stats, thresholds(stats, "minmax"))
    _quantize(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "ranges.json")

    def mean_error(path: Path) -> float:
        fp32 = ort.InferenceSession(str(tmp_path / "fp32.onnx"), providers=["CPUExecutionProvider"])
        int8 = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        diffs = [int8.run(None, {"x": b[None]})[0] - fp32.run(None, {"x": b[None]})[0] for b in inputs]
        return float(np.abs(np.mean(diffs, axis=(0, 1, 3, 4))).mean())  # per output channel, interior and border

    before = mean_error(tmp_path / "int8.onnx")
    assert correct_biases(tmp_path / "int8.onnx", tmp_path / "fp32.onnx", stats, {}) == 1
    after = mean_error(tmp_path / "int8.onnx")
    print(f"mean output shift per channel: {before:.5f} before, {after:.5f} after bias correction")
    assert after < 0.5 * before
    model = onnx.load(str(tmp_path / "int8.onnx"))
    assert [i.name for i in model.graph.initializer].count("b") == 0, "the replaced bias is not left behind"
