"""Pose and instance segmentation: a model's outputs decoded and scored as Ultralytics' ``yolo val`` does.

The outputs follow the convention of docs/tasks.md: boxes [N, A, 4] (x1, y1, x2, y2 in input pixels)
and scores [N, A, C] as detection's, and per anchor the keypoints [N, A, K, D] (x, y in input
pixels, with D = 3 a visibility in 0..1) or the mask coefficients [N, A, M] with the prototypes
[N, M, H/4, W/4]. Each image is decoded as Ultralytics' val decodes it (``non_max_suppression`` with
``multi_label=True``): every (anchor, class) above ``score_threshold`` is a candidate, the best
``VAL_PRE_NMS_TOP_K`` of them go through class-aware NMS at ``nms_iou``, ``max_detections`` are kept,
and the kept candidates' anchors give their keypoints or mask coefficients. Boxes and keypoints are
mapped back to the original image (OKS and box IoU do not change under the letterbox's uniform
scale and shift); masks stay at the prototypes' resolution in the network input, where Ultralytics
compares them (``MaskFrame``). The metrics are ``edgebuild.accuracy.task_metrics``'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgebuild.accuracy.mask_frames import MaskFrame
from edgebuild.accuracy.task_metrics import pose_metrics, segmentation_metrics
from edgebuild.jsontypes import JsonObject
from edgebuild.project.schema import InstancePostprocess, PosePostprocess, SegmentationPostprocess
from edgebuild.project.ultralytics_facts import VAL_PRE_NMS_TOP_K
from edgebuild.runtime.vision import ImageTransform, check_detection_outputs, class_aware_nms

if TYPE_CHECKING:
    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.datasets.project_data import Sample
    from edgebuild.project.config import Project

__all__ = []

INSTANCE_TASKS = ("pose", "segmentation")


def decode_instances(boxes: np.ndarray, scores: np.ndarray, score_threshold: float, nms_iou: float,
                     max_detections: int, pre_nms_top_k: int = VAL_PRE_NMS_TOP_K) -> dict[str, np.ndarray]:
    """One image's boxes [A, 4] and scores [A, C] -> the kept detections, best first: boxes [D, 4], scores [D],
    labels [D] and ``anchors`` [D], the anchor each came from (its keypoints or mask coefficients)."""
    anchor_idx, class_idx = np.nonzero(scores > score_threshold)
    found = scores[anchor_idx, class_idx]
    if found.size > pre_nms_top_k:
        top = np.argpartition(-found, pre_nms_top_k - 1)[:pre_nms_top_k]
        anchor_idx, class_idx, found = anchor_idx[top], class_idx[top], found[top]
    candidates = boxes[anchor_idx].astype(np.float32)
    keep = class_aware_nms(candidates, found, class_idx, nms_iou, max_detections)
    return {"boxes": candidates[keep], "scores": found[keep].astype(np.float32),
            "labels": class_idx[keep].astype(np.int64), "anchors": anchor_idx[keep].astype(np.int64)}


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
    """Pose or segmentation results of a validation set, batch by batch, and their metrics."""

    def __init__(self, project: Project, data: ValidationSet) -> None:
        task = project.task
        assert isinstance(task.postprocess, InstancePostprocess) and data.coco is not None, \
            "a pose or segmentation task's set"
        self.kind, self.post, self.coco = task.kind, task.postprocess, data.coco
        height, width = task.preprocess.input_size
        self.input_size = (int(height), int(width))
        self.results: list[JsonObject] = []
        self.frames: dict[int, MaskFrame] = {}
        # the ground truth's masks, drawn once per validation set: every candidate is scored against them
        self.truth_masks: dict[int, list[JsonObject]] = data.__dict__.setdefault("_instance_truth_masks", {})

    def add(self, chunk: list[Sample], transforms: list[ImageTransform], outputs: dict[str, np.ndarray]) -> None:
        post = self.post
        boxes, scores = outputs[post.boxes_output], outputs[post.scores_output]
        check_detection_outputs(boxes, scores, post.boxes_output, post.scores_output, len(self.coco.category_ids))
        for i, (sample, transform) in enumerate(zip(chunk, transforms)):
            found = decode_instances(boxes[i], scores[i], post.score_threshold, post.nms_iou, post.max_detections)
            xyxy = transform.boxes_to_original(found["boxes"])
            extra: list[JsonObject] = [{} for _ in found["anchors"]]
            if isinstance(post, PosePostprocess):
                points = keypoints_to_original(outputs[post.keypoints_output][i][found["anchors"]], transform)
                extra = [{"keypoints": [float(v) for v in p.reshape(-1)]} for p in points]
            else:
                extra = self._masks(sample, transform, outputs, i, found)
            for box, score, label, more in zip(xyxy, found["scores"], found["labels"], extra):
                x1, y1, x2, y2 = (float(v) for v in box)
                self.results.append({"image_id": sample.image_id, "category_id": self.coco.category_ids[int(label)],
                                     "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(score), **more})

    def _masks(self, sample: Sample, transform: ImageTransform, outputs: dict[str, np.ndarray], i: int,
               found: dict[str, np.ndarray]) -> list[JsonObject]:
        from edgebuild.runtime.vision import prototype_masks

        post = self.post
        assert isinstance(post, SegmentationPostprocess)
        prototypes = outputs[post.prototypes_output][i]
        coefficients = outputs[post.coefficients_output][i][found["anchors"]]
        self.frames[sample.image_id] = MaskFrame(transform, self.input_size, tuple(prototypes.shape[1:]))
        masks = prototype_masks(prototypes, coefficients, found["boxes"], self.input_size)
        return [{"mask": mask} for mask in masks]

    def metrics(self) -> dict[str, float]:
        truth = self.coco.ground_truth
        if self.kind == "pose":
            return pose_metrics(truth, self.results, truth.get("kpt_oks_sigmas"))
        frames = {int(image["id"]): self.frames[int(image["id"])] for image in truth.get("images", [])
                  if int(image["id"]) in self.frames}
        return segmentation_metrics(truth, self.results, frames, self.truth_masks)
