"""Accuracy metrics: COCO mAP, top-k accuracy for classification.

mAP comes from faster-coco-eval, a C++ implementation of pycocotools' COCOeval with the same
matching rules and the same 12 statistics (a test checks both agree on real detections); it is
about ten times faster, which matters when the gate evaluates several candidates.

COCOeval scores at most ``maxDets`` detections per image and class (100 by default); the decode
already keeps at most ``max_detections`` per image, so the cap given to COCOeval is never below
it: every detection the model reports is scored (Ultralytics' val keeps 300 per image and scores
them all). With ``max_detections`` up to 100 this is COCOeval's own default.

Instance segmentation, pose and oriented boxes are scored by Ultralytics' own method instead
(``edgebuild.accuracy.task_metrics``): COCOeval's differs from it by more than parity allows there.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.vision import top_k
from edgebuild.text import python_output_dropped

__all__ = ["coco_detection_metrics"]


def coco_ground_truth(ground_truth: JsonObject) -> Any:
    """The COCO index of a ground-truth dict, built once and reused for every candidate's detections."""
    from faster_coco_eval import COCO

    gt = copy.deepcopy(ground_truth)
    gt.setdefault("info", {})
    gt.setdefault("licenses", [])
    with python_output_dropped():
        return COCO(gt)


def coco_detection_metrics(ground_truth: Any, detections: list[JsonObject],
                           max_detections: int = 100, image_ids: list[int] | None = None) -> dict[str, float]:
    """mAP50-95 and mAP50 (COCO's stats[0] and stats[1]) of ``detections`` against ``ground_truth``
    (a COCO dict, or its index from ``coco_ground_truth``), scoring up to ``max_detections`` (at
    least COCO's 100) per image and class.

    ``detections`` are COCO result dicts: image_id, category_id, bbox [x, y, w, h], score.
    An empty detection list scores 0 rather than raising, as pycocotools would. ``image_ids``: only those
    images are scored (one image's own mAP, for a paired comparison).
    """
    from faster_coco_eval import COCOeval_faster

    if not detections:
        return {"mAP50-95": 0.0, "mAP50": 0.0}
    coco_gt = coco_ground_truth(ground_truth) if isinstance(ground_truth, dict) else ground_truth
    with python_output_dropped():  # it prints progress we do not want
        coco_dt = coco_gt.loadRes(detections)
        evaluator = COCOeval_faster(coco_gt, coco_dt, iouType="bbox", print_function=lambda *_: None)
        # stats[0] and [1] are taken at the last maxDets (faster-coco-eval; pycocotools fixes them at 100)
        evaluator.params.maxDets = [1, 10, max(100, int(max_detections))]
        if image_ids is not None:
            evaluator.params.imgIds = list(image_ids)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = [max(0.0, float(v)) for v in evaluator.stats]  # -1 means "no such objects": count as 0
    return {"mAP50-95": stats[0], "mAP50": stats[1]}


def top_k_accuracy(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    best = top_k(np.asarray(logits, dtype=np.float32), 5)
    labels = np.asarray(labels)
    return {
        "top-1": float(np.mean(best[:, 0] == labels)),
        "top-5": float(np.mean((best == labels[:, None]).any(axis=1))),
    }
