"""Segmentation, pose and OBB metrics against Ultralytics' own functions on the same inputs.

Ultralytics' val is not run: its matching (``BaseValidator.match_predictions``), its AP
(``ap_per_class``), its similarities (``mask_iou``, ``kpt_iou``, ``batch_probiou``, ``box_iou``),
its ground-truth masks (``resample_segments`` + ``polygons2masks_overlap``) and its mask assembly
(``ops.process_mask``) are called directly on synthetic images, so the numbers must agree to 1e-9.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgebuild.accuracy.mask_frames import MaskFrame, fill_polygon, frame_masks
from edgebuild.accuracy.task_metrics import (
    COCO_PERSON_SIGMAS,
    IOU_THRESHOLDS,
    TASK_METRICS,
    keypoint_sigmas,
    obb_metrics,
    pose_metrics,
    segmentation_metrics,
)
from edgebuild.runtime.base.vision import ImageTransform, prototype_masks
from tests.support.zoo import import_torchvision

ultralytics = pytest.importorskip("ultralytics", reason="the parity checks call Ultralytics' own metric functions "
                                                        "(pip install --no-deps -r requirements-zoo.txt)")
torch = pytest.importorskip("torch")

SIZES = [(150, 200), (180, 120), (128, 128), (90, 160), (200, 200), (140, 170)]  # (height, width)
INPUT = (160, 160)


def _ultralytics_map(images: list[tuple[object, np.ndarray, np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """mAP50-95, mAP50 from Ultralytics' match_predictions and ap_per_class: (iou [G, D] tensor, pred classes in
    descending score, true classes, scores) per image."""
    from ultralytics.engine.validator import BaseValidator
    from ultralytics.utils.metrics import ap_per_class

    holder = SimpleNamespace(iouv=torch.linspace(0.5, 0.95, 10))
    tps = []
    for iou, pred_cls, true_cls, _ in images:
        if len(pred_cls) and len(true_cls):
            tps.append(BaseValidator.match_predictions(holder, torch.tensor(pred_cls), torch.tensor(true_cls),
                                                       iou).numpy())
        else:
            tps.append(np.zeros((len(pred_cls), 10), bool))
    ap = ap_per_class(np.concatenate(tps), np.concatenate([i[3] for i in images]),
                      np.concatenate([i[1] for i in images]), np.concatenate([i[2] for i in images]))[5]
    return float(ap.mean()), float(ap[:, 0].mean())


def _polygon(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    centre = rng.uniform([0.2 * width, 0.2 * height], [0.8 * width, 0.8 * height])
    radius = rng.uniform(8, 0.35 * min(height, width))
    angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(4, 12))))
    reach = radius * rng.uniform(0.5, 1.0, len(angles))
    points = centre + np.stack([reach * np.cos(angles), reach * np.sin(angles)], axis=1)
    if rng.random() < 0.2:  # touching the image's edge
        points[0] = [width, points[0, 1]]
    return points.clip(0, [width, height])


def _frame(height: int, width: int) -> MaskFrame:
    scale = min(INPUT[0] / height, INPUT[1] / width)
    new_h, new_w = round(height * scale), round(width * scale)
    transform = ImageTransform(new_w / width, new_h / height, (INPUT[1] - new_w) // 2, (INPUT[0] - new_h) // 2,
                               width, height)
    return MaskFrame(transform, INPUT, (INPUT[0] // 4, INPUT[1] // 4))


def _ultralytics_truth_masks(gts: list[dict], image: dict, frame: MaskFrame) -> np.ndarray:
    """Ground-truth masks as Ultralytics' dataset and segment val make them (overlap_mask=True, mask_ratio=4)."""
    from ultralytics.data.utils import polygons2masks_overlap
    from ultralytics.utils.ops import resample_segments

    t = frame.transform
    size = np.array([image["width"], image["height"]], np.float64)
    segments = [(np.asarray(a["segmentation"][0], np.float64).reshape(-1, 2) / size).astype(np.float32) for a in gts]
    longest = max(len(s) for s in segments)
    segments = np.stack(resample_segments(segments, n=longest + 1 if longest > 1000 else 1000))
    segments *= np.array([round(t.scale_x * image["width"]), round(t.scale_y * image["height"])], np.float32)
    segments += np.array([t.pad_x, t.pad_y], np.float32)
    masks, order = polygons2masks_overlap(INPUT, list(segments), downsample_ratio=4)
    ranked = masks[None] == np.arange(1, len(gts) + 1)[:, None, None]  # as val's _prepare_batch
    out = np.empty_like(ranked)
    out[order] = ranked
    return out


