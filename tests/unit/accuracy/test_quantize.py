"""INT8 candidates: a layer kept in float reads float tensors, whatever its neighbours read."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.quantize import QuantizationPlan, float_leaks, int8_candidate


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
    plan = QuantizationPlan(("quantized", "kept"), ("Conv",), ())
    candidate = int8_candidate(project, source, out, ranges, plan, exclude=("kept",))  # type: ignore[arg-type]
    assert candidate.kept_fp32 == ("kept",) and float_leaks(out, ("kept",)) == []
    graph = onnx.load(str(out)).graph
    produced = {o: n.op_type for n in graph.node for o in n.output}
    readers = {n.name: n.input[0] for n in graph.node if n.op_type == "Conv"}
    assert readers["kept"] == "t" and produced[readers["quantized"]] == "DequantizeLinear"
