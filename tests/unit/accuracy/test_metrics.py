"""The accuracy metrics: top-k accuracy, and COCO detection metrics (faster-coco-eval, checked against pycocotools)."""

from __future__ import annotations

import numpy as np
import pytest

from edgebuild.accuracy.metrics import coco_detection_metrics, top_k_accuracy


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


def _pycocotools_stats(ground_truth: dict, detections: list[dict]) -> list[float]:
    import contextlib
    import copy
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = copy.deepcopy(ground_truth)
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        evaluator = COCOeval(coco, coco.loadRes(copy.deepcopy(detections)), iouType="bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [max(0.0, float(v)) for v in evaluator.stats[:2]]


def test_coco_metrics_agree_with_pycocotools_on_many_noisy_detections() -> None:
    from edgebuild.accuracy.metrics import coco_ground_truth

    rng = np.random.default_rng(3)
    images, annotations, detections = [], [], []
    for image in range(1, 41):
        images.append({"id": image, "file_name": f"{image}.png", "width": 200, "height": 160})
        for _ in range(rng.integers(1, 5)):
            x, y, w, h = rng.uniform(0, 120), rng.uniform(0, 90), rng.uniform(8, 70), rng.uniform(8, 60)
            category = int(rng.integers(1, 4))
            annotations.append({"id": len(annotations) + 1, "image_id": image, "category_id": category,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
            for _ in range(3):  # near misses, wrong classes, duplicates
                jitter = rng.normal(0, 6, 4)
                detections.append({"image_id": image, "category_id": category if rng.random() < 0.8 else 1,
                                   "bbox": [x + jitter[0], y + jitter[1], max(1.0, w + jitter[2]),
                                            max(1.0, h + jitter[3])], "score": float(rng.random())})
    gt = {"images": images, "annotations": annotations,
          "categories": [{"id": i, "name": f"c{i}"} for i in (1, 2, 3)]}
    ours = coco_detection_metrics(gt, detections)
    want = _pycocotools_stats(gt, detections)
    assert 0.1 < want[0] < 0.9, "a test set that is neither trivial nor hopeless"
    assert [ours["mAP50-95"], ours["mAP50"]] == pytest.approx(want, abs=1e-9)
    index = coco_ground_truth(gt)  # built once, reused for several candidates
    assert coco_detection_metrics(index, detections) == ours == coco_detection_metrics(index, detections)


def test_coco_metrics_score_every_detection_up_to_max_detections() -> None:
    """COCOeval's own cap is 100 per image and class; a decode that keeps 300 (Ultralytics') is scored whole."""
    boxes = [[20.0 * (i % 15), 20.0 * (i // 15), 10.0, 10.0] for i in range(150)]
    gt = {"images": [{"id": 1, "file_name": "a.png", "width": 300, "height": 200}],
          "annotations": [{"id": i + 1, "image_id": 1, "category_id": 1, "bbox": b, "area": 100.0, "iscrowd": 0}
                          for i, b in enumerate(boxes)],
          "categories": [{"id": 1, "name": "dot"}]}
    found = [{"image_id": 1, "category_id": 1, "bbox": b, "score": 1.0 - i / 1000} for i, b in enumerate(boxes)]
    assert coco_detection_metrics(gt, found)["mAP50-95"] == pytest.approx(100 / 150, abs=0.01)
    assert coco_detection_metrics(gt, found, max_detections=100) == coco_detection_metrics(gt, found)
    assert coco_detection_metrics(gt, found, max_detections=300)["mAP50-95"] == pytest.approx(1.0)
