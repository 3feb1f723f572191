"""Metrics of instance segmentation, pose and oriented boxes, computed as Ultralytics' ``yolo val`` reports them.

Each task is scored by Ultralytics' own method, reimplemented in numpy (tests check it against
Ultralytics' functions on the same inputs to 1e-9, and against its segment, pose and OBB validators'
own update_metrics and get_stats to 1e-6): within each image, detections in descending
score take the unclaimed ground truth of their class with the highest IoU, at each of the ten IoU
thresholds 0.50:0.05:0.95 (``BaseValidator.match_predictions``); AP is the 101-point interpolated
area under each class's precision envelope (``compute_ap``), averaged over the classes that have
ground truth (``ap_per_class``). IoUs are float32 and compared with float32 thresholds, as there.

What is compared, per task:

- segmentation: mask IoU at the prototypes' resolution in the network input's frame (``MaskFrame``,
  ground truth drawn by ``edgebuild.accuracy.mask_frames``, intersections counted on RLEs); box IoU beside it.
- pose: OKS with COCO's 17 sigmas when ``kpt_shape`` is [17, 3], 1/K otherwise (or the dataset's
  ``kpt_oks_sigmas``), each ground truth's area its box's w x h x 0.53; box IoU beside it.
- OBB: probabilistic IoU (``batch_probiou``: the Bhattacharyya distance between the boxes' Gaussians),
  which is what Ultralytics' OBB val matches with, not the polygons' exact overlap.

COCOeval (faster-coco-eval, as ``coco_detection_metrics``) is not used here: it samples the
precision envelope instead of integrating it, has no overlap rule for masks, ignores crowd regions
and ground truth without keypoints, and caps detections per image; on the same predictions its
mask mAP50-95 was 0.009-0.050 off, box 0.001-0.005, pose 0.0002-0.003 (docs/accuracy.md,
"Metrics per task").

Ground truth (a COCO dict): annotations with "bbox" [x, y, w, h], "category_id", "iscrowd" and
"segmentation" (polygons or RLE) / "keypoints" (flat [x, y, v] * K) / "obb" (4 corners, flat).
Crowd annotations are left out, as Ultralytics' COCO converter leaves them out of its labels.
Predictions: COCO result dicts, "image_id", "category_id", "score", "bbox" [x, y, w, h] and
"segmentation" (an RLE, faster-coco-eval's or pycocotools' encode) or "mask" (a bool array), in the
frame given or at the image's size / "keypoints" (flat [x, y, confidence] * K) / "obb" ([cx, cy, w, h,
angle in radians], or 4 corners, flat). Coordinates are in the original image's pixels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from edgebuild.accuracy.mask_frames import MaskFrame, prediction_rle, rle_iou, truth_rles
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.task_decode import keypoint_oks, probiou

#: each task's metrics, the gate's default first (the one its users read), the box mAP beside it
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("top-1", "top-5"),
    "detection": ("mAP50-95", "mAP50"),
    "segmentation": ("mask mAP50-95", "mask mAP50", "box mAP50-95", "box mAP50"),
    "pose": ("pose mAP50-95", "pose mAP50", "box mAP50-95", "box mAP50"),
    "obb": ("obb mAP50-95", "obb mAP50"),
}
IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10).astype(np.float32)  # torch.linspace(0.5, 0.95, 10), float32
#: COCO's keypoint sigmas for the 17-keypoint person (Ultralytics' OKS_SIGMA)
COCO_PERSON_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07,
                               0.87, 0.87, 0.89, 0.89], np.float32) / np.float32(10.0)
POSE_AREA_SCALE = 0.53  # Ultralytics' pose val: a ground truth's OKS area is its box's w * h * 0.53
EPS = np.float32(1e-7)


def match_predictions(pred_classes: np.ndarray, true_classes: np.ndarray, iou: np.ndarray) -> np.ndarray:
    """Which detections (in descending score) are correct at each threshold: [D, 10] bool from IoU [G, D]."""
    correct = np.zeros((len(pred_classes), len(IOU_THRESHOLDS)), bool)
    iou = np.asarray(iou, np.float32) * (np.asarray(true_classes)[:, None] == np.asarray(pred_classes)[None, :])
    claimed = np.zeros((iou.shape[0], len(IOU_THRESHOLDS)), bool)
    columns = np.arange(len(IOU_THRESHOLDS))
    for j in np.flatnonzero((iou >= IOU_THRESHOLDS.min()).any(axis=0)):
        available = np.where(claimed, np.float32(0), iou[:, j, None])
        best = available.argmax(axis=0)
        correct[j] = available[best, columns] >= IOU_THRESHOLDS
        claimed[best, columns] |= correct[j]
    return correct


def _interpolated_ap(recall: np.ndarray, precision: np.ndarray) -> float:
    """Ultralytics' compute_ap: 101-point interpolation of the precision envelope, integrated by trapezoids."""
    mrec = np.concatenate(([0.0], recall, [recall[-1] if len(recall) else 1.0], [1.0]))
    mpre = np.concatenate(([1.0], precision, [0.0], [0.0]))
    mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
    x = np.linspace(0, 1, 101)
    y = np.interp(x, mrec, mpre)
    return float((np.diff(x) * (y[1:] + y[:-1]) / 2.0).sum())


