"""The export's checks read the model from memory where it is one file, and onnxslim runs on ONNX's shape inference."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.sources import export_checks
from edgebuild.sources.export_checks import checker_problem, one_file_bytes, save_onnx


def _model(*, broken: bool = False) -> onnx.ModelProto:
    """images [N, 3, H, W] -> Relu -> flattened to [N, 3*H*W] through a Shape/Gather/Concat chain."""
    shape_in = "missing" if broken else "relu"  # a node reading a tensor nothing produces: the checker refuses
    nodes = [
        helper.make_node("Relu", ["images"], ["relu"]),
        helper.make_node("Shape", [shape_in], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["relu", "target"], ["logits"]),
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
             helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                            ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_one_file_bytes_are_what_save_onnx_writes_and_none_with_external_data(tmp_path: Path) -> None:
    model = _model()
    save_onnx(model, tmp_path / "model.onnx", external_data=False)
    assert one_file_bytes(model, external_data=False) == (tmp_path / "model.onnx").read_bytes()
    assert one_file_bytes(model, external_data=True) is None


def test_the_checker_says_the_same_from_the_bytes_as_from_the_file(tmp_path: Path) -> None:
    for broken in (False, True):
        model = _model(broken=broken)
        path = tmp_path / f"broken{broken}" / "model.onnx"
        path.parent.mkdir()
        save_onnx(model, path, external_data=False)
        from_file = checker_problem(path)
        from_bytes = checker_problem(path, one_file_bytes(model, external_data=False))
        assert from_bytes == from_file
        assert (from_bytes is None) is not broken
    assert from_bytes.startswith("wrote a model the ONNX checker refuses (ValidationError: ")
    assert str(tmp_path) not in from_bytes


def test_onnxslim_runs_on_onnx_shape_inference_and_infers_itself_where_that_fails(monkeypatch) -> None:
    onnxslim = pytest.importorskip("onnxslim")
    calls: list[tuple[bool, int]] = []
    monkeypatch.setattr(onnxslim, "slim", lambda model, **kw: calls.append((kw.get("no_shape_infer", False),
                                                                            len(model.graph.value_info))) or model)
    export_checks._slim(_model())
    assert calls == [(True, 5)]  # every tensor between the nodes has a shape from ONNX's inference

    def fails(*args, **kwargs):
        raise ValueError("model too large")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fails)
    export_checks._slim(_model())
    assert calls[1] == (False, 0)
