"""Pose, instance segmentation and oriented boxes: a model's outputs decoded and scored as Ultralytics' ``yolo val``.

The outputs follow the convention of docs/tasks.md: boxes [N, A, 4] (x1, y1, x2, y2 in input pixels)
and scores [N, A, C] as detection's, and per anchor the keypoints [N, A, K, D] (x, y in input
pixels, with D = 3 a visibility in 0..1) or the mask coefficients [N, A, M] with the prototypes
[N, M, H/4, W/4]. Each image is decoded as Ultralytics' val decodes it (``non_max_suppression`` with
``multi_label=True``): every (anchor, class) above ``score_threshold`` is a candidate, the best
``VAL_PRE_NMS_TOP_K`` of them go through class-aware NMS at ``nms_iou``, ``max_detections`` are kept,
and the kept candidates' anchors give their keypoints or mask coefficients (``edgebuild.runtime.base.task_decode``:
one decode, which the device's server runs too). Boxes and keypoints are
mapped back to the original image (OKS and box IoU do not change under the letterbox's uniform
scale and shift); masks stay at the prototypes' resolution in the network input, where Ultralytics
compares them (``MaskFrame``). The metrics are ``edgebuild.accuracy.task_metrics``'.

Oriented boxes [N, A, 5] (cx, cy, w, h in input pixels, the angle in radians) go through rotated NMS as
Ultralytics' ``non_max_suppression(rotated=True)``: the same candidates, then Fast-NMS by probabilistic
IoU (``rotated_fast_nms``: a box is dropped when any better box of its class overlaps it above
``nms_iou``, whether or not that one was kept), and are mapped back as its OBB validator's
``scale_boxes(xywh=True)`` maps them (centre less the padding, centre and size over the scale).

NMS inside the model (``[task.postprocess] in_model``, pose and segmentation: ``edgebuild.sources.export.nms_graph``)
answers ``INSTANCE_NMS_OUTPUTS``: the same detections with each one's keypoints or mask coefficients, and the
prototypes. ``instances_in_model`` reads them into the host decode's form, so both are scored alike; the host's
decode of such a model's raw head keeps the graph's ``pre_nms_top_k`` (1000), not Ultralytics' 30000, to be
its parity reference (as detection's does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgebuild.accuracy.mask_frames import MaskFrame
from edgebuild.accuracy.task_metrics import obb_metrics, pose_metrics, segmentation_metrics
from edgebuild.jsontypes import JsonObject
from edgebuild.project.schema import InstancePostprocess
from edgebuild.project.ultralytics_facts import VAL_PRE_NMS_TOP_K
from edgebuild.runtime.base.task_decode import decode_instance_outputs, instances_in_model
from edgebuild.runtime.base.task_decode import decode_instances as decode_instances  # the tests' and sources' name
from edgebuild.runtime.base.task_decode import rotated_fast_nms as rotated_fast_nms
from edgebuild.runtime.base.vision import (
    DetectionParams,
    ImageTransform,
)

if TYPE_CHECKING:
    from edgebuild.accuracy.validation_set import ValidationSet
    from edgebuild.datasets.project_data import Sample
    from edgebuild.project.config import Project

__all__ = []

INSTANCE_TASKS = ("pose", "segmentation", "obb")


def rotated_to_original(boxes: np.ndarray, transform: ImageTransform) -> np.ndarray:
    """[D, 5] cx, cy, w, h, angle in network-input pixels -> the original image's, as Ultralytics'
    ``scale_boxes(..., xywh=True)``: not clipped (a rotated box's corners may leave the image)."""
    out = np.asarray(boxes, np.float32).reshape(-1, 5).copy()
    out[:, 0] = (out[:, 0] - transform.pad_x) / transform.scale_x
    out[:, 1] = (out[:, 1] - transform.pad_y) / transform.scale_y
    out[:, 2] /= transform.scale_x
    out[:, 3] /= transform.scale_y
    return out


def rotated_corners(boxes: np.ndarray) -> np.ndarray:
    """[D, 5] cx, cy, w, h, angle -> [D, 4, 2] the corners (Ultralytics' ``xywhr2xyxyxyxy``)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 5)
    cos, sin = np.cos(boxes[:, 4]), np.sin(boxes[:, 4])
    half_w = np.stack([cos, sin], 1) * boxes[:, 2:3] / 2
    half_h = np.stack([-sin, cos], 1) * boxes[:, 3:4] / 2
    centre = boxes[:, :2]
    return np.stack([centre + half_w + half_h, centre + half_w - half_h, centre - half_w - half_h,
                     centre - half_w + half_h], 1)


def keypoints_to_original(keypoints: np.ndarray, transform: ImageTransform) -> np.ndarray:
    """[D, K, 2 or 3] in network-input pixels -> [D, K, 3] in the original image's (a visibility of 1 added
    where the model gives none), not clipped: Ultralytics' val compares them unclipped in its input frame."""
    out = np.asarray(keypoints, np.float32).copy()
    out[..., 0] = (out[..., 0] - transform.pad_x) / transform.scale_x
    out[..., 1] = (out[..., 1] - transform.pad_y) / transform.scale_y
    if out.shape[-1] == 2:
        out = np.concatenate([out, np.ones((*out.shape[:-1], 1), np.float32)], axis=-1)
    return out