def average_precision(tp: np.ndarray, conf: np.ndarray, pred_cls: np.ndarray, target_cls: np.ndarray) -> np.ndarray:
    """AP per class with ground truth and per threshold [classes, 10] (Ultralytics' ap_per_class)."""
    order = np.argsort(-conf)
    tp, pred_cls = tp[order], pred_cls[order]
    classes, counts = np.unique(target_cls, return_counts=True)
    ap = np.zeros((len(classes), tp.shape[1]))
    for ci, (c, labels) in enumerate(zip(classes, counts)):
        chosen = pred_cls == c
        if not chosen.any():
            continue
        tpc, fpc = tp[chosen].cumsum(0), (1 - tp[chosen]).cumsum(0)
        recall, precision = tpc / (labels + 1e-16), tpc / (tpc + fpc)
        for j in range(tp.shape[1]):
            ap[ci, j] = _interpolated_ap(recall[:, j], precision[:, j])
    return ap


def box_iou(true_xyxy: np.ndarray, pred_xyxy: np.ndarray) -> np.ndarray:
    """[G, D] IoU of axis-aligned boxes, float32 as Ultralytics' box_iou."""
    a, b = np.asarray(true_xyxy, np.float32)[:, None], np.asarray(pred_xyxy, np.float32)[None]
    wh = (np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2])).clip(0)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / (area_a + area_b - inter + EPS)


def corners_to_xywhr(corners: np.ndarray) -> np.ndarray:
    """[N, 8] corners -> [N, 5] the minimum-area rectangle [cx, cy, w, h, angle] (as cv2.minAreaRect finds it;
    the angle convention differs, which probiou does not see: a box is the same Gaussian either way)."""
    pts = np.asarray(corners, np.float64).reshape(-1, 4, 2)
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]  # every hull edge is among them
    best = np.full(len(pts), np.inf)
    out = np.zeros((len(pts), 5))
    for i, j in pairs:
        direction = pts[:, j] - pts[:, i]
        angle = np.arctan2(direction[:, 1], direction[:, 0])
        cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
        u, v = pts[..., 0] * cos + pts[..., 1] * sin, -pts[..., 0] * sin + pts[..., 1] * cos
        w, h = u.max(1) - u.min(1), v.max(1) - v.min(1)
        cu, cv = (u.max(1) + u.min(1)) / 2, (v.max(1) + v.min(1)) / 2
        better = w * h < best - 1e-9
        best = np.where(better, w * h, best)
        found = np.stack([cu * cos[:, 0] - cv * sin[:, 0], cu * sin[:, 0] + cv * cos[:, 0], w, h, angle], 1)
        out[better] = found[better]
    return out