def _segmentation_case(seed: int) -> tuple[dict, list[dict], dict[int, MaskFrame]]:
    rng = np.random.default_rng(seed)
    images, annotations, predictions, frames = [], [], [], {}
    for image_id, (height, width) in enumerate(SIZES, start=1):
        image = {"id": image_id, "file_name": f"{image_id}.png", "height": height, "width": width}
        images.append(image)
        frames[image_id] = _frame(height, width)
        for _ in range(int(rng.integers(1, 6))):
            points = _polygon(rng, height, width)
            x0, y0 = points.min(0)
            x1, y1 = points.max(0)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": int(rng.integers(1, 4)), "iscrowd": 0,
                                "segmentation": [points.reshape(-1).tolist()], "bbox": [x0, y0, x1 - x0, y1 - y0],
                                "area": float((x1 - x0) * (y1 - y0))})
    truth = {"images": images, "annotations": annotations, "categories": [{"id": i} for i in (1, 2, 3)]}
    for image in images:
        gts = [a for a in annotations if a["image_id"] == image["id"]]
        masks = frame_masks(gts, image, frames[image["id"]])
        for annotation, mask in zip(gts, masks):
            for _ in range(int(rng.integers(1, 4))):  # near misses, wrong classes, duplicates
                shifted = np.roll(mask, tuple(rng.integers(-1, 2, 2)), axis=(0, 1))
                noisy = shifted ^ (rng.random(mask.shape) < 0.002)
                jitter = rng.normal(0, 3, 4)
                box = np.asarray(annotation["bbox"]) + jitter
                predictions.append({"image_id": image["id"], "score": float(rng.random()), "mask": noisy,
                                    "category_id": annotation["category_id"] if rng.random() < 0.85 else 1,
                                    "bbox": [box[0], box[1], max(1.0, box[2]), max(1.0, box[3])]})
        spare = np.zeros(frames[image["id"]].mask_size, bool)
        spare[2:9, 3:12] = True  # a false positive
        predictions.append({"image_id": image["id"], "score": 0.5, "mask": spare, "category_id": 2,
                            "bbox": [0.0, 0.0, 20.0, 20.0]})
    return truth, predictions, frames


def _per_image(truth: dict, predictions: list[dict]) -> list[tuple[list[dict], list[dict], dict]]:
    out = []
    for image in truth["images"]:
        gts = [a for a in truth["annotations"] if a["image_id"] == image["id"] and not a.get("iscrowd")]
        preds = sorted((p for p in predictions if p["image_id"] == image["id"]), key=lambda p: -p["score"])
        out.append((gts, preds, image))
    return out


def _xyxy(boxes: list) -> object:
    b = torch.tensor(np.asarray(boxes, np.float32).reshape(-1, 4))
    return torch.cat([b[:, :2], b[:, :2] + b[:, 2:]], 1)


def _classes(items: list[dict]) -> np.ndarray:
    return np.array([i["category_id"] for i in items], np.int64)


def test_thresholds_are_ultralytics_float32_ones() -> None:
    assert np.array_equal(IOU_THRESHOLDS, torch.linspace(0.5, 0.95, 10).numpy())
    from ultralytics.utils.metrics import OKS_SIGMA

    assert np.array_equal(COCO_PERSON_SIGMAS, OKS_SIGMA)


