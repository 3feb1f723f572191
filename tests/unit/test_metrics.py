"""The accuracy metrics: top-k accuracy, and COCO detection metrics built on pycocotools."""

from __future__ import annotations

import numpy as np
import pytest

from edgebuild.metrics import coco_detection_metrics, top_k_accuracy


def test_top_k_accuracy() -> None:
    logits = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]])
    assert top_k_accuracy(logits, np.array([1, 2])) == {"top-1": 0.5, "top-5": 1.0}


def _coco_gt() -> dict:
    return {
        "images": [{"id": 1, "file_name": "a.png", "width": 100, "height": 100}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30],
                         "area": 900, "iscrowd": 0}],
        "categories": [{"id": 1, "name": "circle"}],
    }


def test_coco_metrics_perfect_shifted_and_empty() -> None:
    perfect = coco_detection_metrics(_coco_gt(), [{"image_id": 1, "category_id": 1,
                                                   "bbox": [10, 10, 30, 30], "score": 0.9}])
    assert perfect["mAP50-95"] == pytest.approx(1.0) and perfect["mAP50"] == pytest.approx(1.0)
    # shifted by 6 px: IoU = 24*30/(2*900-720) = 0.667 -> matches at 0.50..0.65 only
    shifted = coco_detection_metrics(_coco_gt(), [{"image_id": 1, "category_id": 1,
                                                   "bbox": [16, 10, 30, 30], "score": 0.9}])
    assert shifted["mAP50"] == pytest.approx(1.0)
    assert shifted["mAP50-95"] == pytest.approx(0.4, abs=1e-6)
    assert coco_detection_metrics(_coco_gt(), []) == {"mAP50-95": 0.0, "mAP50": 0.0}