def _xyxy(boxes: Sequence[Sequence[float]]) -> np.ndarray:
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)


def _score(ground_truth: JsonObject, predictions: Sequence[JsonObject],
           similarities: Mapping[str, Callable[[list[JsonObject], list[JsonObject], JsonObject], np.ndarray]]
           ) -> dict[str, float]:
    """mAP50-95 and mAP50 for each similarity (name -> IoU [G, D] of one image's truths and predictions)."""
    images = {int(i["id"]): i for i in ground_truth.get("images", [])}
    truths: dict[int, list[JsonObject]] = defaultdict(list)
    for annotation in ground_truth.get("annotations", []):
        if not annotation.get("iscrowd", 0):
            truths[int(annotation["image_id"])].append(annotation)
    found: dict[int, list[JsonObject]] = defaultdict(list)
    for prediction in predictions:
        if int(prediction["image_id"]) not in images:
            raise ValueError(f"a prediction is for image {prediction['image_id']}, "
                             "which the ground truth does not have")
        found[int(prediction["image_id"])].append(prediction)
    stats: dict[str, list[np.ndarray]] = {name: [] for name in similarities}
    conf, pred_cls, target_cls = [], [], []
    for image_id, image in images.items():
        gts = truths.get(image_id, [])
        preds = sorted(found.get(image_id, []), key=lambda p: -float(p["score"]))
        classes = np.array([a["category_id"] for a in gts], np.int64)
        labels = np.array([p["category_id"] for p in preds], np.int64)
        for name, similarity in similarities.items():
            if gts and preds:
                stats[name].append(match_predictions(labels, classes, similarity(gts, preds, image)))
            else:
                stats[name].append(np.zeros((len(preds), len(IOU_THRESHOLDS)), bool))
        conf.append(np.array([float(p["score"]) for p in preds]))
        pred_cls.append(labels)
        target_cls.append(classes)
    metrics = {}
    for name in similarities:
        ap = average_precision(np.concatenate(stats[name]) if stats[name] else np.zeros((0, 10), bool),
                               np.concatenate(conf) if conf else np.zeros(0),
                               np.concatenate(pred_cls) if pred_cls else np.zeros(0),
                               np.concatenate(target_cls) if target_cls else np.zeros(0))
        metrics[f"{name} mAP50-95"] = float(ap.mean()) if ap.size else 0.0
        metrics[f"{name} mAP50"] = float(ap[:, 0].mean()) if ap.size else 0.0
    return metrics


def _box_similarity(gts: list[JsonObject], preds: list[JsonObject], image: JsonObject) -> np.ndarray:
    return box_iou(_xyxy([a["bbox"] for a in gts]), _xyxy([p["bbox"] for p in preds]))


def segmentation_metrics(ground_truth: JsonObject, predictions: Sequence[JsonObject],
                         frames: Mapping[int, MaskFrame] | None = None,
                         truth_masks: dict[int, list[JsonObject]] | None = None) -> dict[str, float]:
    """Mask and box mAP50-95/mAP50 of instance masks, as Ultralytics' segment val.

    ``frames`` (image id -> MaskFrame): the predictions' masks are at the prototypes' resolution in the
    network input (``edgebuild.runtime.base.vision.prototype_masks``), where Ultralytics' val compares them
    and the ground truth is drawn as it draws it. Without frames, masks are at each image's size.
    ``truth_masks``: a dict this call fills with each image's ground-truth masks and reuses; pass the
    same one to score several candidates against the same ground truth and frames.
    Keys: "mask mAP50-95", "mask mAP50", "box mAP50-95", "box mAP50".
    """
    drawn = truth_masks if truth_masks is not None else {}

    def masks(gts: list[JsonObject], preds: list[JsonObject], image: JsonObject) -> np.ndarray:
        image_id = int(image["id"])
        if frames is not None and image_id not in frames:
            raise ValueError(f"no MaskFrame for image {image_id}: give one for every image, or none")
        frame = frames[image_id] if frames is not None else None
        if image_id not in drawn:
            drawn[image_id] = truth_rles(gts, image, frame)
        shape = frame.mask_size if frame is not None else (int(image["height"]), int(image["width"]))
        return rle_iou(drawn[image_id], [prediction_rle(p, shape) for p in preds])

    return _score(ground_truth, predictions, {"mask": masks, "box": _box_similarity})


