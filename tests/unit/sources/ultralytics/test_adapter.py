"""The Ultralytics adapters without Ultralytics: ONNX nodes appended to a hand-made raw head, the
nn.Module adapter on a tensor, and what a model's facts fill in and check in a project."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.project.ultralytics_facts import (
    UltralyticsFacts,
    facts_from_props,
    fill_raw_defaults,
    peek_checkpoint,
    project_defaults,
)
from edgebuild.sources.ultralytics.adapter import append_detection_adapter, raise_for_task, raw_head_output

CLASSES, ANCHORS = 3, 10


def _reference(head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy: [N, 4+C, A] cx cy w h + scores -> boxes [N, A, 4] xyxy, scores [N, A, C]."""
    y = head.transpose(0, 2, 1)
    cx, cy, w, h = y[..., 0], y[..., 1], y[..., 2], y[..., 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1), y[..., 4:]


def _raw_head_graph(dims: list) -> onnx.ModelProto:
    """A stand-in export: the input is the head, through an Identity, as output0, with Ultralytics' metadata."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["head"], ["output0"])], "raw-head",
        [helper.make_tensor_value_info("head", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for key, value in {"author": "Ultralytics", "task": "detect", "names": "{0: 'a', 1: 'b', 2: 'c'}",
                       "imgsz": "[64, 64]", "stride": "32", "version": "8.4.0"}.items():
        model.metadata_props.add(key=key, value=value)
    return model


@pytest.mark.parametrize("dims", [[2, 4 + CLASSES, ANCHORS], ["batch", 4 + CLASSES, "anchors"],
                                  ["batch", "channels", "anchors"]])
def test_the_onnx_adapter_outputs_equal_the_numpy_reference(dims: list) -> None:
    import onnxruntime as ort

    model = _raw_head_graph(dims)
    assert raw_head_output(model, CLASSES) == "output0"
    adapted = append_detection_adapter(model, "output0", "boxes", "scores", classes=CLASSES)
    onnx.checker.check_model(adapted, full_check=True)
    assert [o.name for o in adapted.graph.output] == ["boxes", "scores"]
    declared = [[d.dim_value or d.dim_param or None for d in o.type.tensor_type.shape.dim]
                for o in adapted.graph.output]
    assert declared[0][2] == 4 and declared[1][2] == CLASSES
    head = np.random.default_rng(0).uniform(0, 64, (2, 4 + CLASSES, ANCHORS)).astype(np.float32)
    session = ort.InferenceSession(adapted.SerializeToString(), providers=["CPUExecutionProvider"])
    boxes, scores = session.run(["boxes", "scores"], {"head": head})
    want_boxes, want_scores = _reference(head)
    assert boxes.shape == (2, ANCHORS, 4) and scores.shape == (2, ANCHORS, CLASSES)
    np.testing.assert_allclose(boxes, want_boxes, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(scores, want_scores)
    assert model.graph.output[0].name == "output0"  # the input graph is left as it was


def test_the_adapter_keeps_the_other_outputs_and_names_its_nodes_apart() -> None:
    adapted = append_detection_adapter(_raw_head_graph([1, 7, 10]), "output0", "b", "s")
    assert [o.name for o in adapted.graph.output] == ["b", "s"]
    assert all(n.name.startswith("edgebuild_ultralytics_") for n in adapted.graph.node[1:])
    with pytest.raises(ValueError, match="no output 'nope'"):
        append_detection_adapter(_raw_head_graph([1, 7, 10]), "nope")


def test_the_module_adapter_on_a_tensor() -> None:
    torch = pytest.importorskip("torch")
    from edgebuild.sources.ultralytics.adapter import adapter_module, head_to_boxes_scores

    head = torch.rand(2, 4 + CLASSES, ANCHORS) * 64
    boxes, scores = head_to_boxes_scores(head)
    want_boxes, want_scores = _reference(head.numpy())
    np.testing.assert_allclose(boxes.numpy(), want_boxes, atol=1e-5)
    np.testing.assert_array_equal(scores.numpy(), want_scores)

    class Detect(torch.nn.Module):
        dynamic, end2end = False, True

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
            return head[: x.shape[0]], []  # eval mode: (decoded, raw maps)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.ModuleList([Detect()])

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
            return self.model[-1](x)

    inner = Model()
    wrapped = adapter_module(inner, "detect", ["boxes", "scores"])
    assert inner.model[-1].dynamic is True and inner.model[-1].end2end is False  # the grid from the input's size
    out = wrapped(torch.zeros(2, 3, 64, 64))
    assert sorted(out) == ["boxes", "scores"]
    np.testing.assert_allclose(out["boxes"].numpy(), want_boxes, atol=1e-5)
    classify = adapter_module(torch.nn.Softmax(dim=1), "classify", ["logits"])
    assert classify(torch.zeros(2, 5))["logits"].shape == (2, 5)


def test_an_export_s_metadata_fills_what_the_project_leaves_out() -> None:
    facts = facts_from_props({p.key: p.value for p in _raw_head_graph([1, 7, 10]).metadata_props})
    assert facts == UltralyticsFacts("detect", ["a", "b", "c"], [64, 64], 32, "8.4.0", "ONNX metadata", "export")
    raw = {"task": {"kind": "detection", "preprocess": {"input_size": [96, 96]}, "postprocess": {"nms_iou": 0.5}}}
    task = fill_raw_defaults(raw, facts)["task"]
    assert task["classes"] == ["a", "b", "c"]
    assert task["preprocess"] == {"resize": "letterbox", "pad_value": 114, "channel_order": "RGB",
                                  "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0], "input_size": [96, 96]}
    assert task["postprocess"] == {"score_threshold": 0.001, "nms_iou": 0.5, "max_detections": 300}
    assert fill_raw_defaults({}, facts)["task"]["kind"] == "detection"
    assert project_defaults(UltralyticsFacts("unknown")) == {}


def test_an_unknown_task_is_refused_with_what_to_do() -> None:
    from edgebuild.errors import ModelError

    with pytest.raises(ModelError, match="does not take the unknown task yet") as caught:
        raise_for_task("best.pt", UltralyticsFacts("unknown", ["a"], [640, 640], 32))
    assert "one of those variants" in caught.value.hint


@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_segment_pose_and_obb_are_taken(task: str) -> None:
    raise_for_task("best.pt", UltralyticsFacts(task, ["a"], [640, 640], 32))
    kpt_shape = [17, 3] if task == "pose" else []
    defaults = project_defaults(UltralyticsFacts(task, ["a"], [64, 64], 32, kpt_shape=kpt_shape))
    assert defaults["kind"] == {"segment": "segmentation", "pose": "pose", "obb": "obb"}[task]
    assert defaults["preprocess"]["resize"] == "letterbox" and defaults["postprocess"]["nms_iou"] == 0.7
    assert defaults.get("kpt_shape") == ([17, 3] if task == "pose" else None)


def test_the_pose_and_segment_adapters_split_the_head_by_the_documented_convention() -> None:
    """pose [N, 4+C+K*3, A] -> boxes xyxy, scores, keypoints [N, A, K, 3]; segment (head, prototypes) -> boxes,
    scores, mask coefficients [N, A, M], the prototypes as they are."""
    torch = pytest.importorskip("torch")
    from edgebuild.sources.ultralytics.adapter import instance_outputs

    head = torch.arange(2 * (4 + CLASSES + 2 * 3) * ANCHORS, dtype=torch.float32).reshape(2, 4 + CLASSES + 6, ANCHORS)
    boxes, scores, keypoints = instance_outputs(head, "pose", (CLASSES, 2, 3))
    want_boxes, want_rest = _reference(head.numpy())
    np.testing.assert_allclose(boxes.numpy(), want_boxes)
    np.testing.assert_allclose(scores.numpy(), want_rest[..., :CLASSES])
    assert keypoints.shape == (2, ANCHORS, 2, 3)
    np.testing.assert_allclose(keypoints.numpy().reshape(2, ANCHORS, 6), want_rest[..., CLASSES:])
    seg = torch.arange(2 * (4 + CLASSES + 32) * ANCHORS, dtype=torch.float32).reshape(2, 4 + CLASSES + 32, ANCHORS)
    prototypes = torch.zeros(2, 32, 8, 8)
    boxes, scores, coefficients, protos = instance_outputs((seg, prototypes), "segment", (CLASSES,))
    assert coefficients.shape == (2, ANCHORS, 32) and protos is prototypes
    np.testing.assert_allclose(coefficients.numpy(), _reference(seg.numpy())[1][..., CLASSES:])


def test_the_obb_adapter_keeps_the_rotated_box_as_centre_size_and_angle() -> None:
    """obb [N, 4+C+1, A] (cx, cy, w, h, scores, angle) -> boxes [N, A, 5] xywhr, scores [N, A, C]."""
    torch = pytest.importorskip("torch")
    from edgebuild.sources.ultralytics.adapter import instance_outputs

    head = torch.arange(2 * (4 + CLASSES + 1) * ANCHORS, dtype=torch.float32).reshape(2, 4 + CLASSES + 1, ANCHORS)
    boxes, scores = instance_outputs(head, "obb", (CLASSES,))
    y = head.numpy().transpose(0, 2, 1)
    np.testing.assert_allclose(boxes.numpy(), np.concatenate([y[..., :4], y[..., -1:]], axis=-1))
    np.testing.assert_allclose(scores.numpy(), y[..., 4:4 + CLASSES])


def test_a_file_that_is_no_checkpoint_peeks_as_nothing(tmp_path) -> None:
    (tmp_path / "x.pt").write_bytes(b"not a zip")
    assert peek_checkpoint(tmp_path / "x.pt") == {}


def test_a_checkpoint_is_read_without_running_its_pickle(tmp_path, monkeypatch) -> None:
    """A stand-in ``ultralytics.nn.tasks.DetectionModel`` saved with torch: its facts are read, its code never runs."""
    import sys
    import types

    torch = pytest.importorskip("torch")
    from edgebuild.project.ultralytics_facts import facts_from_checkpoint, is_ultralytics_checkpoint

    ran = []

    class DetectionModel:
        def __setstate__(self, state: dict) -> None:
            ran.append("setstate")  # would run under torch.load(weights_only=False)
            self.__dict__.update(state)

    for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    DetectionModel.__module__, DetectionModel.__qualname__ = "ultralytics.nn.tasks", "DetectionModel"
    sys.modules["ultralytics.nn.tasks"].DetectionModel = DetectionModel
    model = DetectionModel()
    model.__dict__.update({"names": {0: "cat", 1: "dog"}, "stride": torch.tensor([8.0, 16.0, 32.0]),
                           "args": {"imgsz": 320, "task": "detect"}})
    torch.save({"model": model, "version": "8.4.0", "train_args": {"imgsz": 416}}, tmp_path / "best.pt")
    facts = facts_from_checkpoint(tmp_path / "best.pt")
    assert facts == UltralyticsFacts("detect", ["cat", "dog"], [416, 416], 32, "8.4.0", "checkpoint", "DetectionModel")
    assert is_ultralytics_checkpoint(tmp_path / "best.pt") and not ran
    torch.save({"model": torch.nn.Linear(2, 2)}, tmp_path / "other.pt")
    assert facts_from_checkpoint(tmp_path / "other.pt") is None
