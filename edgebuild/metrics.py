"""Accuracy metrics: COCO mAP through pycocotools, top-k accuracy for classification."""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any

import numpy as np

from edgebuild.runtime.vision import top_k


def coco_detection_metrics(ground_truth: dict[str, Any], detections: list[dict[str, Any]]) -> dict[str, float]:
    """mAP50-95 and mAP50 (COCO's stats[0] and stats[1]) of ``detections`` against ``ground_truth``.

    ``detections`` are COCO result dicts: image_id, category_id, bbox [x, y, w, h], score.
    An empty detection list scores 0 rather than raising, as pycocotools would.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not detections:
        return {"mAP50-95": 0.0, "mAP50": 0.0}
    gt = copy.deepcopy(ground_truth)
    gt.setdefault("info", {})
    gt.setdefault("licenses", [])
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress we do not want
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(detections)
        evaluator = COCOeval(coco_gt, coco_dt, iouType="bbox")
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