def keypoint_sigmas(ground_truth: JsonObject, sigmas: Sequence[float] | None = None) -> np.ndarray:
    """The OKS sigmas Ultralytics' pose val uses: the dataset's (``sigmas``), else COCO's when ``kpt_shape``
    is [17, 3], else 1/K for each of the K keypoints."""
    shape = ground_truth.get("kpt_shape")
    if shape is None:
        lengths = [len(a["keypoints"]) // 3 for a in ground_truth.get("annotations", []) if a.get("keypoints")]
        shape = [lengths[0] if lengths else 0, 3]
    count = int(shape[0])
    if sigmas is not None:
        found = np.asarray(sigmas, np.float32).reshape(-1)
        if len(found) != count or not (found > 0).all():
            raise ValueError(f"kpt_oks_sigmas must be {count} positive values, got {list(sigmas)}")
        return found
    if [int(s) for s in shape] == [17, 3]:
        return COCO_PERSON_SIGMAS
    return np.full(count, 1.0 / max(count, 1), np.float64)


def pose_metrics(ground_truth: JsonObject, predictions: Sequence[JsonObject],
                 sigmas: Sequence[float] | None = None) -> dict[str, float]:
    """Pose (OKS) and box mAP50-95/mAP50, as Ultralytics' pose val.

    Keys: "pose mAP50-95", "pose mAP50", "box mAP50-95", "box mAP50". ``sigmas``: the dataset's
    ``kpt_oks_sigmas`` where it has them (else ``keypoint_sigmas``' rule).
    """
    chosen = keypoint_sigmas(ground_truth, sigmas)

    def oks(gts: list[JsonObject], preds: list[JsonObject], image: JsonObject) -> np.ndarray:
        count = len(chosen)
        truth = np.asarray([a["keypoints"] for a in gts], np.float32).reshape(len(gts), count, 3)
        found = np.asarray([p["keypoints"] for p in preds], np.float32).reshape(len(preds), count, 3)
        boxes = np.asarray([a["bbox"] for a in gts], np.float32).reshape(-1, 4)
        return keypoint_oks(truth, found, boxes[:, 2] * boxes[:, 3] * np.float32(POSE_AREA_SCALE), chosen)

    return _score(ground_truth, predictions, {"pose": oks, "box": _box_similarity})


def _rotated(values: Sequence[Any]) -> np.ndarray:
    flat = np.asarray(values, np.float64)
    if flat.ndim != 2 or flat.shape[1] not in (5, 8):
        raise ValueError(f"an obb is [cx, cy, w, h, angle] or 4 corners [x1, y1, ..., x4, y4], not {flat.shape[1:]}")
    return flat if flat.shape[1] == 5 else corners_to_xywhr(flat)


def obb_metrics(ground_truth: JsonObject, predictions: Sequence[JsonObject]) -> dict[str, float]:
    """Oriented-box mAP50-95/mAP50 by probabilistic IoU, as Ultralytics' OBB val ("obb mAP50-95", "obb mAP50")."""
    def rotated_iou(gts: list[JsonObject], preds: list[JsonObject], image: JsonObject) -> np.ndarray:
        return probiou(_rotated([a["obb"] for a in gts]), _rotated([p["obb"] for p in preds])).astype(np.float32)

    return _score(ground_truth, predictions, {"obb": rotated_iou})
