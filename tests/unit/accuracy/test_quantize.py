"""INT8 candidates: a layer kept in float reads float tensors, whatever its neighbours read."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.quantize import QdqPlacement, float_leaks, int8_candidate


def _two_readers(path: Path) -> None:
    """x -> Relu -> t; t read by Conv ``quantized`` and by Conv ``kept``."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(4, 3, 1, 1)).astype(np.float32), name) for name in "wv"]
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="relu"),
             helper.make_node("Conv", ["t", "w"], ["a"], name="quantized"),
             helper.make_node("Conv", ["t", "v"], ["b"], name="kept")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in "ab"],
                              weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _ranges(path: Path, names: list[str]) -> None:
    """ONNX Runtime's calibration cache (what edgebuild.accuracy.calibration writes): [-2, 2] for each tensor."""
    def value(v: float) -> dict:
        return {"data": v, "dtype": "float32", "CLS": "numpy.array"}

    path.write_text(json.dumps({
        "CLS": "TensorsData", "calibration_method": {"CLS": "CalibrationMethod", "value": "CalibrationMethod.MinMax"},
        "smooth_quant": False,
        "data": {n: {"lowest": value(-2.0), "highest": value(2.0), "CLS": "TensorData"} for n in names}}))


def test_a_layer_kept_in_float_reads_the_float_tensor_its_quantized_neighbour_reads_quantized(tmp_path: Path) -> None:
    # ONNX Runtime's quantizer gives a tensor with one quantized reader one Q/DQ pair for all its readers
    source, out, ranges = tmp_path / "model.onnx", tmp_path / "int8.onnx", tmp_path / "ranges.json"
    _two_readers(source)
    _ranges(ranges, ["x", "t", "a", "b"])
    project = SimpleNamespace(quantize=SimpleNamespace(per_channel=True))
    placement = QdqPlacement(("quantized", "kept"), ("Conv",), ())
    candidate = int8_candidate(project, source, out, ranges, placement, exclude=("kept",))  # type: ignore[arg-type]
    assert candidate.kept_fp32 == ("kept",) and float_leaks(out, ("kept",)) == []
    graph = onnx.load(str(out)).graph
    produced = {o: n.op_type for n in graph.node for o in n.output}
    readers = {n.name: n.input[0] for n in graph.node if n.op_type == "Conv"}
    assert readers["kept"] == "t" and produced[readers["quantized"]] == "DequantizeLinear"


def test_a_dfl_expectation_stays_in_float_and_the_layers_before_it_do_not(tmp_path: Path) -> None:
    """Ultralytics' DFL: a 1x1 Conv of fixed weights 0..n-1 over a Softmax is box decode math, never quantized; a
    learned Conv beside it is (quantize._expectations)."""
    from edgebuild.accuracy.quantize import qdq_placement

    rng = np.random.default_rng(0)
    bins = 16
    weights = [numpy_helper.from_array(rng.normal(size=(bins, 3, 1, 1)).astype(np.float32), "learned"),
               numpy_helper.from_array(np.arange(bins, dtype=np.float32).reshape(1, bins, 1, 1), "bins"),
               numpy_helper.from_array(rng.normal(size=(1, bins, 1, 1)).astype(np.float32), "gate")]
    nodes = [helper.make_node("Conv", ["x", "learned"], ["logits"], name="head"),
             helper.make_node("Softmax", ["logits"], ["distribution"], name="softmax", axis=1),
             helper.make_node("Conv", ["distribution", "bins"], ["distance"], name="dfl"),
             helper.make_node("Conv", ["distribution", "gate"], ["gated"], name="learned_after_softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, 8, 8])
                               for n in ("distance", "gated")], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "model.onnx"))
    project = SimpleNamespace(quantize=SimpleNamespace(op_types=["Conv"], residual_add=True))
    placement = qdq_placement(project, tmp_path / "model.onnx")  # type: ignore[arg-type]
    assert placement.nodes == ("head", "learned_after_softmax")  # a learned Conv after a Softmax is quantized


