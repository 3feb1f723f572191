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
Pose, segmentation and OBB (``match = "instances"``): the same F1 of the task's own decode
(``task_decode``: the gate's, raw outputs or NMS inside), where a detection matches only when its
box and what the task adds both agree with FP32's at ``iou``: pose the box IoU and the keypoints'
OKS (``KEYPOINT_SIGMA`` of the box's size, FP32's visible keypoints); segmentation the box IoU and
the mask IoU (masks at the prototypes' resolution, ``prototype_masks``); OBB the probabilistic IoU
of the rotated boxes. An engine that breaks only the keypoints, the masks or the angle fails (the angle
where the boxes are elongated: the probabilistic IoU of a near-square box barely moves with it).
(Files written before that compare pose's and segmentation's boxes, and the upright boxes around
OBB's.) Classification: the share of inputs whose top-1 class is FP32's.

Python 3.8 and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from edgebuild.errors import ModelError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import ACCEPTANCE_FILE
from edgebuild.runtime.base.task_decode import decode_instance_outputs, instances_in_model, keypoint_oks, probiou
from edgebuild.runtime.base.vision import decode_outputs, prototype_masks
from edgebuild.runtime.engines.backends import Runner

__all__ = []

Found = Tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes [K, 4], scores [K], labels [K]
#: a task's detections: boxes, scores, labels and pose's ``keypoints`` [K, kpts, D] or segmentation's ``masks``
#: [K, h, w] bool
Instances = List[Dict[str, np.ndarray]]
#: the keypoint similarity of the acceptance set: OKS with every keypoint's sigma this (a keypoint off by 5 % of
#: the box's size scores about 0.88, by 10 % about 0.61)
KEYPOINT_SIGMA = 0.05


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    iw = (np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])).clip(0)
    ih = (np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])).clip(0)
    inter = iw * ih
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


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


def task_instances(outputs: Mapping[str, np.ndarray], settings: Mapping[str, Any], min_score: float) -> Instances:
    """A pose, segmentation or OBB model's detections scoring ``min_score`` or more (the only ones compared) by its
    task's own decode (``settings``: the stored decode settings: ``kind``, the output names, thresholds,
    ``in_model``, ``input_size``), segmentation's masks drawn from its prototypes for those alone."""
    kind = str(settings["kind"])
    if bool(settings["in_model"]):
        found = instances_in_model(outputs, kind)
    else:
        found = decode_instance_outputs(outputs, kind, settings, int(settings["pre_nms_top_k"]))
    for image in found:
        keep = image["scores"] >= min_score
        image.update({k: v[keep] for k, v in image.items() if k != "prototypes"})
    if kind == "segmentation":
        size = tuple(int(v) for v in np.asarray(settings["input_size"]).reshape(-1))
        for image in found:
            image["masks"] = prototype_masks(image.pop("prototypes"), image.pop("coefficients"), image["boxes"],
                                             (size[0], size[1]))
    return found


def _oks(reference: np.ndarray, keypoints: np.ndarray, box: np.ndarray) -> np.ndarray:
    """OKS (``keypoint_oks``, the metric's) of one FP32 detection's keypoints [kpts, D] with candidates' [M, kpts, D]:
    FP32's visible ones count (all where D = 2), every sigma ``KEYPOINT_SIGMA``, the box's area as the scale; a
    detection with no visible keypoint agrees."""
    visible = reference[:, 2] > 0.5 if reference.shape[-1] == 3 else np.ones(len(reference), bool)
    if not visible.any():
        return np.ones(len(keypoints))
    truth = np.concatenate([reference[:, :2], visible[:, None]], axis=-1)[None]
    area = np.asarray([(box[2] - box[0]) * (box[3] - box[1])])
    return keypoint_oks(truth, keypoints, area, np.full(len(reference), KEYPOINT_SIGMA))[0]