def test_ground_truth_masks_are_ultralytics_own_pixel_for_pixel() -> None:
    truth, _, frames = _segmentation_case(0)
    for gts, _, image in _per_image(truth, []):
        ours = frame_masks(gts, image, frames[image["id"]])
        assert np.array_equal(ours, _ultralytics_truth_masks(gts, image, frames[image["id"]]))


def _yolo_dataset(folder: Path) -> tuple[dict, object]:
    """A YOLO segmentation dataset of ``_segmentation_case``'s polygons, loaded by Ultralytics' YOLODataset (val)."""
    from PIL import Image
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_yolo_dataset

    truth, _, _ = _segmentation_case(5)
    for sub in ("images", "labels"):
        (folder / sub).mkdir()
    for image in truth["images"]:
        size = np.array([image["width"], image["height"]])
        Image.new("RGB", (image["width"], image["height"])).save(folder / "images" / f"{image['id']}.png")
        lines = []
        for annotation in (a for a in truth["annotations"] if a["image_id"] == image["id"]):
            normalized = np.round(np.asarray(annotation["segmentation"][0]).reshape(-1, 2) / size, 6)
            lines.append(f"{annotation['category_id'] - 1} " + " ".join(f"{v:.6f}" for v in normalized.reshape(-1)))
            pixels = normalized * size  # what a label reader gives
            annotation["segmentation"] = [pixels.reshape(-1).tolist()]
            annotation["bbox"] = [*pixels.min(0), *(pixels.max(0) - pixels.min(0))]
        (folder / "labels" / f"{image['id']}.txt").write_text("\n".join(lines) + "\n")
    cfg = get_cfg(overrides={"task": "segment", "imgsz": INPUT[0], "rect": False})
    data = {"names": {0: "a", 1: "b", 2: "c"}, "channels": 3}
    return truth, build_yolo_dataset(cfg, str(folder / "images"), 1, data, mode="val", rect=False, stride=32)


