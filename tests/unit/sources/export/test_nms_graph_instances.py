"""NMS inside the model for pose and segmentation: the appended graph, run in ONNX Runtime, keeps the
detections the host's decode keeps and gathers each one's keypoints or mask coefficients from its anchor;
every added operator stays in TensorRT's parser tables; OBB is refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.accuracy.task_decode import decode_instances
from edgebuild.errors import ConfigError, ModelError
from edgebuild.runtime.base.task_decode import instances_in_model
from edgebuild.runtime.base.vision import INSTANCE_NMS_OUTPUTS, NMS_OUTPUTS, DetectionParams
from edgebuild.sources.export.nms_graph import (
    NmsSettings,
    append_nms,
    check_nms_settings,
    is_nms_node,
    nms_target_problem,
)
from edgebuild.targets.preflight import BLOCKING, check_target
from edgebuild.targets.profiles import SelectedGroup, load_catalog
from tests.unit.sources.export.test_nms_graph import _crowded_head, _run, assert_parsers_take_the_added_nodes

KEYPOINTS, COEFFICIENTS, PROTO = (5, 3), 8, (16, 16)


def _head(kind: str, anchors: int | str, classes: int) -> onnx.ModelProto:
    """A raw pose or segmentation head that returns its inputs (A may be a dim name)."""
    shapes: dict[str, list] = {"boxes": ["batch", anchors, 4], "scores": ["batch", anchors, classes]}
    if kind == "pose":
        shapes["keypoints"] = ["batch", anchors, *KEYPOINTS]
    else:
        shapes.update(mask_coefficients=["batch", anchors, COEFFICIENTS], prototypes=["batch", COEFFICIENTS, *PROTO])
    graph = helper.make_graph(
        [helper.make_node("Identity", [f"{n}_in"], [n], name=f"head/{n}") for n in shapes], "head",
        [helper.make_tensor_value_info(f"{n}_in", TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(kind: str, batch: int, anchors: int, classes: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    boxes, scores = _crowded_head(rng, batch, anchors, classes)
    feeds = {"boxes_in": boxes, "scores_in": scores}
    if kind == "pose":
        feeds["keypoints_in"] = rng.uniform(0, 320, (batch, anchors, *KEYPOINTS)).astype(np.float32)
    else:
        feeds["mask_coefficients_in"] = rng.normal(size=(batch, anchors, COEFFICIENTS)).astype(np.float32)
        feeds["prototypes_in"] = rng.normal(size=(batch, COEFFICIENTS, *PROTO)).astype(np.float32)
    return feeds


CASES = [  # kind, anchors (or a dim name: dynamic), classes, score_threshold, max_detections
    pytest.param("pose", 600, 1, 0.05, 300, id="pose-static"),
    pytest.param("pose", "anchors", 3, 0.25, 100, id="pose-dynamic"),
    pytest.param("segmentation", 2400, 4, 0.01, 300, id="segmentation-more-candidates-than-top-k"),
    pytest.param("segmentation", "anchors", 2, 0.0, 1000, id="segmentation-dynamic-few-anchors"),
]


@pytest.mark.parametrize("kind, anchors, classes, threshold, limit", CASES)
def test_the_graph_gathers_what_the_host_decode_keeps(kind, anchors, classes, threshold, limit) -> None:
    settings = check_nms_settings(kind, {"score_threshold": threshold, "nms_iou": 0.6, "max_detections": limit})
    model = append_nms(_head(kind, anchors, classes), settings)
    assert [o.name for o in model.graph.output] == list(INSTANCE_NMS_OUTPUTS[kind])
    count = anchors if isinstance(anchors, int) else 90
    feeds = _feeds(kind, 3, count, classes)
    outputs = _run(model, feeds)
    got = instances_in_model(outputs, kind)
    for image in range(3):
        want = decode_instances(feeds["boxes_in"][image], feeds["scores_in"][image], threshold, 0.6, limit,
                                DetectionParams.pre_nms_top_k)
        n = len(want["scores"])
        assert n > 10 and len(got[image]["scores"]) == n, image
        np.testing.assert_allclose(got[image]["scores"], want["scores"], atol=1e-6)
        np.testing.assert_allclose(got[image]["boxes"], want["boxes"], atol=1e-5)
        np.testing.assert_array_equal(got[image]["labels"], want["labels"])
        if kind == "pose":
            np.testing.assert_array_equal(got[image]["keypoints"], feeds["keypoints_in"][image][want["anchors"]])
            assert outputs["detection_keypoints"].shape == (3, limit, *KEYPOINTS)
            assert not outputs["detection_keypoints"][image, n:].any()  # zero rows past num_detections
        else:
            np.testing.assert_array_equal(got[image]["coefficients"],
                                          feeds["mask_coefficients_in"][image][want["anchors"]])
            np.testing.assert_array_equal(got[image]["prototypes"], feeds["prototypes_in"][image])
            assert outputs["detection_mask_coefficients"].shape == (3, limit, COEFFICIENTS)
            assert not outputs["detection_mask_coefficients"][image, n:].any()


def test_the_instance_graph_is_valid_with_full_shape_inference_and_only_its_outputs() -> None:
    for kind in ("pose", "segmentation"):
        model = append_nms(_head(kind, "anchors", 2), check_nms_settings(kind, {"max_detections": 50}))
        onnx.checker.check_model(model, full_check=True)
        shapes = {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim]
                  for o in model.graph.output}
        if kind == "pose":
            assert shapes["detection_keypoints"] == ["batch", 50, *KEYPOINTS]
        else:
            assert shapes["detection_mask_coefficients"] == ["batch", 50, COEFFICIENTS]
            assert shapes["mask_prototypes"] == ["batch", COEFFICIENTS, *PROTO]


def test_every_operator_added_for_pose_and_segmentation_is_in_the_parser_tables_and_preflight_passes() -> None:
    checked = set()
    for kind in ("pose", "segmentation"):
        for anchors in (8400, "anchors"):
            model = append_nms(_head(kind, anchors, 3), check_nms_settings(kind, {"max_detections": 300}))
            added = [n for n in model.graph.node if is_nms_node(n.name)]
            assert {"GatherElements", "Reshape"} <= {n.op_type for n in added}
            assert_parsers_take_the_added_nodes(model)
        inferred = onnx.shape_inference.infer_shapes(model)
        for target in load_catalog().all_targets():
            version = ".".join(target.release.tensorrt.split(".")[:2])
            if (kind, version) in checked or nms_target_problem(target.release.tensorrt):
                continue
            checked.add((kind, version))
            findings = check_target(inferred, SelectedGroup(target.id, target)).findings
            assert [f for f in findings if f.severity == BLOCKING] == [], (kind, target.id, findings)
    assert {("pose", "10.3"), ("segmentation", "8.5")} <= checked


def test_obb_is_refused_and_the_instance_outputs_are_checked() -> None:
    with pytest.raises(ConfigError, match="TensorRT has no rotated NMS"):
        check_nms_settings("obb", {})
    with pytest.raises(ConfigError, match="keypoints_output = 'boxes'.* name one output twice"):
        check_nms_settings("pose", {"keypoints_output": "boxes"})
    settings = check_nms_settings("pose", {"keypoints_output": "kpts"})
    assert settings.task == "pose" and settings.output_names[:4] == NMS_OUTPUTS
    with pytest.raises(ModelError, match="keypoints_output = 'kpts'.*not an output"):
        append_nms(_head("pose", 10, 1), settings)
    segmentation = _head("segmentation", 10, 1)
    for value in (segmentation.graph.input[3], segmentation.graph.output[3]):  # prototypes: one too many
        value.type.tensor_type.shape.dim[1].dim_value = COEFFICIENTS + 1
    with pytest.raises(ModelError, match="one coefficient per prototype"):
        append_nms(segmentation, check_nms_settings("segmentation", {}))
    with pytest.raises(ModelError, match="detection_keypoints"):
        instances_in_model(_run(append_nms(_head("pose", 10, 1), NmsSettings()), _feeds("pose", 1, 10, 1)), "pose")
