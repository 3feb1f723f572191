"""The acceptance check a model folder runs before it serves: does this backend agree with FP32?

The host puts ``acceptance.npz`` in every model folder (``edgebuild compile``'s engine stage): a
few dozen preprocessed validation inputs, what the FP32 model gives for them (decoded detections,
or the top-1 class), and the agreement threshold derived from the gate. Before warm-up, the server
runs its backend (the engine built at first boot, or whatever it serves) on those inputs and
compares: a backend that agrees less than the threshold is not served; the server stays not
ready with the numbers, and the OTA health check fails, so the update rolls back.

Detection agreement: per image, the confident detections (score >= ``min_score``) of the backend
are matched greedily, best score first, to the FP32 ones of the same class at IoU >= ``iou``;
agreement = 2 x matches / (backend's + FP32's confident detections), over all images (an F1).
Pose and segmentation: the detection agreement of their boxes and scores; OBB: of the upright boxes
around its oriented ones (keypoints and masks are not compared). Classification: the share of
inputs whose top-1 class is FP32's.

Python 3.8 and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from pathlib import Path
from typing import Dict, List, Mapping, Tuple

import numpy as np

from edgebuild.runtime.backends import Runner
from edgebuild.runtime.json_object import JsonObject
from edgebuild.runtime.recipe import ACCEPTANCE_FILE
from edgebuild.runtime.vision import decode_outputs

__all__ = ["ACCEPTANCE_FILE"]

Found = Tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes [K, 4], scores [K], labels [K]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    iw = (np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])).clip(0)
    ih = (np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])).clip(0)
    inter = iw * ih
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def detection_agreement(reference: List[Found], got: List[Found], min_score: float, iou: float) -> float:
    matched, total = 0, 0
    for (ref_boxes, ref_scores, ref_labels), (boxes, scores, labels) in zip(reference, got):
        keep_ref, keep = ref_scores >= min_score, scores >= min_score
        ref_boxes, ref_labels = ref_boxes[keep_ref], ref_labels[keep_ref]
        boxes, labels, scores = boxes[keep], labels[keep], scores[keep]
        total += len(ref_boxes) + len(boxes)
        free = np.ones(len(ref_boxes), dtype=bool)
        for i in np.argsort(-scores, kind="stable"):
            candidates = free & (ref_labels == labels[i])
            if not candidates.any():
                continue
            overlap = np.where(candidates, _iou(boxes[i], ref_boxes), -1.0)
            best = int(np.argmax(overlap))
            if overlap[best] >= iou:
                free[best] = False
                matched += 1
    return 1.0 if total == 0 else 2.0 * matched / total


def split_found(stored: Mapping[str, np.ndarray], prefix: str) -> List[Found]:
    counts = stored[prefix + "counts"].tolist()
    out, start = [], 0
    for count in counts:
        end = start + count
        out.append((stored[prefix + "boxes"][start:end], stored[prefix + "scores"][start:end],
                    stored[prefix + "labels"][start:end]))
        start = end
    return out


def pack_found(found: List[Found], prefix: str) -> Dict[str, np.ndarray]:
    return {prefix + "boxes": np.concatenate([f[0] for f in found]).astype(np.float32) if found else np.zeros((0, 4)),
            prefix + "scores": np.concatenate([f[1] for f in found]).astype(np.float32) if found else np.zeros(0),
            prefix + "labels": np.concatenate([f[2] for f in found]).astype(np.int64) if found else np.zeros(0),
            prefix + "counts": np.asarray([len(f[1]) for f in found], np.int64)}


def pack_inputs(inputs: np.ndarray) -> Tuple[np.ndarray, float, float]:
    """Preprocessed inputs as 8-bit codes with one scale and offset (they came from 8-bit images)."""
    low, high = float(inputs.min()), float(inputs.max())
    scale = (high - low) / 255.0 or 1.0
    return np.round((inputs - low) / scale).astype(np.uint8), scale, low


def unpack_inputs(packed: np.ndarray, scale: float, offset: float) -> np.ndarray:
    return (packed.astype(np.float32) * np.float32(scale) + np.float32(offset)).astype(np.float32)


def run_outputs(runner: Runner, inputs: np.ndarray, input_name: str, batch: int) -> Dict[str, np.ndarray]:
    """The backend's outputs for ``inputs``, ``batch`` rows at a time, concatenated."""
    parts = {}  # type: Dict[str, List[np.ndarray]]
    for start in range(0, len(inputs), batch):
        for key, value in runner.run({input_name: np.ascontiguousarray(inputs[start:start + batch])}).items():
            parts.setdefault(key, []).append(np.asarray(value))
    return {k: np.concatenate(v) for k, v in parts.items()}


def upright_boxes(outputs: Dict[str, np.ndarray], name: str) -> Dict[str, np.ndarray]:
    """``outputs`` with oriented boxes [N, A, 5] (cx, cy, w, h, angle) as the upright boxes around them (x1, y1,
    x2, y2): an OBB model's acceptance compares those (the angle moves them as it moves the box)."""
    cx, cy, w, h, angle = np.moveaxis(np.asarray(outputs[name], dtype=np.float32), -1, 0)
    cos, sin = np.abs(np.cos(angle)), np.abs(np.sin(angle))
    half_w, half_h = (cos * w + sin * h) / 2, (sin * w + cos * h) / 2
    return dict(outputs, **{name: np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=-1)})


def agreement_of(stored: Mapping[str, np.ndarray], outputs: Dict[str, np.ndarray]) -> float:
    """This backend's agreement with the FP32 results stored in an acceptance file."""
    if str(stored["kind"]) == "obb":
        outputs = upright_boxes(outputs, str(stored["boxes_output"]))
    if str(stored["kind"]) in ("detection", "obb"):
        got = [(f["boxes"], f["scores"], f["labels"]) for f in decode_outputs(outputs, stored)]
        return detection_agreement(split_found(stored, "fp32_"), got, float(stored["min_score"]), float(stored["iou"]))
    logits = outputs[str(stored["logits_output"])]
    return float(np.mean(np.argmax(logits, axis=-1) == stored["fp32_top1"]))


def check(runner: Runner, folder: Path, input_name: str, batch: int) -> JsonObject:
    """Run the acceptance set of ``folder`` through ``runner``: the agreement, the threshold, and the verdict."""
    with np.load(str(Path(folder) / ACCEPTANCE_FILE), allow_pickle=False) as stored:
        inputs = unpack_inputs(stored["inputs_u8"], float(stored["inputs_scale"]), float(stored["inputs_offset"]))
        value = agreement_of(stored, run_outputs(runner, inputs, input_name, batch))
        threshold = float(stored["threshold"])
        return {"statistic": "detection agreement with FP32 (F1)" if str(stored["kind"]) in ("detection", "obb")
                else "top-1 agreement with FP32", "value": round(value, 4), "threshold": round(threshold, 4),
                "images": int(inputs.shape[0]), "passed": value >= threshold}
