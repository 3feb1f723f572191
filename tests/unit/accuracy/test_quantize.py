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
