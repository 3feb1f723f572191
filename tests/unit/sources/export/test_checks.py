"""The export's checks read the model from memory where it is one file, and onnxslim runs on ONNX's shape inference."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.sources.export import checks as export_checks
from edgebuild.sources.export.checks import checker_problem, one_file_bytes, save_onnx


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


def test_parity_follows_each_output_s_scale_float32_rounding_on_pixels_passes() -> None:
    """A trained YOLO11n-pose's export (issue 44): boxes 0.005 px and keypoints 0.0027 px from PyTorch at 128 px
    (relative error 4.7 on a keypoint near zero) is float32 rounding, within atol x the output's peak."""
    import numpy as np

    rng = np.random.default_rng(0)
    keypoints = rng.uniform(0, 128, (1, 300, 17, 2)).astype(np.float32)
    keypoints[0, 0, 0, 0] = 0.00057
    nudged = keypoints + rng.choice([-1, 1], keypoints.shape).astype(np.float32) * np.float32(0.0027)
    passed = export_checks._compare("min", {}, "keypoints", keypoints, nudged, atol=1e-4, rtol=1e-3)
    assert passed.ok, passed.problem
    assert passed.max_rel > 4  # what a fixed atol of 1e-4 refused
    logits = rng.normal(0, 1, (1, 1000)).astype(np.float32)
    assert export_checks._compare("min", {}, "logits", logits, logits + np.float32(5e-5), 1e-4, 1e-3).ok


def test_parity_still_fails_a_real_divergence_at_pixel_scale_and_at_logit_scale() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    boxes = rng.uniform(0, 128, (1, 300, 4)).astype(np.float32)
    wrong = boxes.copy()
    wrong[0, 7, 2] += 0.5  # half a pixel on one box: a real difference
    failed = export_checks._compare("opt", {}, "boxes", boxes, wrong, atol=1e-4, rtol=1e-3)
    assert not failed.ok and "max abs error 0.5" in failed.problem
    logits = rng.normal(0, 1, (1, 1000)).astype(np.float32)  # peak ~3: its atol stays near 1e-4
    assert not export_checks._compare("opt", {}, "logits", logits, logits + np.float32(2e-3), 1e-4, 1e-3).ok
    assert not export_checks._compare("opt", {}, "boxes", boxes, None, 1e-4, 1e-3).ok


def test_detections_parity_scales_the_boxes_tolerance_and_not_the_scores() -> None:
    import numpy as np

    from edgebuild.runtime.base.vision import NMS_OUTPUTS
    from edgebuild.sources.export.nms_graph import detections_mismatch

    count, boxes, scores, classes = NMS_OUTPUTS
    want = {count: np.array([[2]]), boxes: np.array([[[0.0, 1.0, 120.0, 126.0], [10.0, 20.0, 30.0, 40.0]]]),
            scores: np.array([[0.9, 0.5]]), classes: np.array([[0, 1]])}
    box_atol = export_checks.output_tolerance(1e-4, want[boxes])  # what parity_results passes: 0.0126 px here
    rounded = dict(want, **{boxes: want[boxes] + 0.004})
    assert detections_mismatch(want, rounded, 1e-4, 1e-3, box_atol)[1] == ""
    assert detections_mismatch(want, rounded, 1e-4, 1e-3)[1]  # the fixed atol refused float32 rounding
    moved = dict(want, **{boxes: want[boxes] + np.array([[[0.6, 0, 0, 0], [0, 0, 0, 0]]])})  # the top row
    assert detections_mismatch(want, moved, 1e-4, 1e-3, box_atol)[1]
    rescored = dict(want, **{scores: np.array([[0.88, 0.5]])})
    assert detections_mismatch(want, rescored, 1e-4, 1e-3, box_atol)[1]