def _overflowing(path: Path) -> None:
    """x [1, 4, 4] in 0..100: ``up`` (MatMul, x 300) goes past FP16's 65504, ``down`` brings it back; ``norm`` is a
    LayerNormalization of x * 10 (up to 1000: its square passes FP16's range); ``masked`` adds a -inf mask, an
    infinity FP32 has too (RT-DETR's invalid anchors); ``small`` is plain arithmetic FP16 carries."""
    inits = [numpy_helper.from_array(np.full((4, 4), 300.0, np.float32), "w"),
             numpy_helper.from_array(np.array(1e-3, np.float32), "milli"),
             numpy_helper.from_array(np.array(10.0, np.float32), "ten"),
             numpy_helper.from_array(np.ones(4, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(4, np.float32), "beta"),
             numpy_helper.from_array(np.array([0, 0, 0, -np.inf], np.float32), "mask")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["big"], name="up"),
             helper.make_node("Relu", ["big"], ["bigger"], name="relu"),  # no fusing MatMul and Mul (ORT does)
             helper.make_node("Mul", ["bigger", "milli"], ["y"], name="down"),
             helper.make_node("Mul", ["x", "ten"], ["tens"], name="times_ten"),
             helper.make_node("LayerNormalization", ["tens", "gamma", "beta"], ["z"], name="norm", axis=-1),
             helper.make_node("Add", ["x", "mask"], ["m"], name="masked"),
             helper.make_node("Mul", ["x", "milli"], ["s"], name="small")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 4]) for n in "yzms"]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])], outputs,
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_fp16_keeps_in_fp32_the_layers_measured_past_its_range(tmp_path: Path) -> None:
    import onnxruntime as ort

    from edgebuild.accuracy.fp16.float_layers import fp16_float_layers
    from edgebuild.accuracy.quantize import fp16_candidate

    _overflowing(tmp_path / "fp32.onnx")
    batches = [np.random.default_rng(0).uniform(0, 100, (2, 4, 4)).astype(np.float32)]
    found = fp16_float_layers(tmp_path / "fp32.onnx", batches, "x")
    assert list(found) == ["up", "relu", "down", "norm"], found
    assert "past FP16's 65504" in found["up"] and "its square passes" in found["norm"]
    naive = fp16_candidate(tmp_path / "fp32.onnx", tmp_path / "naive.onnx")
    kept = fp16_candidate(tmp_path / "fp32.onnx", tmp_path / "kept.onnx", batches, "x")
    assert naive.kept_fp32 == () and kept.kept_fp32 == tuple(found) and "4 layer(s) kept" in kept.note
    assert "reads FP32 values up to" in found["down"]  # an FP16 copy of its input would be inf
    # ONNX Runtime's CPU provider runs FP16 MatMul and Relu in FP32 (Casts where it has no FP16 kernel): the naive
    # candidate does not overflow here as TensorRT's FP16 tensors would, which is why FP32's magnitudes decide
    feed = {"x": batches[0][:1]}
    want = ort.InferenceSession(str(tmp_path / "fp32.onnx")).run(["y", "z"], feed)
    for got, ref in zip(ort.InferenceSession(str(tmp_path / "kept.onnx")).run(["y", "z"], feed), want):
        np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)

    def types(path: Path) -> dict[str, int]:
        inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
        return {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}

    def written(path: Path, node: str) -> int:
        model = onnx.load(str(path))
        return types(path)[next(n for n in model.graph.node if n.name == node).output[0]]

    assert written(tmp_path / "naive.onnx", "up") == TensorProto.FLOAT16
    # kept layers write and read FP32, with no FP16 round trip between them (ONNX Runtime's converter adds one)
    assert written(tmp_path / "kept.onnx", "up") == written(tmp_path / "kept.onnx", "relu") == TensorProto.FLOAT
    kept_graph = onnx.load(str(tmp_path / "kept.onnx"))
    relu = next(n for n in kept_graph.graph.node if n.name == "relu")
    assert relu.input[0] == next(n for n in kept_graph.graph.node if n.name == "up").output[0]
    assert written(tmp_path / "kept.onnx", "times_ten") == TensorProto.FLOAT16  # what FP16 carries stays FP16
    onnx.checker.check_model(kept_graph, full_check=True)


def test_fp16_keeps_an_inverse_sigmoid_and_what_feeds_it_where_it_amplifies_fp16_rounding(tmp_path: Path) -> None:
    """A DETR's decoder refines boxes through log(x / (1 - x)) of a sigmoid: near 1, FP16's rounding of x is most
    of 1 - x. Measured with every tensor stored in FP16, the Sub's error is many times its inputs': it is kept in
    FP32 with the elementwise nodes feeding it; the Conv before them (a layer) and what reads 1 - x are not."""
    from edgebuild.accuracy.fp16.float_layers import fp16_float_layers

    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.full((4, 4, 1, 1), 0.5, np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["logits"], name="layer"),
             helper.make_node("Sigmoid", ["logits"], ["p"], name="sigmoid"),
             helper.make_node("Sub", ["one", "p"], ["q"], name="one_minus"),
             helper.make_node("Div", ["p", "q"], ["odds"], name="odds"),
             helper.make_node("Log", ["odds"], ["y"], name="inverse_sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    batches = [np.random.default_rng(0).uniform(2.0, 3.5, (4, 4, 3, 3)).astype(np.float32)]  # sigmoid 0.98..0.999
    found = fp16_float_layers(tmp_path / "m.onnx", batches, "x")
    # 1 - x of an FP16-rounded x is where the error is made (30x its input's); the sigmoid feeding it goes with it
    assert list(found) == ["sigmoid", "one_minus"], found
    assert found["one_minus"].startswith("FP16 error") and found["sigmoid"].startswith("feeds one_minus")
