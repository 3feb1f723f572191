"""Pose, segmentation and oriented boxes as task.kind: the schema, the metric each gates on, what is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from edgebuild.sources.task_outputs import expected_outputs, task_output_mismatches
from tests.support.project import TINY_TOML, write_tiny_project

POSE = TINY_TOML.replace('outputs = ["boxes", "scores"]', 'outputs = ["boxes", "scores", "keypoints"]').replace(
    'kind = "detection"\n', 'kind = "pose"\nkpt_shape = [4, 3]\n')
SEGMENTATION = TINY_TOML.replace(
    'outputs = ["boxes", "scores"]', 'outputs = ["boxes", "scores", "mask_coefficients", "prototypes"]').replace(
    'kind = "detection"\n', 'kind = "segmentation"\n')
OBB = TINY_TOML.replace('kind = "detection"\n', 'kind = "obb"\n')


def _metric(text: str, metric: str) -> str:
    return text.replace("[accuracy]\n", f'[accuracy]\nmetric = "{metric}"\n')


def _load(tmp_path: Path, text: str):
    write_tiny_project(tmp_path, text)
    return load_project(tmp_path)


def test_pose_gates_on_pose_map_with_box_map_beside(tmp_path: Path) -> None:
    project = _load(tmp_path, POSE)
    assert project.task.kind == "pose" and project.task.kpt_shape == [4, 3]
    assert project.metric == "pose mAP50-95"
    post = project.task.postprocess
    assert (post.keypoints_output, post.nms_iou, post.max_detections) == ("keypoints", 0.7, 300)


def test_segmentation_gates_on_mask_map(tmp_path: Path) -> None:
    project = _load(tmp_path, SEGMENTATION)
    assert project.metric == "mask mAP50-95"
    assert project.task.postprocess.prototypes_output == "prototypes"


def test_obb_gates_on_obb_map_decoded_as_ultralytics_val(tmp_path: Path) -> None:
    project = _load(tmp_path, OBB)
    assert project.metric == "obb mAP50-95"
    post = project.task.postprocess
    assert (post.boxes_output, post.scores_output, post.score_threshold, post.nms_iou, post.max_detections) == \
        ("boxes", "scores", 0.001, 0.7, 300)
    assert _load(tmp_path, _metric(OBB, "obb mAP50")).metric == "obb mAP50"


def test_the_box_map_may_be_the_gate_s_metric(tmp_path: Path) -> None:
    assert _load(tmp_path, _metric(POSE, "box mAP50-95")).metric == "box mAP50-95"


@pytest.mark.parametrize("text, words", [
    (_metric(SEGMENTATION, "mAP50-95"),
     "'mAP50-95' does not apply to segmentation (allowed: mask mAP50-95, mask mAP50, box mAP50-95, box mAP50)"),
    (_metric(POSE, "mask mAP50-95"), "'mask mAP50-95' does not apply to pose"),
    (POSE.replace("kpt_shape = [4, 3]", "kpt_shape = [4, 5]"), "must be [keypoints, 2 or 3]"),
    (POSE.replace("kpt_shape = [4, 3]\n", ""), "task.kpt_shape"),
    (POSE.replace('"keypoints"]', '"kpts"]'), "task.postprocess.keypoints_output: 'keypoints' is not one of"),
    (POSE.replace("[task.preprocess]", "[task.postprocess]\nin_model = true\nmax_detections = 1001\n\n"
                  "[task.preprocess]"), "max_detections = 1001 is more than NMS inside the model returns (1000"),
    (_metric(OBB, "box mAP50-95"), "'box mAP50-95' does not apply to obb (allowed: obb mAP50-95, obb mAP50)"),
    (OBB.replace("[task.preprocess]", "[task.postprocess]\nin_model = true\n\n[task.preprocess]"),
     "not built for this task yet: TensorRT has no rotated NMS"),
], ids=["detection-metric", "mask-metric-for-pose", "kpt-dims", "no-kpt-shape", "keypoints-output", "in-model-limit",
        "box-metric-for-obb", "obb-in-model"])
def test_what_does_not_fit_the_task_is_said(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert words in str(caught.value), str(caught.value)


def test_obb_outputs_are_checked_as_rotated_boxes(tmp_path: Path) -> None:
    project = _load(tmp_path, OBB)
    classes = len(project.task.classes)
    assert expected_outputs(project) == {"boxes": "[N, A, 5]", "scores": f"[N, A, {classes}]"}
    scores = np.zeros((2, 21, classes), np.float32)
    assert task_output_mismatches(project, {"boxes": np.zeros((2, 21, 5), np.float32), "scores": scores}, 2) == []
    found = task_output_mismatches(project, {"boxes": np.zeros((2, 21, 4), np.float32), "scores": scores}, 2)
    assert [(m.output, m.kind, m.text) for m in found] == [("boxes", "layout", "boxes is [2, 21, 4], not [N, A, 5]")]


@pytest.mark.parametrize("text, kind", [(POSE, "pose"), (SEGMENTATION, "segmentation")])
def test_pose_and_segmentation_take_nms_inside_and_know_its_outputs(tmp_path: Path, text: str, kind: str) -> None:
    from edgebuild.runtime.base.vision import INSTANCE_NMS_OUTPUTS
    from edgebuild.sources.task_outputs import in_model_outputs

    project = _load(tmp_path, text.replace("[task.preprocess]", "[task.postprocess]\nin_model = true\n\n"
                                                                "[task.preprocess]"))
    assert project.task.postprocess.in_model
    shapes = in_model_outputs(project)
    assert list(shapes) == list(INSTANCE_NMS_OUTPUTS[kind])
    k = project.task.postprocess.max_detections
    assert shapes[INSTANCE_NMS_OUTPUTS[kind][4]] == (f"[N, {k}, 4, 3]" if kind == "pose" else f"[N, {k}, M]")
    # the export is the raw head: an export that answers the in-model form already is named as such
    answered = {name: np.zeros((2, 1) if name == "num_detections" else (2, k, 4), np.float32)
                for name in INSTANCE_NMS_OUTPUTS[kind]}
    found = task_output_mismatches(project, answered, 2)
    assert [m.kind for m in found] == ["in_model"] and "has NMS inside already" in found[0].text


@pytest.mark.parametrize("text", [POSE, SEGMENTATION, OBB])
def test_the_server_may_decode_every_instance_task_s_raw_outputs_by_default(tmp_path: Path, text: str) -> None:
    """``[runtime] detections = true``: the server's decode (runtime/base/task_decode.py) as the default answer."""
    assert _load(tmp_path, text + "\n[runtime]\ndetections = true\n").runtime.detections
    with_nms = text.replace("[task.postprocess]\n", "[task.postprocess]\nin_model = true\n") \
        if "[task.postprocess]\n" in text else text + "\n[task.postprocess]\nin_model = true\n"
    if text is not OBB:  # NMS inside decodes already: one of the two
        with pytest.raises(ConfigError, match="puts the decode inside the model already"):
            _load(tmp_path, with_nms + "\n[runtime]\ndetections = true\n")
