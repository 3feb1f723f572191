"""Pose, segmentation and OBB outputs decoded as Ultralytics' val decodes them: the kept anchors carry their
keypoints and mask coefficients, oriented boxes go through its rotated Fast-NMS, coordinates go back through the
letterbox, and a model that outputs the ground truth scores Ultralytics' best (0.995: its 101-point AP) on the
task's metric (and the box mAP beside it)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edgebuild.accuracy.task_decode import (
    InstanceCollector,
    decode_instances,
    keypoints_to_original,
    rotated_corners,
    rotated_fast_nms,
    rotated_to_original,
)
from edgebuild.datasets.project_data import Sample
from edgebuild.errors import ModelError
from edgebuild.project.schema import ObbPostprocess, PosePostprocess, SegmentationPostprocess
from edgebuild.runtime.base.vision import ImageTransform

# a 64x32 image letterboxed into 64x64: scale 1, 16 pixels of padding above and below
TRANSFORM = ImageTransform(scale_x=1.0, scale_y=1.0, pad_x=0.0, pad_y=16.0, original_width=64, original_height=32)


def test_the_best_candidates_keep_their_anchor() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [30, 30, 40, 40]], np.float32)
    scores = np.array([[0.9, 0.0], [0.8, 0.0], [0.0, 0.7]], np.float32)
    found = decode_instances(boxes, scores, 0.001, 0.7, 300)
    assert found["anchors"].tolist() == [0, 2]  # anchor 1 overlaps anchor 0 (IoU 0.81) and is suppressed
    assert found["labels"].tolist() == [0, 1]
    np.testing.assert_allclose(found["scores"], [0.9, 0.7])


def test_keypoints_go_back_through_the_letterbox_unclipped() -> None:
    points = np.array([[[10.0, 20.0, 0.9], [70.0, 10.0, 0.2]]], np.float32)
    np.testing.assert_allclose(keypoints_to_original(points, TRANSFORM), [[[10, 4, 0.9], [70, -6, 0.2]]])
    two = keypoints_to_original(points[..., :2], TRANSFORM)
    assert two.shape == (1, 2, 3) and (two[..., 2] == 1).all()


def _project(kind: str) -> SimpleNamespace:
    post = {"pose": PosePostprocess(), "segmentation": SegmentationPostprocess(), "obb": ObbPostprocess()}[kind]
    return SimpleNamespace(task=SimpleNamespace(kind=kind, postprocess=post,
                                                preprocess=SimpleNamespace(input_size=[64, 64])))


def _data(annotation: dict, extra: dict) -> SimpleNamespace:
    truth = {"images": [{"id": 1, "width": 64, "height": 32, "file_name": "a.png"}],
             "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, **annotation}],
             "categories": [{"id": 1, "name": "a"}], **extra}
    return SimpleNamespace(coco=SimpleNamespace(ground_truth=truth, category_ids=[1]), truth_masks={})


def test_a_pose_model_that_outputs_the_ground_truth_scores_the_best() -> None:
    # the object: a box from (8, 4) to (40, 28) in the image, its 4 corners as keypoints
    corners = [(8, 4), (40, 4), (40, 28), (8, 28)]
    data = _data({"bbox": [8, 4, 32, 24], "area": 768, "num_keypoints": 4,
                  "keypoints": [v for x, y in corners for v in (x, y, 2)]}, {"kpt_shape": [4, 3]})
    collect = InstanceCollector(_project("pose"), data)
    boxes = np.zeros((1, 3, 4), np.float32)
    boxes[0, 1] = [8, 20, 40, 44]  # in the network input: y + 16
    scores = np.zeros((1, 3, 1), np.float32)
    scores[0, 1] = 0.9
    keypoints = np.zeros((1, 3, 4, 3), np.float32)
    keypoints[0, 1] = [[x, y + 16, 1.0] for x, y in corners]
    sample = Sample(path=None, image_id=1)  # type: ignore[arg-type]
    collect.add([sample], [TRANSFORM], {"boxes": boxes, "scores": scores, "keypoints": keypoints})
    metrics = collect.metrics()
    assert metrics["pose mAP50-95"] == metrics["box mAP50-95"] == pytest.approx(0.995), metrics


def test_a_segmentation_model_whose_masks_are_the_ground_truth_scores_the_best() -> None:
    # a rectangle from (8, 4) to (40, 28) in the image: rows 20..44 of the input, 5..11 of the 16x16 masks
    data = _data({"bbox": [8, 4, 32, 24], "area": 768, "segmentation": [[8, 4, 40, 4, 40, 28, 8, 28]]}, {})
    collect = InstanceCollector(_project("segmentation"), data)
    boxes = np.zeros((1, 2, 4), np.float32)
    boxes[0, 0] = [8, 20, 40, 44]
    scores = np.array([[[0.9], [0.0]]], np.float32)
    prototypes = np.full((1, 2, 16, 16), -1.0, np.float32)
    prototypes[0, 0, 5:11, 2:10] = 1.0  # the rectangle at a quarter of the input's resolution
    coefficients = np.array([[[1.0, 0.0], [0.0, 1.0]]], np.float32)
    sample = Sample(path=None, image_id=1)  # type: ignore[arg-type]
    collect.add([sample], [TRANSFORM], {"boxes": boxes, "scores": scores, "mask_coefficients": coefficients,
                                        "prototypes": prototypes})
    metrics = collect.metrics()
    assert metrics["mask mAP50-95"] == metrics["box mAP50-95"] == pytest.approx(0.995), metrics


def test_rotated_nms_is_ultralytics_fast_nms_within_each_class() -> None:
    # three boxes of class 0 in a row, each overlapping the next by 0.8 of its width: the second suppresses the
    # third although the first suppresses it (Fast-NMS, not greedy); class 1's box at the same place is kept
    boxes = np.array([[20, 20, 10, 10, 0.3], [22, 20, 10, 10, 0.3], [24, 20, 10, 10, 0.3], [22, 20, 10, 10, 0.3]],
                     np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    classes = np.array([0, 0, 0, 1])
    assert rotated_fast_nms(boxes, scores, classes, 0.7).tolist() == [0, 3]
    # the first and the third overlap less (probiou 0.5): only the second's overlap drops the third
    assert rotated_fast_nms(boxes[[0, 2]], scores[[0, 2]], classes[[0, 2]], 0.7).tolist() == [0, 1]


def test_oriented_boxes_are_decoded_from_every_class_above_the_threshold() -> None:
    boxes = np.array([[20, 20, 10, 4, 0.5], [20, 20, 10, 4, 0.5 + np.pi], [50, 50, 8, 8, 0.0]], np.float32)
    scores = np.array([[0.9, 0.2], [0.8, 0.0], [0.0, 0.0005]], np.float32)
    found = decode_instances(boxes, scores, 0.001, 0.7, 300)
    # anchor 1 is anchor 0 turned half a turn, the same box to probiou; anchor 2 is under the threshold
    assert found["anchors"].tolist() == [0, 0] and found["labels"].tolist() == [0, 1]
    assert found["boxes"].shape == (2, 5)


def test_oriented_boxes_go_back_through_the_letterbox_as_ultralytics_scale_boxes() -> None:
    transform = ImageTransform(scale_x=0.5, scale_y=0.5, pad_x=0.0, pad_y=16.0, original_width=128,
                               original_height=64)
    np.testing.assert_allclose(rotated_to_original(np.array([[10, 30, 8, 4, 0.7]]), transform),
                               [[20, 28, 16, 8, 0.7]], rtol=1e-6)
    np.testing.assert_allclose(rotated_corners(np.array([[0, 0, 4, 2, np.pi / 2]])),
                               [[[-1, 2], [1, 2], [1, -2], [-1, -2]]], atol=1e-6)


def test_an_obb_model_that_outputs_the_ground_truth_scores_the_best() -> None:
    # a square of side 16 centred at (30, 16) in the image, turned 30 degrees: its corners are the label
    angle = np.pi / 6
    corners = rotated_corners(np.array([[30, 16, 16, 16, angle]]))[0]
    data = _data({"bbox": [0, 0, 1, 1], "area": 256, "obb": [float(v) for v in corners.reshape(-1)]}, {})
    collect = InstanceCollector(_project("obb"), data)
    boxes = np.zeros((1, 3, 5), np.float32)
    boxes[0, 2] = [30, 32, 16, 16, angle + np.pi / 2]  # in the network input (y + 16); a quarter turn is the same
    scores = np.zeros((1, 3, 1), np.float32)
    scores[0, 2] = 0.9
    sample = Sample(path=None, image_id=1)  # type: ignore[arg-type]
    collect.add([sample], [TRANSFORM], {"boxes": boxes, "scores": scores})
    assert collect.metrics() == {"obb mAP50-95": pytest.approx(0.995), "obb mAP50": pytest.approx(0.995)}
    found = collect.results[0]
    np.testing.assert_allclose(found["obb"], [30, 16, 16, 16, angle + np.pi / 2], rtol=1e-6)
    side = 16 * (np.cos(angle) + np.sin(angle))  # the turned square's extent
    np.testing.assert_allclose(found["bbox"], [30 - side / 2, 16 - side / 2, side, side], rtol=1e-5)
    with pytest.raises(ModelError, match=r"not \[N, A, 5\] and \[N, A, 1\]"):
        collect.add([sample], [TRANSFORM], {"boxes": boxes[..., :4], "scores": scores})