def _mask_iou(reference: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """IoU of one FP32 mask [h, w] with candidates' [M, h, w] (two empty masks agree)."""
    inter = (masks & reference[None]).reshape(len(masks), -1).sum(-1)
    union = (masks | reference[None]).reshape(len(masks), -1).sum(-1)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def detection_agreement(reference: Instances, got: Instances, kind: str, min_score: float, iou: float) -> float:
    """The F1 of the detections scoring ``min_score`` or more, ``got``'s matched greedily, best score first, to
    ``reference``'s of the same class where the box (``kind`` "obb": rotated, by probabilistic IoU) and pose's
    keypoints (OKS) or segmentation's mask (IoU) all reach ``iou``: 2 x matches / (both counts)."""
    matched, total = 0, 0
    for ref, found in zip(reference, got):
        keep_ref, keep = ref["scores"] >= min_score, found["scores"] >= min_score
        total += int(keep_ref.sum()) + int(keep.sum())
        ref_index = np.nonzero(keep_ref)[0]
        free = np.ones(len(ref_index), dtype=bool)
        for i in np.nonzero(keep)[0][np.argsort(-found["scores"][keep], kind="stable")]:
            candidates = free & (ref["labels"][ref_index] == found["labels"][i])
            if not candidates.any():
                continue
            if kind == "obb":
                similar = probiou(found["boxes"][i:i + 1], ref["boxes"][ref_index])[0]
            else:
                similar = _iou(found["boxes"][i], ref["boxes"][ref_index])
            for j, r in enumerate(ref_index):
                if not candidates[j] or similar[j] < iou:
                    continue
                if kind == "pose":
                    similar[j] = min(similar[j], float(_oks(ref["keypoints"][r], found["keypoints"][i:i + 1],
                                                            ref["boxes"][r])[0]))
                elif kind == "segmentation":
                    similar[j] = min(similar[j], float(_mask_iou(ref["masks"][r], found["masks"][i:i + 1])[0]))
            overlap = np.where(candidates, similar, -1.0)
            best = int(np.argmax(overlap))
            if overlap[best] >= iou:
                free[best] = False
                matched += 1
    return 1.0 if total == 0 else 2.0 * matched / total


def pack_instances(found: Instances, prefix: str) -> Dict[str, np.ndarray]:
    """``pack_found`` with pose's keypoints and segmentation's masks (bit-packed, with their shape)."""
    packed = pack_found([(f["boxes"], f["scores"], f["labels"]) for f in found], prefix)
    if found and "keypoints" in found[0]:
        packed[prefix + "keypoints"] = np.concatenate([f["keypoints"] for f in found]).astype(np.float32)
    if found and "masks" in found[0]:
        masks = np.concatenate([f["masks"] for f in found]).astype(bool)
        packed[prefix + "mask_shape"] = np.asarray(masks.shape, np.int64)
        packed[prefix + "masks"] = np.packbits(masks.reshape(-1))
    return packed


def split_instances(stored: Mapping[str, np.ndarray], prefix: str) -> Instances:
    """What ``pack_instances`` packed, per image."""
    keypoints = stored[prefix + "keypoints"] if prefix + "keypoints" in stored else None
    masks = None
    if prefix + "masks" in stored:
        shape = tuple(int(v) for v in stored[prefix + "mask_shape"])
        masks = np.unpackbits(stored[prefix + "masks"])[:int(np.prod(shape))].astype(bool).reshape(shape)
    out, start = [], 0
    for boxes, scores, labels in split_found(stored, prefix):
        end = start + len(scores)
        image = {"boxes": boxes, "scores": scores, "labels": labels}
        if keypoints is not None:
            image["keypoints"] = keypoints[start:end]
        if masks is not None:
            image["masks"] = masks[start:end]
        out.append(image)
        start = end
    return out


#: the kinds and matches this runtime reads; a file that names another was written by a newer edgebuild
KINDS, MATCHES = ("detection", "classification", "pose", "segmentation", "obb"), ("instances",)


def agreement_of(stored: Mapping[str, np.ndarray], outputs: Dict[str, np.ndarray]) -> float:
    """This backend's agreement with the FP32 results stored in an acceptance file (a ModelError for a file this
    runtime cannot read, rather than a KeyError deep inside)."""
    kind, match = str(stored["kind"]), str(stored["match"]) if "match" in stored else None
    if kind not in KINDS or (match is not None and match not in MATCHES):
        raise ModelError("the acceptance set is of a form this runtime does not read (kind {!r}{}): a newer "
                         "edgebuild wrote the model folder".format(kind, ", match {!r}".format(match) if match else ""),
                         hint="update the device's edgebuild runtime image to the release that compiled the model")
    if match == "instances":
        min_score = float(stored["min_score"])
        return detection_agreement(split_instances(stored, "fp32_"), task_instances(outputs, stored, min_score),
                                   str(stored["kind"]), min_score, float(stored["iou"]))
    if str(stored["kind"]) == "obb":  # a file of an earlier release: the upright boxes around the rotated ones
        outputs = upright_boxes(outputs, str(stored["boxes_output"]))
    if str(stored["kind"]) in ("detection", "obb"):
        return detection_agreement(split_instances(stored, "fp32_"), decode_outputs(outputs, stored), "detection",
                                   float(stored["min_score"]), float(stored["iou"]))
    logits = outputs[str(stored["logits_output"])]
    return float(np.mean(np.argmax(logits, axis=-1) == stored["fp32_top1"]))


_STATISTICS = {kind: "detection agreement with FP32 (F1)" for kind in ("detection", "pose", "segmentation", "obb")}
#: what an instance task's match compares beside the box
_COMPARED = {"pose": "boxes and keypoints (OKS)", "segmentation": "boxes and masks (IoU)",
             "obb": "rotated boxes (probabilistic IoU)"}


def check(runner: Runner, folder: Path, input_name: str, batch: int) -> JsonObject:
    """Run the acceptance set of ``folder`` through ``runner``: the agreement, the threshold, and the verdict."""
    with np.load(str(Path(folder) / ACCEPTANCE_FILE), allow_pickle=False) as stored:
        inputs = unpack_inputs(stored["inputs_u8"], float(stored["inputs_scale"]), float(stored["inputs_offset"]))
        value = agreement_of(stored, run_outputs(runner, inputs, input_name, batch))
        threshold = float(stored["threshold"])
        return {"statistic": _STATISTICS.get(str(stored["kind"]), "top-1 agreement with FP32")
                + (": " + _COMPARED[str(stored["kind"])] if "match" in stored else ""),
                "value": round(value, 4), "threshold": round(threshold, 4),
                "images": int(inputs.shape[0]), "passed": value >= threshold}