def _loader_frame(item: dict, image: dict) -> MaskFrame:
    (gain_h, gain_w), (pad_w, pad_h) = item["ratio_pad"]
    return MaskFrame(ImageTransform(gain_w, gain_h, pad_w, pad_h, image["width"], image["height"]), INPUT,
                     (INPUT[0] // 4, INPUT[1] // 4))


def test_ground_truth_masks_are_those_of_ultralytics_own_dataset_loader(tmp_path: Path) -> None:
    """Through YOLODataset itself (label files, load_image, LetterBox, Format), in the frame its ratio_pad gives."""
    truth, dataset = _yolo_dataset(tmp_path)
    for item in (dataset[i] for i in range(len(dataset))):
        image = next(i for i in truth["images"] if i["id"] == int(Path(item["im_file"]).stem))
        gts = [a for a in truth["annotations"] if a["image_id"] == image["id"]]
        assert len(item["cls"]) == len(gts) > 0
        theirs = item["masks"][0].numpy()  # 1..n: the instances by decreasing area
        assert sorted(m.tobytes() for m in frame_masks(gts, image, _loader_frame(item, image))) == sorted(
            (theirs == k).tobytes() for k in range(1, len(gts) + 1))


def _validator(kind: type, task: str) -> object:
    """An Ultralytics validator ready for update_metrics and get_stats, as its init_metrics leaves it (3 classes)."""
    import_torchvision()  # its constructor imports torchvision (to time it); nothing here runs NMS
    validator = kind(args={"task": task, "imgsz": INPUT[0], "plots": False, "rect": False})
    validator.device, validator.iouv, validator.niou, validator.seen = torch.device("cpu"), torch.linspace(
        0.5, 0.95, 10), 10, 0
    validator.is_custom_json = validator.build_gdict = False
    validator.names, validator.nc = {0: "a", 1: "b", 2: "c"}, 3
    validator.metrics.names = validator.names
    validator.metrics.clear_stats()
    return validator


def _image_batch(image: dict, gts: list[dict], task: str, keypoints: int = 0) -> dict:
    """One image's batch as Ultralytics' loader gives it, the image taken at its own size (no letterbox)."""
    height, width = image["height"], image["width"]
    scale = np.array([width, height, width, height], np.float32)
    if task == "obb":
        boxes = [np.concatenate([np.asarray(a["xywhr"][:4]) / scale, a["xywhr"][4:]]) for a in gts]
    else:
        boxes = [np.concatenate([(np.asarray(a["bbox"][:2]) + np.asarray(a["bbox"][2:]) / 2), a["bbox"][2:]]) / scale
                 for a in gts]
    batch = {"img": torch.zeros(1, 3, height, width), "cls": torch.tensor([[a["category_id"] - 1.0] for a in gts]),
             "bboxes": torch.tensor(np.array(boxes, np.float32).reshape(len(gts), 5 if task == "obb" else 4)),
             "batch_idx": torch.zeros(len(gts)), "ori_shape": [(height, width)], "ratio_pad": [((1.0, 1.0), (0, 0))],
             "im_file": [f"images/{image['id']}.png"]}
    if task == "pose":
        points = np.array([a["keypoints"] for a in gts], np.float32).reshape(len(gts), keypoints, 3)
        batch["keypoints"] = torch.tensor((points / [width, height, 1]).astype(np.float32))
    return batch


def _image_preds(preds: list[dict], task: str) -> dict:
    out = {"conf": torch.tensor([p["score"] for p in preds], dtype=torch.float32),
           "cls": torch.tensor([p["category_id"] - 1.0 for p in preds])}
    if task == "obb":
        out["bboxes"] = torch.tensor([p["obb"] for p in preds], dtype=torch.float32)
    else:
        out["bboxes"] = _xyxy([p["bbox"] for p in preds])
    if task == "pose":
        out["keypoints"] = torch.tensor([p["keypoints"] for p in preds], dtype=torch.float32).view(len(preds), -1, 3)
    return out


def test_segmentation_metrics_are_ultralytics_segmentation_validator_own(tmp_path: Path) -> None:
    """The whole of SegmentationValidator.update_metrics and get_stats (rect=False, no save_json) on a batch of its
    own loader, with predictions made from prototypes: the same numbers from the same detections."""
    from ultralytics.models.yolo.segment import SegmentationValidator
    from ultralytics.utils import ops

    truth, dataset = _yolo_dataset(tmp_path)
    items = [dataset[i] for i in range(len(dataset))]
    validator = _validator(SegmentationValidator, "segment")
    validator.process = ops.process_mask
    batch = validator.preprocess(type(dataset).collate_fn(items))
    rng = np.random.default_rng(8)
    preds, ours, frames = [], [], {}
    for item in items:
        image = next(i for i in truth["images"] if i["id"] == int(Path(item["im_file"]).stem))
        frames[image["id"]] = frame = _loader_frame(item, image)
        instances = item["masks"][0].numpy()
        count = len(item["cls"])
        protos = np.concatenate([2.0 * (instances[None] == np.arange(1, count + 1)[:, None, None]) - 1,
                                 rng.normal(0, 0.3, (3, *instances.shape))]).astype(np.float32)
        boxes = ops.xywh2xyxy(item["bboxes"]).numpy() * INPUT[0]
        rows = []
        for k in range(count):
            for _ in range(int(rng.integers(1, 4))):
                coefficient = np.eye(count + 3)[k] + rng.normal(0, 0.35, count + 3)
                box = boxes[k] + rng.normal(0, 2, 4)
                cls = float(item["cls"][k, 0]) if rng.random() < 0.85 else float(rng.integers(0, 3))
                rows.append((box, float(rng.random()), cls, coefficient))
        rows.append((np.array([1.0, 1.0, 30.0, 25.0]), 0.6, 1.0, rng.normal(0, 1, count + 3)))  # a false positive
        rows.sort(key=lambda r: -r[1])
        box, conf, cls, coefficients = (np.array([r[i] for r in rows], np.float32) for i in range(4))
        masks = prototype_masks(protos, coefficients, box, INPUT)
        preds.append({"bboxes": torch.tensor(box), "conf": torch.tensor(conf), "cls": torch.tensor(cls),
                      "masks": ops.process_mask(torch.tensor(protos), torch.tensor(coefficients), torch.tensor(box),
                                                INPUT)})
        t = frame.transform
        for b, c, k, m in zip(box, conf, cls, masks):
            x1, y1, x2, y2 = (b[0] - t.pad_x) / t.scale_x, (b[1] - t.pad_y) / t.scale_y, (b[2] - t.pad_x) / t.scale_x, (
                b[3] - t.pad_y) / t.scale_y
            ours.append({"image_id": image["id"], "category_id": int(k) + 1, "score": float(c),
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "mask": m})
    validator.update_metrics(preds, batch)
    theirs = validator.get_stats()
    found = segmentation_metrics(truth, ours, frames)
    assert 0.1 < theirs["metrics/mAP50-95(M)"] < 0.9
    assert found == pytest.approx({"mask mAP50-95": theirs["metrics/mAP50-95(M)"],
                                   "mask mAP50": theirs["metrics/mAP50(M)"],
                                   "box mAP50-95": theirs["metrics/mAP50-95(B)"],
                                   "box mAP50": theirs["metrics/mAP50(B)"]}, abs=1e-6)


def test_fill_polygon_is_cv2_fillpoly_also_across_the_image_edge() -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(1)
    for case in range(60):
        count = int(rng.integers(3, 25))
        angles = rng.uniform(0, 2 * np.pi, count) if case % 3 == 0 else np.sort(rng.uniform(0, 2 * np.pi, count))
        reach = rng.uniform(1, 90) * rng.uniform(0.1, 1.0, count)
        centre = rng.uniform(-20, 140, 2)
        points = (centre + np.stack([reach * np.cos(angles), reach * np.sin(angles)], 1)).astype(np.int32)
        want = np.zeros((96, 128), np.uint8)
        cv2.fillPoly(want, [points], 1)
        ours = np.zeros((96, 128), np.uint8)
        fill_polygon(ours, points)
        assert np.array_equal(ours, want), f"case {case}: {points.tolist()}"


def test_segmentation_metrics_agree_with_ultralytics() -> None:
    from ultralytics.utils.metrics import box_iou, mask_iou

    truth, predictions, frames = _segmentation_case(2)
    truth["annotations"].append({"id": 999, "image_id": 1, "category_id": 1, "iscrowd": 1, "bbox": [0, 0, 50, 50],
                                 "area": 2500.0, "segmentation": [[0, 0, 50, 0, 50, 50, 0, 50]]})  # left out
    masks, boxes = [], []
    for gts, preds, image in _per_image(truth, predictions):
        want = torch.tensor(_ultralytics_truth_masks(gts, image, frames[image["id"]]), dtype=torch.float32)
        found = torch.tensor(np.stack([p["mask"] for p in preds]), dtype=torch.float32)
        scores = np.array([p["score"] for p in preds])
        masks.append((mask_iou(want.flatten(1), found.flatten(1)), _classes(preds), _classes(gts), scores))
        boxes.append((box_iou(_xyxy([a["bbox"] for a in gts]), _xyxy([p["bbox"] for p in preds])), _classes(preds),
                      _classes(gts), scores))
    ours = segmentation_metrics(truth, predictions, frames)
    mask_map, mask_map50 = _ultralytics_map(masks)
    box_map, box_map50 = _ultralytics_map(boxes)
    assert 0.1 < mask_map < 0.9 and 0.1 < box_map < 0.9, "neither trivial nor hopeless"
    assert ours == pytest.approx({"mask mAP50-95": mask_map, "mask mAP50": mask_map50, "box mAP50-95": box_map,
                                  "box mAP50": box_map50}, abs=1e-9)
    assert tuple(ours) == TASK_METRICS["segmentation"]


def test_segmentation_masks_may_come_as_rle_and_at_the_image_size() -> None:
    from faster_coco_eval.core import mask as mask_utils

    truth, predictions, frames = _segmentation_case(3)
    as_rle = [{**{k: v for k, v in p.items() if k != "mask"},
               "segmentation": mask_utils.encode(np.asfortranarray(p["mask"].astype(np.uint8)))} for p in predictions]
    drawn: dict = {}  # ground-truth masks drawn once, reused for the next candidate
    assert segmentation_metrics(truth, as_rle, frames, drawn) == segmentation_metrics(truth, predictions, frames)
    assert sorted(drawn) == [image["id"] for image in truth["images"]]
    assert segmentation_metrics(truth, predictions, frames, drawn) == segmentation_metrics(truth, as_rle, frames)
    perfect = []
    for gts, _, image in _per_image(truth, []):  # no frame: COCO's own polygons at the image's size
        for annotation, mask in zip(gts, frame_masks(gts, image, None)):
            perfect.append({"image_id": image["id"], "category_id": annotation["category_id"], "score": 0.9,
                            "bbox": annotation["bbox"], "mask": mask})
    # 0.995, not 1: compute_ap's last recall point drops to precision 0 at recall 1 (Ultralytics' own perfect score)
    assert segmentation_metrics(truth, perfect) == pytest.approx(dict.fromkeys(TASK_METRICS["segmentation"], 0.995))
    with pytest.raises(ValueError, match="prototypes' size"):
        segmentation_metrics(truth, perfect, frames)
    assert segmentation_metrics(truth, []) == dict.fromkeys(TASK_METRICS["segmentation"], 0.0)


def test_prototype_masks_are_ultralytics_process_mask() -> None:
    from ultralytics.utils.ops import process_mask

    rng = np.random.default_rng(4)
    protos = rng.normal(size=(32, 40, 40)).astype(np.float32)
    coefficients = rng.normal(size=(12, 32)).astype(np.float32)
    corner = rng.uniform(0, 120, (12, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(4, 60, (12, 2))], 1).astype(np.float32)
    want = process_mask(torch.tensor(protos), torch.tensor(coefficients), torch.tensor(boxes), (160, 160)).numpy()
    ours = prototype_masks(protos, coefficients, boxes, (160, 160))
    assert ours.shape == (12, 40, 40) and ours.dtype == bool
    assert np.array_equal(ours, want.astype(bool))


def _pose_case(seed: int, keypoints: int) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(seed)
    images, annotations, predictions = [], [], []
    for image_id, (height, width) in enumerate(SIZES, start=1):
        images.append({"id": image_id, "height": height, "width": width})
        for _ in range(0 if image_id == 2 else int(rng.integers(1, 5))):  # image 2: no ground truth
            x, y = rng.uniform(0, 0.6 * width), rng.uniform(0, 0.6 * height)
            w, h = rng.uniform(10, 0.4 * width), rng.uniform(10, 0.4 * height)
            points = np.stack([rng.uniform(x, x + w, keypoints), rng.uniform(y, y + h, keypoints),
                               rng.choice([0, 1, 2], keypoints, p=[0.2, 0.2, 0.6])], 1)
            points[points[:, 2] == 0, :2] = 0
            category = int(rng.integers(1, 3))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "iscrowd": 0, "bbox": [x, y, w, h], "area": w * h,
                                "keypoints": points.reshape(-1).tolist(),
                                "num_keypoints": int((points[:, 2] > 0).sum())})
            for _ in range(int(rng.integers(1, 4))):
                guess = np.stack([points[:, 0] + rng.normal(0, 0.04 * w, keypoints),
                                  points[:, 1] + rng.normal(0, 0.04 * h, keypoints), rng.random(keypoints)], 1)
                box = np.array([x, y, w, h]) + rng.normal(0, 3, 4)
                predictions.append({"image_id": image_id, "category_id": category if rng.random() < 0.9 else 2,
                                    "score": float(rng.random()), "keypoints": guess.reshape(-1).tolist(),
                                    "bbox": [box[0], box[1], max(1.0, box[2]), max(1.0, box[3])]})
        predictions.append({"image_id": image_id, "category_id": 1, "score": 0.3, "bbox": [1.0, 1.0, 9.0, 9.0],
                            "keypoints": [5.0, 5.0, 0.5] * keypoints})  # a false positive
    return {"images": images, "annotations": annotations, "kpt_shape": [keypoints, 3]}, predictions