class InstanceCollector:
    """Pose, segmentation or oriented-box results of a validation set, batch by batch, and their metrics."""

    def __init__(self, project: Project, data: ValidationSet, raw_head: bool = False) -> None:
        """``raw_head``: the outputs are the raw head's even where the project puts NMS inside the model."""
        task = project.task
        assert isinstance(task.postprocess, InstancePostprocess) and data.coco is not None, \
            "a pose, segmentation or OBB task's set"
        self.kind, self.post, self.coco = task.kind, task.postprocess, data.coco
        self.settings = task.postprocess.model_dump()  # the decode's: output names and thresholds
        self.in_model = task.postprocess.in_model and not raw_head
        # the graph keeps detection's 1000 candidates: its raw head is decoded as it, to be its reference
        self.pre_nms_top_k = DetectionParams.pre_nms_top_k if task.postprocess.in_model else VAL_PRE_NMS_TOP_K
        height, width = task.preprocess.input_size
        self.input_size = (int(height), int(width))
        self.results: list[JsonObject] = []
        self.frames: dict[int, MaskFrame] = {}
        # the ground truth's masks, drawn once per validation set: every candidate is scored against them
        self.truth_masks = data.truth_masks

    def add(self, chunk: list[Sample], transforms: list[ImageTransform], outputs: dict[str, np.ndarray]) -> None:
        for sample, transform, found in zip(chunk, transforms, self.decode(outputs)):
            self.add_found(sample, transform, found)

    def decode(self, outputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Every image's kept detections in network-input pixels: boxes, scores, labels and pose's ``keypoints``
        or segmentation's ``coefficients`` and ``prototypes``; read as they are from a model with NMS inside."""
        if self.in_model:
            return instances_in_model(outputs, self.kind)
        return decode_instance_outputs(outputs, self.kind, self.settings, self.pre_nms_top_k,
                                       len(self.coco.category_ids))

    def add_found(self, sample: Sample, transform: ImageTransform, found: dict[str, np.ndarray]) -> None:
        """One image's decoded detections (``decode``'s form) as results in the original image."""
        if self.kind == "obb":
            self._rotated(sample, transform, found)
            return
        xyxy = transform.boxes_to_original(found["boxes"])
        extra: list[JsonObject]
        if self.kind == "pose":
            points = keypoints_to_original(found["keypoints"], transform)
            extra = [{"keypoints": [float(v) for v in p.reshape(-1)]} for p in points]
        else:
            extra = self._masks(sample, transform, found)
        for box, score, label, more in zip(xyxy, found["scores"], found["labels"], extra):
            x1, y1, x2, y2 = (float(v) for v in box)
            self.results.append({"image_id": sample.image_id, "category_id": self.coco.category_ids[int(label)],
                                 "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(score), **more})

    def _rotated(self, sample: Sample, transform: ImageTransform, found: dict[str, np.ndarray]) -> None:
        """Oriented boxes: ``obb`` [cx, cy, w, h, angle] in the original image, ``bbox`` their corners' extent."""
        rotated = rotated_to_original(found["boxes"], transform)
        corners = rotated_corners(rotated)
        low = corners.min(axis=1).clip(0, [transform.original_width, transform.original_height])
        high = corners.max(axis=1).clip(0, [transform.original_width, transform.original_height])
        for box, start, end, score, label in zip(rotated, low, high, found["scores"], found["labels"]):
            self.results.append({"image_id": sample.image_id, "category_id": self.coco.category_ids[int(label)],
                                 "bbox": [float(start[0]), float(start[1]), float(end[0] - start[0]),
                                          float(end[1] - start[1])],
                                 "score": float(score), "obb": [float(v) for v in box]})

    def _masks(self, sample: Sample, transform: ImageTransform, found: dict[str, np.ndarray]) -> list[JsonObject]:
        from edgebuild.runtime.base.vision import prototype_masks

        prototypes, coefficients = found["prototypes"], found["coefficients"]
        self.frames[sample.image_id] = MaskFrame(transform, self.input_size, tuple(prototypes.shape[1:]))
        masks = prototype_masks(prototypes, coefficients, found["boxes"], self.input_size)
        return [{"mask": mask} for mask in masks]

    def metrics(self) -> dict[str, float]:
        truth = self.coco.ground_truth
        if self.kind == "obb":
            return obb_metrics(truth, self.results)
        if self.kind == "pose":
            return pose_metrics(truth, self.results, truth.get("kpt_oks_sigmas"))
        frames = {int(image["id"]): self.frames[int(image["id"])] for image in truth.get("images", [])
                  if int(image["id"]) in self.frames}
        return segmentation_metrics(truth, self.results, frames, self.truth_masks)