@pytest.mark.parametrize("keypoints", [17, 5])
def test_pose_metrics_agree_with_ultralytics(keypoints: int) -> None:
    from ultralytics.utils.metrics import box_iou, kpt_iou

    truth, predictions = _pose_case(5 + keypoints, keypoints)
    sigmas = keypoint_sigmas(truth)
    assert np.array_equal(sigmas, COCO_PERSON_SIGMAS) if keypoints == 17 else np.allclose(sigmas, 1 / keypoints)
    poses, boxes = [], []
    for gts, preds, _ in _per_image(truth, predictions):
        scores = np.array([p["score"] for p in preds])
        if gts:
            want = torch.tensor([a["keypoints"] for a in gts], dtype=torch.float32).view(len(gts), keypoints, 3)
            found = torch.tensor([p["keypoints"] for p in preds], dtype=torch.float32).view(len(preds), keypoints, 3)
            box = _xyxy([a["bbox"] for a in gts])
            area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1]) * 0.53
            oks = kpt_iou(want, found, sigma=sigmas, area=area)
            iou = box_iou(box, _xyxy([p["bbox"] for p in preds]))
        else:
            oks = iou = None
        poses.append((oks, _classes(preds), _classes(gts), scores))
        boxes.append((iou, _classes(preds), _classes(gts), scores))
    ours = pose_metrics(truth, predictions)
    pose_map, pose_map50 = _ultralytics_map(poses)
    box_map, box_map50 = _ultralytics_map(boxes)
    assert 0.1 < pose_map < 0.95
    assert ours == pytest.approx({"pose mAP50-95": pose_map, "pose mAP50": pose_map50, "box mAP50-95": box_map,
                                  "box mAP50": box_map50}, abs=1e-9)
    assert tuple(ours) == TASK_METRICS["pose"]


def test_pose_sigmas_follow_the_dataset_then_the_keypoint_shape() -> None:
    truth = {"annotations": [{"keypoints": [0.0] * 51}]}
    assert np.array_equal(keypoint_sigmas(truth), COCO_PERSON_SIGMAS)  # no kpt_shape: COCO's [17, 3]
    assert np.allclose(keypoint_sigmas({**truth, "kpt_shape": [17, 2]}), 1 / 17)  # as Ultralytics: only [17, 3]
    assert np.allclose(keypoint_sigmas({**truth, "kpt_shape": [4, 3]}, [0.1, 0.2, 0.3, 0.4]), [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="4 positive values"):
        keypoint_sigmas({**truth, "kpt_shape": [4, 3]}, [0.1, 0.2])


def _obb_case(seed: int) -> tuple[dict, list[dict]]:
    from ultralytics.utils.ops import xywhr2xyxyxyxy

    rng = np.random.default_rng(seed)
    images, annotations, predictions = [], [], []
    for image_id, (height, width) in enumerate(SIZES, start=1):
        images.append({"id": image_id, "height": height, "width": width})
        boxes = np.stack([rng.uniform(20, width - 20, 4), rng.uniform(20, height - 20, 4), rng.uniform(8, 60, 4),
                          rng.uniform(4, 30, 4), rng.uniform(-np.pi, np.pi, 4)], 1)[: int(rng.integers(1, 5))]
        corners = xywhr2xyxyxyxy(torch.tensor(boxes)).reshape(-1, 8).numpy()
        for box, corner in zip(boxes, corners):
            category = int(rng.integers(1, 3))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "iscrowd": 0, "obb": corner.tolist(), "bbox": [0, 0, 1, 1], "area": 1.0})
            for _ in range(int(rng.integers(1, 4))):
                guess = box + rng.normal(0, [2, 2, 3, 2, 0.1])
                guess[2:4] = np.abs(guess[2:4]) + 1
                predictions.append({"image_id": image_id, "category_id": category if rng.random() < 0.9 else 1,
                                    "score": float(rng.random()), "obb": guess.tolist()})
    return {"images": images, "annotations": annotations}, predictions


def test_obb_metrics_agree_with_ultralytics_probiou() -> None:
    from ultralytics.utils.metrics import batch_probiou
    from ultralytics.utils.ops import xywhr2xyxyxyxy, xyxyxyxy2xywhr

    truth, predictions = _obb_case(7)
    per_image = []
    for gts, preds, _ in _per_image(truth, predictions):
        want = xyxyxyxy2xywhr(torch.tensor([a["obb"] for a in gts], dtype=torch.float32))
        iou = batch_probiou(want, torch.tensor([p["obb"] for p in preds], dtype=torch.float32))
        per_image.append((iou, _classes(preds), _classes(gts), np.array([p["score"] for p in preds])))
    ours = obb_metrics(truth, predictions)
    obb_map, obb_map50 = _ultralytics_map(per_image)
    assert 0.1 < obb_map < 0.9
    assert ours == pytest.approx({"obb mAP50-95": obb_map, "obb mAP50": obb_map50}, abs=1e-6)
    as_corners = [{**p, "obb": xywhr2xyxyxyxy(torch.tensor([p["obb"]])).reshape(8).tolist()} for p in predictions]
    assert obb_metrics(truth, as_corners) == pytest.approx(ours, abs=1e-6)
    assert tuple(ours) == TASK_METRICS["obb"]


@pytest.mark.parametrize("keypoints", [17, 5])
def test_pose_metrics_are_ultralytics_pose_validator_own(keypoints: int) -> None:
    """PoseValidator's own update_metrics and get_stats: its OKS area rule and sigmas, not only kpt_iou."""
    from ultralytics.models.yolo.pose import PoseValidator

    truth, predictions = _pose_case(20 + keypoints, keypoints)
    validator = _validator(PoseValidator, "pose")
    validator.kpt_shape = [keypoints, 3]
    validator.sigma = keypoint_sigmas(truth)  # init_metrics' rule, checked above
    for gts, preds, image in _per_image(truth, predictions):
        validator.update_metrics([_image_preds(preds, "pose")], _image_batch(image, gts, "pose", keypoints))
    theirs = validator.get_stats()
    assert 0.1 < theirs["metrics/mAP50-95(P)"] < 0.95
    assert pose_metrics(truth, predictions) == pytest.approx(
        {"pose mAP50-95": theirs["metrics/mAP50-95(P)"], "pose mAP50": theirs["metrics/mAP50(P)"],
         "box mAP50-95": theirs["metrics/mAP50-95(B)"], "box mAP50": theirs["metrics/mAP50(B)"]}, abs=1e-6)


def test_obb_metrics_are_ultralytics_obb_validator_own() -> None:
    from ultralytics.models.yolo.obb import OBBValidator
    from ultralytics.utils.ops import xyxyxyxy2xywhr

    truth, predictions = _obb_case(9)
    for annotation in truth["annotations"]:  # the loader's own rectangle of the corners
        annotation["xywhr"] = xyxyxyxy2xywhr(np.array([annotation["obb"]], np.float32))[0].tolist()
    validator = _validator(OBBValidator, "obb")
    for gts, preds, image in _per_image(truth, predictions):
        validator.update_metrics([_image_preds(preds, "obb")], _image_batch(image, gts, "obb"))
    theirs = validator.get_stats()
    assert 0.1 < theirs["metrics/mAP50-95(B)"] < 0.9
    assert obb_metrics(truth, predictions) == pytest.approx(
        {"obb mAP50-95": theirs["metrics/mAP50-95(B)"], "obb mAP50": theirs["metrics/mAP50(B)"]}, abs=1e-6)
